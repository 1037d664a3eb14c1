// Helpers for the fault-injection tests around DemoEnvironment (a node netns with the real bridge
// + host-local plugins, our plugin chained, the agent as its own process, a ztunnel stand-in):
// pods without apps (a netns and the chained CNI commands), concurrent CNI commands from a
// separate runtime process (cni-driver.mjs), the agent process's fds, and an independent check
// of a pod's in-pod rules (the agent's own verify plus the nft and ip binaries' listings).
import { execFileSync, spawn } from 'node:child_process';
import { readdirSync, readlinkSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { NetAddon, NetnsHandle } from '../../src/addon/net-addon.js';
import { CniRuntime, type CniCommand, type CniPod, type CniResult } from '../../src/demo/cni-runtime.js';
import { procTcpSockets, TCP_ESTABLISHED } from '../../src/util/proc-tcp.js';
import { CNI_PLUGIN_DIR, type DemoEnvironment } from '../../src/demo/environment.js';
import { stateFileName, STATE_DIR } from '../../src/standalone/state-store.js';
import { describeDrift } from '../../src/rules/drift.js';
import { NftablesInpodRules } from '../../src/rules/nftables-manager.js';
import { defaultRuleSettings, NO_OVERRIDES } from '../../src/rules/settings.js';
import { projectRoot } from '../../src/project-root.js';
import { createNetns, deleteNetns, execIn, ipIn, type TestNetns } from './netns.js';
import { sleep } from './wait.js';

const DRIVER = fileURLToPath(new URL('./cni-driver.mjs', import.meta.url));
const DIST = join(projectRoot(import.meta.url), 'dist');

/** DemoEnvironment's node namespace file. */
export function demoNodeNetnsPath(env: DemoEnvironment): string {
  return env.nodeNetnsPath;
}

export interface FaultPod {
  name: string;
  uid: string;
  ns: TestNetns;
  cni: CniPod;
  namespace: string;
}

let podCounter = 0;

/** A pod sandbox as a runtime prepares it: a fresh netns (lo up), a container ID, Kubernetes CNI_ARGS. */
export function makePod(tag: string, namespace = 'faults'): FaultPod {
  const n = ++podCounter;
  const name = `${tag}-${n}`;
  const uid = `00000000-0000-4000-8000-${(process.pid * 1000 + n).toString(16).padStart(12, '0')}`;
  const ns = createNetns(tag.slice(0, 3));
  const containerId = `c${process.pid}x${n}`;
  return {
    name,
    uid,
    ns,
    namespace,
    cni: {
      containerId,
      netnsPath: ns.path,
      args: { K8S_POD_NAME: name, K8S_POD_NAMESPACE: namespace, K8S_POD_INFRA_CONTAINER_ID: containerId, K8S_POD_UID: uid },
    },
  };
}

/** CNI commands run from this process, one at a time (the stand-in shares our addon threads). */
export function cniRuntime(env: DemoEnvironment, addon: NetAddon, node: NetnsHandle): CniRuntime {
  return new CniRuntime({ addon, nodeNetns: node, pluginDirs: [env.binDir, CNI_PLUGIN_DIR], conflist: env.chainedConfig() });
}

export type DriverLine =
  | { id: string; command: CniCommand; ok: true; ms: number; result: CniResult | null }
  | {
      id: string;
      command: CniCommand;
      ok: false;
      ms: number;
      code: number | null;
      msg: string | null;
      details: string | null;
      error: string;
    };

export interface DriverJob {
  id: string;
  pod: CniPod;
  commands: CniCommand[];
}

/** A running cni-driver.mjs: `lines` fills as commands finish; `done` resolves when all did. */
export class CniDriverRun {
  readonly lines: DriverLine[] = [];
  readonly done: Promise<{ wallMs: number }>;
  #waiters = new Set<() => void>();

  constructor(env: DemoEnvironment, jobs: DriverJob[]) {
    const input = {
      distDir: DIST,
      nodeNetns: demoNodeNetnsPath(env),
      pluginDirs: [env.binDir, CNI_PLUGIN_DIR],
      conflist: env.chainedConfig(),
      jobs,
    };
    const child = spawn(process.execPath, [DRIVER], { stdio: ['pipe', 'pipe', 'pipe'] });
    let buffered = '';
    let stderr = '';
    let wallMs: number | undefined;
    child.stdout.setEncoding('utf8').on('data', (d: string) => {
      buffered += d;
      for (let i = buffered.indexOf('\n'); i >= 0; i = buffered.indexOf('\n')) {
        const line = JSON.parse(buffered.slice(0, i)) as DriverLine | { done: true; wallMs: number };
        buffered = buffered.slice(i + 1);
        if ('done' in line) wallMs = line.wallMs;
        else this.lines.push(line);
        for (const w of [...this.#waiters]) w();
      }
    });
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    this.done = new Promise((resolve, reject) => {
      child.once('error', reject);
      child.once('close', (code) => {
        if (code === 0 && wallMs !== undefined) resolve({ wallMs });
        else reject(new Error(`CNI driver exited with ${code}: ${stderr.trim()}`));
      });
    });
    child.stdin.end(JSON.stringify(input));
  }

  /** Resolves once `predicate` holds for the lines so far. */
  until(predicate: (lines: readonly DriverLine[]) => boolean): Promise<void> {
    if (predicate(this.lines)) return Promise.resolve();
    return new Promise((resolve) => {
      const check = (): void => {
        if (!predicate(this.lines)) return;
        this.#waiters.delete(check);
        resolve();
      };
      this.#waiters.add(check);
    });
  }

  /** The last result of `command` for job `id`. */
  last(id: string, command: CniCommand): DriverLine | undefined {
    return this.lines.filter((l) => l.id === id && l.command === command).at(-1);
  }
}

/** Runs the jobs to completion. */
export async function runCni(env: DemoEnvironment, jobs: DriverJob[]): Promise<CniDriverRun> {
  const run = new CniDriverRun(env, jobs);
  await run.done;
  return run;
}

// ---- the agent process ----------------------------------------------------------------------

/** The agent process DemoEnvironment started. */
export function agentPid(env: DemoEnvironment): number {
  const pid = env.agentPid;
  if (pid === undefined) throw new Error('the demo environment has no agent running');
  return pid;
}

/**
 * The process's open fds, minus established TCP connections: those are HTTP keep-alive
 * connections of /readyz and /metrics clients (DemoEnvironment polls /readyz with fetch, whose
 * pool keeps the connection up to 5 s), not something the agent could leak per pod.
 */
export function fdCount(pid: number): number {
  const established = new Set(procTcpSockets(pid).flatMap((sock) => (sock.state === TCP_ESTABLISHED ? [`socket:[${sock.inode}]`] : [])));
  return fdTable(pid).filter((entry) => !established.has(entry.slice(entry.indexOf(' ') + 1))).length;
}

/** The fd count once it has stayed the same for `stableMs` (sockets of finished requests close asynchronously). */
export async function settledFdCount(pid: number, stableMs = 300, ms = 5_000): Promise<number> {
  let last = fdCount(pid);
  let since = Date.now();
  const started = Date.now();
  while (Date.now() - since < stableMs && Date.now() - started < ms) {
    await sleep(25);
    const now = fdCount(pid);
    if (now !== last) {
      last = now;
      since = Date.now();
    }
  }
  return last;
}

/**
 * The inodes of the network namespace fds the process holds other than its own namespace (the
 * addon's workers keep a handle on their home namespace): the pod namespaces.
 */
export function netnsFds(pid: number): number[] {
  const own = statSync(`/proc/${pid}/ns/net`);
  const out: number[] = [];
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const st = statSync(`/proc/${pid}/fd/${fd}`); // the magic link: the namespace itself
      if (st.dev === own.dev && st.ino !== own.ino) out.push(st.ino);
    } catch {
      // closed meanwhile
    }
  }
  return out.sort((a, b) => a - b);
}

export function netnsFdCount(pid: number): number {
  return netnsFds(pid).length;
}

/** What each of the process's fds refers to (`net:[ino]`, `socket:[ino]`, a path), sorted. */
export function fdTargets(pid: number): string[] {
  const out: string[] = [];
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      out.push(readlinkSync(`/proc/${pid}/fd/${fd}`));
    } catch {
      // closed meanwhile
    }
  }
  return out.sort();
}

/**
 * The namespaces under /run/netns that the process holds, by namespace fd or by a netlink
 * socket opened inside it (the agent lets a pod's watch socket hold the pod's namespace): the
 * socket inodes the kernel lists in each namespace's /proc/net/netlink, read from inside it.
 */
export function heldNamespaces(pid: number): string[] {
  const targets = new Set(fdTargets(pid));
  const held: string[] = [];
  for (const name of readdirSync('/run/netns')) {
    const path = `/run/netns/${name}`;
    let ino: number;
    try {
      ino = statSync(path).ino;
    } catch {
      continue; // deleted meanwhile
    }
    if (targets.has(`net:[${ino}]`)) {
      held.push(name);
      continue;
    }
    const listing = execFileSync('nsenter', [`--net=${path}`, 'cat', '/proc/net/netlink'], { encoding: 'utf8' });
    const inodes = listing
      .split('\n')
      .slice(1)
      .map((line) => line.trim().split(/\s+/).at(-1))
      .filter((x): x is string => x !== undefined && x !== '');
    if (inodes.some((i) => targets.has(`socket:[${i}]`))) held.push(name);
  }
  return held.sort();
}

export function stateFileOf(runDir: string, uid: string): string {
  return join(runDir, STATE_DIR, stateFileName(uid));
}

// ---- in-pod rules, checked three ways ---------------------------------------------------------

export interface RuleCheck {
  /** The agent's own verify (canonical listing compare: missing, extra, duplicated, reordered). */
  drift: string[];
  /** How often each istio table appears in `nft list ruleset` (nft binary, in the pod netns). */
  tables: Record<string, number>;
  /** `ip rule` lines with the fwmark rule, per family. */
  ipRules: { v4: number; v6: number };
  /** Rules (lines inside chains) in the istio tables, as the nft binary lists them: a duplicate adds lines. */
  ruleLines: number;
}

const ISTIO_TABLES = ['istio-ambient-nat', 'istio-ambient-mangle', 'istio-ambient-raw'];

/** Rule manager with the agent's settings in DemoEnvironment (defaults: IPv6 and DNS capture on). */
export function agentRules(addon: NetAddon): NftablesInpodRules {
  return new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: true, dnsCapture: true }));
}

export async function checkRules(addon: NetAddon, rules: NftablesInpodRules, ns: TestNetns): Promise<RuleCheck> {
  const handle = addon.openNetns(ns.path);
  let drift: string[];
  try {
    drift = describeDrift(await rules.verify(handle, NO_OVERRIDES));
  } finally {
    handle.close();
  }
  const listing = execIn(ns.name, ['nft', 'list', 'ruleset']);
  const tables = Object.fromEntries(
    ISTIO_TABLES.map((t) => [t, listing.split('\n').filter((l) => l.trim() === `table inet ${t} {`).length]),
  );
  const fwmark = (text: string): number => text.split('\n').filter((l) => l.includes('fwmark 0x111/0xfff')).length;
  return {
    drift,
    tables,
    ipRules: { v4: fwmark(ipIn(ns.name, ['-4', 'rule', 'show'])), v6: fwmark(ipIn(ns.name, ['-6', 'rule', 'show'])) },
    ruleLines: istioRuleLines(listing),
  };
}

/** Rules (lines inside chains, not the chain's type/policy line) in the istio tables of an `nft list ruleset`. */
function istioRuleLines(listing: string): number {
  let lines = 0;
  let inIstio = false;
  let depth = 0;
  for (const line of listing.split('\n')) {
    const t = line.trim();
    if (t.startsWith('table ')) inIstio = ISTIO_TABLES.some((name) => t === `table inet ${name} {`);
    if (t.endsWith('{')) depth++;
    else if (t === '}') depth--;
    else if (inIstio && depth === 2 && t !== '' && !/^(type|policy) /.test(t)) lines++;
  }
  return lines;
}

let reference: Promise<number> | undefined;

/** How many rule lines one apply leaves in a fresh namespace (a test-owned one, deleted again). */
export function expectedRuleLines(addon: NetAddon): Promise<number> {
  reference ??= (async () => {
    const ns = createNetns('ref');
    try {
      const handle = addon.openNetns(ns.path);
      try {
        await agentRules(addon).apply(handle, NO_OVERRIDES);
      } finally {
        handle.close();
      }
      return istioRuleLines(execIn(ns.name, ['nft', 'list', 'ruleset']));
    } finally {
      deleteNetns(ns);
    }
  })();
  return reference;
}

/** No istio table and no fwmark rule left in the namespace. */
export function hasNoRules(ns: TestNetns): boolean {
  const listing = execIn(ns.name, ['nft', 'list', 'ruleset']);
  return (
    !ISTIO_TABLES.some((t) => listing.includes(`table inet ${t}`)) && !ipIn(ns.name, ['-4', 'rule', 'show']).includes('fwmark 0x111/0xfff')
  );
}

// ---- our plugin alone ---------------------------------------------------------------------------

export interface PluginOutcome {
  ok: boolean;
  exitCode: number | null;
  /** The CNI error object, when the plugin failed. */
  code?: number;
  msg?: string;
  details?: string;
  stdout: string;
}

/**
 * Runs the installed istio-cni plugin alone, as the runtime runs the last plugin of the chain:
 * its entry of the chained config, CNI_* of `pod`, and `prevResult` (what bridge + host-local
 * returned). For what the chain cannot do: retrying only our plugin of an attachment, or
 * invoking it for a sandbox whose netns is already gone. The plugin itself only talks to the
 * agent's socket; it never touches a network namespace.
 */
export function runOurPlugin(env: DemoEnvironment, command: CniCommand, pod: CniPod, prevResult?: CniResult): Promise<PluginOutcome> {
  const list = env.chainedConfig() as unknown as { cniVersion: string; name: string; plugins: Array<Record<string, unknown>> };
  const entry = list.plugins.find((p) => p['type'] === 'istio-cni');
  if (!entry) throw new Error('istio-cni is not chained');
  const conf = { ...entry, cniVersion: list.cniVersion, name: list.name, ...(prevResult ? { prevResult } : {}) };
  const cniArgs = ['IgnoreUnknown=1', ...Object.entries(pod.args).map(([k, v]) => `${k}=${v}`)].join(';');
  const childEnv = {
    PATH: '/usr/sbin:/usr/bin:/sbin:/bin',
    CNI_COMMAND: command,
    CNI_CONTAINERID: pod.containerId,
    CNI_NETNS: pod.netnsPath,
    CNI_IFNAME: pod.ifName ?? 'eth0',
    CNI_ARGS: cniArgs,
    CNI_PATH: `${env.binDir}:${CNI_PLUGIN_DIR}`,
  };
  return new Promise((resolve, reject) => {
    const child = spawn(join(env.binDir, 'istio-cni'), [], { env: childEnv, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.resume();
    child.once('error', reject);
    child.once('close', (exitCode) => {
      if (exitCode === 0) return resolve({ ok: true, exitCode, stdout });
      let err: { code?: number; msg?: string; details?: string } = {};
      try {
        err = JSON.parse(stdout) as typeof err;
      } catch {
        // not a CNI error object
      }
      resolve({
        ok: false,
        exitCode,
        stdout,
        ...(err.code !== undefined ? { code: err.code } : {}),
        ...(err.msg !== undefined ? { msg: err.msg } : {}),
        ...(err.details ? { details: err.details } : {}),
      });
    });
    child.stdin.on('error', () => undefined);
    child.stdin.end(JSON.stringify(conf));
  });
}

/** What bridge + host-local gave the pod, read back from its netns (for a retried plugin call). */
export function prevResultOf(ns: TestNetns): CniResult {
  const out = ipIn(ns.name, ['-4', '-o', 'addr', 'show', 'dev', 'eth0']);
  const cidr = /inet (\S+)/.exec(out)?.[1];
  if (!cidr) throw new Error(`no IPv4 address on eth0 in ${ns.name}`);
  return { cniVersion: '1.0.0', interfaces: [{ name: 'eth0', sandbox: ns.path }], ips: [{ address: cidr, interface: 0 }] };
}

/** fd -> link target of the process (for failure messages). */
export function fdTable(pid: number): string[] {
  const out: string[] = [];
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      out.push(`${fd} ${readlinkSync(`/proc/${pid}/fd/${fd}`)}`);
    } catch {
      // closed meanwhile
    }
  }
  return out;
}
