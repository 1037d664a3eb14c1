// Finds the network namespaces of pods that were already running when the agent started, by
// scanning /proc once (Istio: cni/pkg/nodeagent/podcgroupns_linux.go, PodNetnsProcFinder, used by
// buildZtunnelSnapshot). Nothing on the CNI path gives us those namespaces again, and ztunnel
// needs an fd for each enrolled pod in its first snapshot.
//
// For each process: stat <pid>/ns/net for the namespace identity, read <pid>/cgroup for the pod
// UID the kubelet put in the cgroup path, read <pid>/stat for the start time. Then, per wanted
// pod, open the best namespace and prove it belongs to the pod before handing it out.
//
// Every read may fail: processes come and go during the scan, and some entries are unreadable
// (here <procDir>/1/ns/net is). Such processes are skipped silently; nothing in a single pid
// dir is fatal.
import { readdir, readFile, stat } from 'node:fs/promises';
import { isIP } from 'node:net';
import { join } from 'node:path';
import { sameNetns, type NetAddon, type NetnsHandle, type NetnsIdentity } from '../addon/net-addon.js';
import { silentLogger, type Logger } from '../ops/log.js';

export interface ProcNetnsFinderOptions {
  addon: NetAddon;
  /** --proc-dir: the host's /proc as mounted in the agent (/host/proc). */
  procDir: string;
  /**
   * The agent's own netns (the host's: the agent runs with hostNetwork). Istio compares with
   * <proc>/1/ns/net; that entry is not always readable, and without ALLOW_SWITCH_TO_HOST_NS the
   * agent's own namespace is the host one, so the caller passes it.
   */
  hostNetns: NetnsIdentity;
  log?: Logger;
}

export interface PodToFind {
  uid: string;
  /** The pod's IPs (status.podIPs); the namespace must hold one of them. */
  ips: string[];
}

/** How many /proc entries are examined at once (each costs a few small reads). */
const SCAN_CONCURRENCY = 64;

interface ProcessInfo {
  pid: number;
  uid: string;
  ino: number;
  dev: number;
  startTime: number;
}

/** One network namespace in which processes of one pod were seen. */
interface Candidate {
  ino: number;
  dev: number;
  /** The pod's processes in this namespace, oldest first. */
  processes: Array<{ pid: number; startTime: number }>;
}

export class ProcNetnsFinder {
  readonly #addon: NetAddon;
  readonly #procDir: string;
  readonly #host: NetnsIdentity;
  readonly #log: Logger;

  constructor(opts: ProcNetnsFinderOptions) {
    this.#addon = opts.addon;
    this.#procDir = opts.procDir;
    this.#host = { ino: opts.hostNetns.ino, dev: opts.hostNetns.dev };
    this.#log = (opts.log ?? silentLogger).child({ component: 'proc-netns-finder' });
  }

  /**
   * One pass over /proc. Returns uid → open handle for each pod whose namespace was found and
   * verified; the caller owns those handles. Every other handle opened here is closed before
   * this resolves. Pods without IPs are deferred (never returned): their ownership cannot be
   * proven yet. Rejects only when the proc dir itself cannot be listed.
   */
  async find(pods: ReadonlyArray<PodToFind>): Promise<Map<string, NetnsHandle>> {
    const wanted = new Map<string, Set<string>>();
    for (const pod of pods) {
      const ips = pod.ips.map(canonicalIp).filter((ip): ip is string => ip !== undefined);
      if (ips.length === 0) {
        this.#log.debug({ uid: pod.uid }, 'pod has no IP yet: netns lookup deferred');
        continue;
      }
      const set = wanted.get(pod.uid) ?? new Set<string>();
      for (const ip of ips) set.add(ip);
      wanted.set(pod.uid, set);
    }
    const found = new Map<string, NetnsHandle>();
    if (wanted.size === 0) return found;

    const processes = await this.#scan(new Set(wanted.keys()));

    // Group by pod, then by namespace: each namespace is opened at most once per pod, however
    // many processes share it. Istio skips a namespace once ANY process in it was seen; that
    // lets a foreign process seen first hide the real pod, so here the key is (pod, netns).
    // More than one namespace for a pod happens (a container with its own netns, a sandbox
    // being replaced, a process that joined another netns); the oldest process's namespace
    // that passes the ownership check wins, as in Istio (oldest first).
    const byUid = new Map<string, Map<string, Candidate>>();
    for (const p of processes) {
      const perNs = byUid.get(p.uid) ?? new Map<string, Candidate>();
      byUid.set(p.uid, perNs);
      const key = `${p.dev}:${p.ino}`;
      const cand = perNs.get(key) ?? { ino: p.ino, dev: p.dev, processes: [] };
      perNs.set(key, cand);
      cand.processes.push({ pid: p.pid, startTime: p.startTime });
    }

    await Promise.all(
      [...byUid].map(async ([uid, perNs]) => {
        const candidates = [...perNs.values()];
        for (const c of candidates) c.processes.sort(olderFirst);
        candidates.sort((a, b) => olderFirst(a.processes[0]!, b.processes[0]!));
        if (candidates.length > 1) {
          this.#log.warn(
            { uid, netns: candidates.map((c) => c.ino) },
            'found more than one netns for the same pod, will use the oldest process netns',
          );
        }
        const handle = await this.#firstOwned(uid, wanted.get(uid)!, candidates);
        if (handle) found.set(uid, handle);
      }),
    );
    return found;
  }

  /** Reads every numeric entry of the proc dir; keeps processes of wanted pods outside the host netns. */
  async #scan(wantedUids: ReadonlySet<string>): Promise<ProcessInfo[]> {
    let entries;
    try {
      entries = await readdir(this.#procDir, { withFileTypes: true });
    } catch (err) {
      throw new Error(`cannot list ${this.#procDir} to find pod network namespaces: ${(err as Error).message}`, { cause: err });
    }
    const pids = entries.filter((e) => e.isDirectory() && /^\d+$/.test(e.name)).map((e) => Number(e.name));
    const out: ProcessInfo[] = [];
    for (let i = 0; i < pids.length; i += SCAN_CONCURRENCY) {
      const batch = await Promise.all(pids.slice(i, i + SCAN_CONCURRENCY).map((pid) => this.#examine(pid, wantedUids)));
      for (const info of batch) if (info) out.push(info);
    }
    return out;
  }

  async #examine(pid: number, wantedUids: ReadonlySet<string>): Promise<ProcessInfo | undefined> {
    const dir = join(this.#procDir, String(pid));
    try {
      // stat follows the magic link to the nsfs inode: (ino, dev) identify the namespace.
      const ns = await stat(join(dir, 'ns', 'net'));
      // A process in the host netns may carry a pod UID in its cgroup (a hostNetwork pod, or
      // a pod whose netns is the host's by mistake). Rules written there would cut the node
      // off, so the host netns is never a candidate (istio/istio#55139).
      if (sameNetns(ns, this.#host)) return undefined;
      const uid = parseCgroupPodUid(await readFile(join(dir, 'cgroup'), 'utf8')).podUid;
      if (uid === '' || !wantedUids.has(uid)) return undefined;
      const startTime = parseProcStatStartTime(await readFile(join(dir, 'stat'), 'utf8'));
      return { pid, uid, ino: ns.ino, dev: ns.dev, startTime };
    } catch (err) {
      // Vanished (ENOENT, ESRCH), unreadable (EACCES), or content we cannot parse.
      this.#log.trace({ pid, err: (err as Error).message }, 'skipping process');
      return undefined;
    }
  }

  /**
   * Opens the candidates in order (oldest first) and returns the first that holds one of the
   * pod's IPs; closes every other handle it opened.
   *
   * Why the check: the cgroup says which pod a process belongs to, not which namespace it sits
   * in. A process can join another pod's netns (nsenter, a debugging or monitoring tool, a
   * runtime helper), and a pid can be reused between the scan and the open. Handing ztunnel
   * the wrong namespace would run this pod's proxy in another pod's network. The pod IP is
   * assigned inside its own netns only, so an interface address equal to a pod IP proves it.
   */
  async #firstOwned(uid: string, ips: ReadonlySet<string>, candidates: Candidate[]): Promise<NetnsHandle | undefined> {
    for (const cand of candidates) {
      const handle = this.#open(cand);
      if (!handle) continue;
      let owned = false;
      try {
        if (sameNetns(handle, this.#host)) {
          // The pid was reused by a host process between the scan and the open.
          this.#log.debug({ uid, path: handle.path }, 'netns opened is the host netns: skipped');
        } else {
          const [res] = await this.#addon.run(handle, [{ op: 'listAddresses' }] as const);
          owned = res.addresses.some((a) => ips.has(canonicalIp(a.address) ?? ''));
          if (!owned) {
            this.#log.info(
              { uid, path: handle.path, ino: cand.ino, podIps: [...ips], found: res.addresses.map((a) => a.address) },
              'netns of a process of this pod does not hold the pod IP: not the pod netns, skipped',
            );
          }
        }
      } catch (err) {
        this.#log.debug({ uid, path: handle.path, err: (err as Error).message }, 'cannot inspect netns: skipped');
      }
      if (owned) {
        this.#log.debug({ uid, path: handle.path, ino: handle.ino }, 'found pod netns');
        return handle;
      }
      handle.close();
    }
    return undefined;
  }

  /** Opens the candidate's namespace through its oldest process that is still there. */
  #open(cand: Candidate): NetnsHandle | undefined {
    for (const { pid } of cand.processes) {
      try {
        return this.#addon.openNetns(join(this.#procDir, String(pid), 'ns', 'net'));
      } catch {
        // That process exited since the scan; another one may still hold the namespace.
      }
    }
    return undefined;
  }
}

function olderFirst(a: { pid: number; startTime: number }, b: { pid: number; startTime: number }): number {
  return a.startTime - b.startTime || a.pid - b.pid;
}

// ---------------------------------------------------------------------------------------------
// Pure parsers (exported for tests)

/**
 * Field 22 (starttime, clock ticks since boot) of /proc/<pid>/stat. The comm field (2) is in
 * parentheses and may itself contain spaces and ')', so fields are counted after the LAST ')'.
 * Throws on malformed content.
 */
export function parseProcStatStartTime(text: string): number {
  const close = text.lastIndexOf(')');
  if (close === -1) throw new Error('invalid stat format: no ")"');
  const fields = text
    .slice(close + 1)
    .trim()
    .split(/\s+/);
  // fields[0] is field 3 (state), so field 22 is fields[19].
  const value = fields.length >= 20 ? fields[19] : undefined;
  if (value === undefined) throw new Error('not enough fields in stat');
  if (!/^\d+$/.test(value)) throw new Error(`invalid starttime ${JSON.stringify(value)}`);
  const n = Number(value);
  if (!Number.isSafeInteger(n)) throw new Error(`starttime out of range: ${value}`);
  return n;
}

export interface CgroupPodIds {
  /** Canonical pod UID (dashes), or '' when the path names a container but no pod (CRI-O + KubeEdge). */
  podUid: string;
  containerId: string;
}

// Go's [[:punct:]] is ASCII punctuation: !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~
const P = '[!-\\/:-@\\[-`{-~]';
const NP = '[^!-\\/:-@\\[-`{-~]';
// Not punctuation, or '/': the same language as Go's `(?:[[:^punct:]]*/*)*` (A*B* repeated is
// (A|B)*) without its exponential backtracking in a backtracking engine.
const NP_OR_SLASH = '[^!-.:-@\\[-`{-~]';
const X = '[0-9A-Fa-f]';
const UID = `${X}{8}${P}?${X}{4}${P}?${X}{4}${P}?${X}{4}${P}?${X}{12}`;

/**
 * Istio's cgroupREs (copied from SPIRE). 1: a "pod"-prefixed pod UID (any punctuation between
 * its groups: systemd uses '_', cgroupfs '-') followed by punctuation-separated segments and the
 * container ID at the end; 2: a CRI-O `crio-<id>` path WITHOUT a pod UID (KubeEdge). A path
 * matching both is ambiguous and ignored.
 */
const CGROUP_RE_POD = new RegExp(`${P}pod(${UID})${P}(?:${NP}+${P})*(${NP}+)$`);
const CGROUP_RE_CRIO = new RegExp(`(pod${UID}${P})?${NP_OR_SLASH}*crio${P}(${NP}+)$`);

/** One cgroup path (the third field of a /proc/<pid>/cgroup line) → ids, or undefined. */
export function podIdsFromCgroupPath(cgroupPath: string): CgroupPodIds | undefined {
  // Trim ".scope" first, as Istio does, so the container ID is the last segment.
  const path = cgroupPath.endsWith('.scope') ? cgroupPath.slice(0, -'.scope'.length) : cgroupPath;
  let result: CgroupPodIds | undefined;
  // The substring checks only skip regexes that cannot match (each needs that literal).
  const pod = path.includes('pod') ? CGROUP_RE_POD.exec(path) : null;
  if (pod) result = { podUid: canonicalizePodUid(pod[1] as string), containerId: pod[2] as string };
  const crio = matchCrio(path);
  if (crio && crio[1] === undefined) {
    if (result) return undefined; // both patterns match: ambiguous
    result = { podUid: '', containerId: crio[2] as string };
  }
  return result;
}

const CRIO_TAIL = new RegExp(`crio${P}${NP}+$`);
const NP_OR_SLASH_CHAR = new RegExp(`^${NP_OR_SLASH}$`);
/** "pod" + 32 hex digits + 4 optional separators + 1 punctuation: the longest the group can be. */
const MAX_POD_GROUP = 40;

/**
 * CGROUP_RE_CRIO.exec(path), in linear time. A plain exec tries every start position and, from
 * each, scans to the end and back: quadratic on a long crafted path. The match must end with
 * `crio<punct><final segment>`; it can only start inside the run of non-punctuation-or-'/'
 * characters before that, or up to MAX_POD_GROUP characters earlier (the optional pod group),
 * so only those starts are tried, leftmost first, as the regex engine would.
 */
function matchCrio(path: string): RegExpExecArray | null {
  const tail = CRIO_TAIL.exec(path);
  if (!tail) return null;
  let runStart = tail.index;
  while (runStart > 0 && NP_OR_SLASH_CHAR.test(path[runStart - 1] as string)) runStart--;
  const sticky = new RegExp(CGROUP_RE_CRIO.source, 'y');
  for (let start = Math.max(0, runStart - MAX_POD_GROUP); start <= runStart; start++) {
    sticky.lastIndex = start;
    const m = sticky.exec(path);
    if (m) return m;
  }
  return null; // not reached: the regex matches at runStart
}

/**
 * Punctuation between the UID groups ('_' from the systemd driver) becomes '-', as Go's
 * canonicalizePodUID (unicode.IsPunct: ASCII symbols such as '+' are left alone).
 */
function canonicalizePodUid(uid: string): string {
  return uid.replace(/[!"#%&'()*,\-./:;?@[\\\]_{}]/g, '-');
}

/**
 * The pod UID and container ID in the contents of /proc/<pid>/cgroup, cgroup v1
 * ("<id>:<controllers>:<path>", one line per hierarchy) and v2 ("0::<path>") alike. Lines that
 * name no container are ignored; lines naming different containers or pods are an error, as is
 * a line without two colons. No match at all gives {podUid: '', containerId: ''}.
 */
export function parseCgroupPodUid(text: string): CgroupPodIds {
  const lines = text.split('\n');
  if (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
  let podUid = '';
  let containerId = '';
  for (const raw of lines) {
    const line = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
    const first = line.indexOf(':');
    const second = first === -1 ? -1 : line.indexOf(':', first + 1);
    if (second === -1)
      throw new Error(`cgroup entry ${JSON.stringify(line)} does not have the form hierarchy-ID:controller-list:cgroup-path`);
    const ids = podIdsFromCgroupPath(line.slice(second + 1));
    if (!ids) continue;
    if (containerId === '') {
      podUid = ids.podUid;
      containerId = ids.containerId;
    } else if (containerId !== ids.containerId) {
      throw new Error(`multiple container IDs found in cgroups (${containerId}, ${ids.containerId})`);
    } else if (podUid !== ids.podUid) {
      throw new Error(`multiple pod UIDs found in cgroups (${podUid}, ${ids.podUid})`);
    }
  }
  return { podUid, containerId };
}

/**
 * One spelling per address, so the pod IP from the API and the address from netlink compare
 * equal: IPv4 as is, IPv6 fully expanded in lower case (zones and prefix lengths dropped).
 * Undefined for anything that is not an IP.
 */
export function canonicalIp(input: string): string | undefined {
  let s = input.trim();
  const slash = s.indexOf('/');
  if (slash !== -1) s = s.slice(0, slash);
  const pct = s.indexOf('%');
  if (pct !== -1) s = s.slice(0, pct);
  const family = isIP(s);
  if (family === 4) return s;
  if (family !== 6) return undefined;
  let text = s.toLowerCase();
  // An embedded IPv4 tail (::ffff:10.0.0.1) becomes two hextets.
  const v4 = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (v4) {
    const [a, b, c, d] = v4.slice(1).map(Number) as [number, number, number, number];
    text = `${text.slice(0, v4.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head = '', tail] = text.split('::');
  const headParts = head === '' ? [] : head.split(':');
  const tailParts = tail === undefined || tail === '' ? [] : tail.split(':');
  const fill = tail === undefined ? [] : new Array<string>(8 - headParts.length - tailParts.length).fill('0');
  return [...headParts, ...fill, ...tailParts].map((h) => h.padStart(4, '0')).join(':');
}
