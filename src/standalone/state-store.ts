// The enrolled pods, persisted in the run dir so that a restarted (or crashed) agent can find each
// pod's netns again without Kubernetes: one small JSON file per pod, `<run dir>/pods/<uid>.json`,
// replaced atomically and written synchronously (four syscalls, cheaper than thread-pool round
// trips on the ADD path). One file per pod keeps a write O(1) during a burst and confines damage:
// a corrupt file costs that pod only, and is set aside as `<uid>.json.corrupt` for inspection.
import { createHash } from 'node:crypto';
import { closeSync, constants as fsConstants, fstatSync, mkdirSync, openSync, readdirSync, readSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { isCniIdentifier, isDnsLabel, isDnsSubdomain, isPlainIp, MAX_CONTAINER_ID_BYTES, netnsPathProblem } from '../cni/fields.js';
import { atomicWriteFileSync, isAtomicTempName } from '../util/atomic-file.js';

export const STATE_DIR = 'pods';
const SUFFIX = '.json';
const CORRUPT_SUFFIX = '.corrupt';
/** File names stay well under NAME_MAX (255): longer escaped UIDs are stored under their hash. */
const MAX_NAME_LENGTH = 200;
const MAX_FILE_BYTES = 64 * 1024;

export interface EnrolledPod {
  uid: string;
  name: string;
  namespace: string;
  serviceAccount: string;
  /** The netns path as the runtime gave it (without the agent's --netns-root prefix). */
  netnsPath: string;
  /** Identity of that namespace when it was enrolled: a reused path must not adopt a new pod. */
  netnsIno: number;
  netnsDev: number;
  ips: string[];
  containerId: string;
  /** The nftables generation right after the rules were applied (RulesStamp), when known. */
  nftGeneration?: number;
}

/** A state file that could not be used, and why (logged by the caller; the file is set aside). */
export interface StateProblem {
  file: string;
  reason: string;
}

export interface LoadedState {
  pods: EnrolledPod[];
  problems: StateProblem[];
}

/** A UID that is a file name as it is (every Kubernetes UID: a UUID). */
const ALL_SAFE = /^[A-Za-z0-9_-]+$/;

/**
 * `%`-escapes every UTF-8 byte outside [A-Za-z0-9_-], so each UID maps to its own safe file name
 * (Kubernetes UIDs are UUIDs and stay readable; standalone `namespace/name` UIDs get `%2f`).
 */
export function stateFileName(uid: string): string {
  if (uid === '') throw new RangeError('pod uid must not be empty');
  // An ALL_SAFE UID: the byte walk below would return it unchanged.
  if (uid.length <= MAX_NAME_LENGTH && ALL_SAFE.test(uid)) return `${uid}${SUFFIX}`;
  let safe = '';
  for (const byte of Buffer.from(uid, 'utf8')) {
    const c = String.fromCharCode(byte);
    safe += /[A-Za-z0-9_-]/.test(c) ? c : `%${byte.toString(16).padStart(2, '0')}`;
  }
  if (safe.length > MAX_NAME_LENGTH) safe = `sha256-${createHash('sha256').update(uid).digest('hex')}`;
  return `${safe}${SUFFIX}`;
}

const isString = (v: unknown): v is string => typeof v === 'string';
const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

// What the agent itself writes: Kubernetes names, a UID (UUID, the plugin's K8S_POD_UID or the
// standalone `namespace/name`), a netns path the plugin-event server accepted. A file holding
// anything else was not written by this agent and must not reach the netns opener or ZDS.
const MAX_UID_LENGTH = 512;
const MAX_IPS = 64;
const hasControl = (v: string): boolean => /[\u0000-\u001f\u007f]/.test(v);

/** Checks every field: the file is input, and a bad one must not reach the netns opener. */
export function parseEnrolledPod(text: string): EnrolledPod {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new Error(`not valid JSON (${(err as Error).message})`, { cause: err });
  }
  return checkEnrolledPod(raw);
}

/** parseEnrolledPod's checks on a value (put() checks what it is about to write, without a JSON round trip). */
function checkEnrolledPod(raw: unknown): EnrolledPod {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new Error('not a JSON object');
  const p = raw as Record<string, unknown>;
  for (const key of ['uid', 'name', 'namespace', 'serviceAccount', 'netnsPath', 'containerId'] as const) {
    if (!isString(p[key])) throw new Error(`${key} must be a string`);
  }
  if (p['uid'] === '' || p['netnsPath'] === '') throw new Error('uid and netnsPath must not be empty');
  const uid = p['uid'] as string;
  if (uid.length > MAX_UID_LENGTH || hasControl(uid))
    throw new Error(`uid must be at most ${MAX_UID_LENGTH} characters without control characters`);
  if (!isDnsSubdomain(p['name'] as string)) throw new Error('name is not a Kubernetes pod name');
  if (!isDnsLabel(p['namespace'] as string)) throw new Error('namespace is not a Kubernetes namespace name');
  if (!isDnsSubdomain(p['serviceAccount'] as string)) throw new Error('serviceAccount is not a Kubernetes service account name');
  const netnsProblem = netnsPathProblem(p['netnsPath'] as string);
  if (netnsProblem) throw new Error(`netnsPath ${netnsProblem}`);
  const containerId = p['containerId'] as string;
  if (containerId !== '' && !isCniIdentifier(containerId, MAX_CONTAINER_ID_BYTES)) throw new Error('containerId is not a container ID');
  if (!isCount(p['netnsIno']) || !isCount(p['netnsDev'])) throw new Error('netnsIno and netnsDev must be non-negative integers');
  const generation = p['nftGeneration'];
  if (generation !== undefined && (!isCount(generation) || generation > 0xffffffff))
    throw new Error('nftGeneration must be a 32-bit unsigned integer');
  if (!Array.isArray(p['ips']) || !p['ips'].every(isString)) throw new Error('ips must be an array of strings');
  if (p['ips'].length > MAX_IPS || !p['ips'].every(isPlainIp)) throw new Error(`ips must be at most ${MAX_IPS} IP addresses`);
  return {
    uid: p['uid'] as string,
    name: p['name'] as string,
    namespace: p['namespace'] as string,
    serviceAccount: p['serviceAccount'] as string,
    netnsPath: p['netnsPath'] as string,
    netnsIno: p['netnsIno'],
    netnsDev: p['netnsDev'],
    ips: p['ips'] as string[],
    containerId: p['containerId'] as string,
    ...(generation !== undefined ? { nftGeneration: generation as number } : {}),
  };
}

const nameKey = (namespace: string, name: string): string => `${namespace}/${name}`;

export class PodStateStore {
  readonly dir: string;
  readonly #pods = new Map<string, EnrolledPod>();
  /** namespace/name -> uid, so a DEL naming only the pod finds it without a scan. */
  readonly #byName = new Map<string, string>();

  constructor(runDir: string) {
    this.dir = join(runDir, STATE_DIR);
  }

  /**
   * Reads every pod file. Unusable files (truncated, corrupt, foreign, named for another UID)
   * are renamed to `*.corrupt` and reported; the rest load. A missing directory is an empty state.
   */
  load(): LoadedState {
    this.#pods.clear();
    this.#byName.clear();
    const problems: StateProblem[] = [];
    let names: string[];
    try {
      names = readdirSync(this.dir);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return { pods: [], problems };
      if (code === 'ENOTDIR') {
        // Something else sits where the directory belongs: set it aside so put() can create it.
        problems.push({ file: this.dir, reason: 'not a directory' });
        this.#setAside(this.dir);
        return { pods: [], problems };
      }
      throw err;
    }
    // A crash between a write and its rename leaves a temp file; load() runs before any write.
    for (const name of names.filter(isAtomicTempName)) {
      rmSync(join(this.dir, name), { force: true });
    }
    for (const name of names.filter((n) => n.endsWith(SUFFIX)).sort()) {
      const file = join(this.dir, name);
      try {
        const pod = this.#read(file);
        if (stateFileName(pod.uid) !== name) throw new Error(`holds pod uid ${JSON.stringify(pod.uid)}, not the one its name says`);
        this.#set(pod);
      } catch (err) {
        problems.push({ file, reason: (err as Error).message });
        this.#setAside(file);
      }
    }
    return { pods: [...this.#pods.values()], problems };
  }

  get(uid: string): EnrolledPod | undefined {
    return this.#pods.get(uid);
  }

  list(): EnrolledPod[] {
    return [...this.#pods.values()];
  }

  /** The UID of the pod recorded under this namespace and name (the newest record wins). */
  uidByName(namespace: string, name: string): string | undefined {
    return this.#byName.get(nameKey(namespace, name));
  }

  /** Persists the pod before returning; throws (ENOSPC, EROFS...) with the memory copy unchanged. */
  put(pod: EnrolledPod): void {
    const text = `${JSON.stringify(checkEnrolledPod(pod))}\n`; // never write what load() would set aside
    const file = join(this.dir, stateFileName(pod.uid));
    try {
      atomicWriteFileSync(file, text, 0o600);
    } catch (err) {
      // The directory is made on first use (or again, if someone removed it): not a mkdir per ADD.
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      mkdirSync(this.dir, { recursive: true, mode: 0o700 });
      atomicWriteFileSync(file, text, 0o600);
    }
    this.#set(pod);
  }

  remove(uid: string): void {
    const pod = this.#pods.get(uid);
    this.#pods.delete(uid);
    if (pod && this.#byName.get(nameKey(pod.namespace, pod.name)) === uid) this.#byName.delete(nameKey(pod.namespace, pod.name));
    rmSync(join(this.dir, stateFileName(uid)), { force: true });
  }

  #set(pod: EnrolledPod): void {
    const old = this.#pods.get(pod.uid);
    if (old && this.#byName.get(nameKey(old.namespace, old.name)) === pod.uid) this.#byName.delete(nameKey(old.namespace, old.name));
    this.#pods.set(pod.uid, pod);
    this.#byName.set(nameKey(pod.namespace, pod.name), pod.uid);
  }

  /**
   * Reads a regular file of at most MAX_FILE_BYTES without following a symlink or blocking on a
   * FIFO: a link to /dev/zero or a pipe named `<x>.json` must not hang or exhaust the agent.
   */
  #read(file: string): EnrolledPod {
    const fd = openSync(file, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW | fsConstants.O_NONBLOCK);
    let text: string;
    try {
      const st = fstatSync(fd);
      if (!st.isFile()) throw new Error('not a regular file');
      if (st.size > MAX_FILE_BYTES) throw new Error(`larger than ${MAX_FILE_BYTES} bytes`);
      // One byte more than fstat said: a file still growing is caught rather than cut short.
      const buf = Buffer.allocUnsafe(st.size + 1);
      let length = 0;
      while (length < buf.length) {
        const n = readSync(fd, buf, length, buf.length - length, null);
        if (n === 0) break;
        length += n;
      }
      if (length > st.size) throw new Error('changed while being read');
      text = buf.toString('utf8', 0, length);
    } finally {
      closeSync(fd);
    }
    return parseEnrolledPod(text);
  }

  #setAside(file: string): void {
    try {
      renameSync(file, `${file}${CORRUPT_SUFFIX}`);
    } catch {
      // gone already, or a read-only run dir: it is reported either way
    }
  }
}
