// The raw native module: its exact shape, and the one place that loads it. Nothing else in
// the project touches the .node file.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import { projectRoot } from '../project-root.js';
import type { Step } from './steps.js';

export interface RawNetnsInfo {
  fd: number;
  ino: number;
  dev: number;
}
/** What one kind of step has cost the threads that ran it, since the process started. */
export interface StepTimeTotal {
  /** Steps run (failed ones too). */
  count: number;
  /** The running thread's own CPU time in them (CLOCK_THREAD_CPUTIME_ID: user + kernel). */
  cpuSeconds: number;
  /** The wall time around them; above cpuSeconds when a step waited (a lock, a CPU, a child). */
  wallSeconds: number;
}

export interface RawExecutorStats {
  threadsStarted: number;
  threadsRetired: number;
  threadsAlive: number;
  jobsRun: number;
  pending: number;
  /** Summed over jobsRun: submit to a worker's pick-up (waking it, its getting a CPU). */
  queueWaitSeconds: number;
  /** Step lists whose results reached the JS thread. */
  resultsDelivered: number;
  /** Summed over resultsDelivered: a worker's post to the settlement on the JS thread. */
  resultWaitSeconds: number;
  /** By step op ('nftBatch', 'setLinkUp', ...), process-wide. */
  steps: Record<string, StepTimeTotal>;
}

/** One malloc_trim(0) of every glibc arena (native/heap.h), with what the arenas held before it. */
export interface RawHeapRelease {
  /** At least one page went back to the kernel. */
  released: boolean;
  /** Free bytes inside the arenas before (mallinfo2 fordblks). */
  freeBytes: number;
  /** Bytes the arenas had from the kernel before (mallinfo2 arena). */
  arenaBytes: number;
  seconds: number;
}

export interface RawDatagram {
  data: Buffer;
  /** fds received in SCM_RIGHTS (close-on-exec); the caller owns and must close them. */
  fds: number[];
  truncated: boolean;
  controlTruncated: boolean;
  /** recvmsg returned 0 bytes: the peer closed, or sent an empty datagram (same thing to ZDS). */
  eof: boolean;
}

export interface RawPollEvents {
  readable: number;
  writable: number;
  disconnect: number;
}

/** uv_poll on Node's own loop; the callback gets (status < 0 on error, event bits). */
export interface RawFdPoller {
  start(events: number): void;
  stop(): void;
  close(): void;
  ref(): void;
  unref(): void;
}

export interface RawAddon {
  openNetns(path: string): RawNetnsInfo;
  /** `directory`: the real path of the directory, read back from the fd the file was opened in. */
  openNetnsInDirectory(directory: string, name: string): RawNetnsInfo & { directory: string };
  closeFd(fd: number): void;
  /** A new fd of the namespace `anchor` refers to: a namespace file duplicated, or a socket's own (SIOCGSKNS). */
  netnsFdOf(anchor: number): number;
  /** `fd` null runs the steps in a fresh, private namespace that vanishes afterwards. */
  runInNetns(fd: number | null, steps: readonly Step[], options?: { poisonReturn?: boolean }): Promise<unknown[]>;
  /** Several step lists in one visit to the namespace; one promise per list, settled as soon as that list is done. */
  visitNetns(fd: number | null, segments: readonly (readonly Step[])[]): Promise<unknown[]>[];
  warmUp(): void;
  /** The calling thread's own CPU time in seconds (CLOCK_THREAD_CPUTIME_ID: user + kernel, exact). */
  threadCpuSeconds(): number;
  executorStats(): RawExecutorStats;
  /** malloc_trim(0) on a libuv pool thread. */
  releaseFreeHeap(): Promise<RawHeapRelease>;
  seqpacketListen(path: string, options?: { mode?: number; dirMode?: number; backlog?: number }): number;
  /** null when no connection is waiting. */
  seqpacketAccept(fd: number): number | null;
  seqpacketConnect(path: string): number;
  /** false when the socket buffer is full (wait for writability and retry). */
  seqpacketSend(fd: number, data: Uint8Array, passFd?: number): boolean;
  /** null when nothing is waiting. */
  seqpacketRecv(fd: number): RawDatagram | null;
  /** SO_ORIGINAL_DST of a REDIRECTed TCP connection (IPv4, then IPv6). */
  originalDestination(fd: number): { address: string; port: number };
  /** Reads a routing watch socket (netlinkWatch step) until empty; counts what changed. */
  netlinkWatchDrain(fd: number, routeTable: number): { rules: number; routes: number; addresses: number; overrun: boolean };
  /** The nftables ruleset generation of the namespace an nftables watch socket was opened in (no setns). */
  nftWatchGeneration(fd: number): number;
  FdPoller: new (fd: number, callback: (status: number, events: number) => void) => RawFdPoller;
  pollEvents: RawPollEvents;
}

const ADDON_FILE = 'ambient_native.node';

export function addonCandidates(root = projectRoot()): string[] {
  const fromEnv = process.env['AMBIENT_NATIVE_ADDON'];
  return [...(fromEnv ? [resolve(fromEnv)] : []), join(root, 'build', 'Release', ADDON_FILE), join(root, 'build', 'Debug', ADDON_FILE)];
}

function explain(tried: string[], failures: string[]): string {
  const hints = [
    process.platform !== 'linux' ? `this addon needs Linux (running on ${process.platform})` : '',
    failures.some((f) => f.includes('libnftables'))
      ? 'libnftables is missing: apt-get install libnftables1 (or run scripts/bootstrap.sh)'
      : '',
    failures.some((f) => f.includes('NODE_MODULE_VERSION'))
      ? `the addon was built for another Node.js ABI (this is ${process.version}, ABI ${process.versions.modules}): npm run build:native`
      : '',
    tried.every((p) => !existsSync(p)) ? 'the addon is not built: npm run build:native' : '',
  ].filter(Boolean);
  return [
    'could not load the ambient-node-agent native addon.',
    ...tried.map((p, i) => `  tried ${p}: ${failures[i] ?? 'not found'}`),
    ...hints.map((h) => `  hint: ${h}`),
  ].join('\n');
}

/** Loads the first candidate that works, or throws one error that lists every attempt. */
export function loadAddonFrom(candidates: readonly string[]): RawAddon {
  const require = createRequire(import.meta.url);
  const failures: string[] = [];
  for (const candidate of candidates) {
    if (!existsSync(candidate)) {
      failures.push('not found');
      continue;
    }
    try {
      return require(candidate) as RawAddon;
    } catch (err) {
      failures.push(err instanceof Error ? (err.message.split('\n')[0] ?? err.message) : String(err));
    }
  }
  throw new Error(explain([...candidates], failures));
}

let cached: RawAddon | undefined;

export function loadRawAddon(): RawAddon {
  cached ??= loadAddonFrom(addonCandidates());
  return cached;
}
