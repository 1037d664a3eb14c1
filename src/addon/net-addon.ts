// The typed facade over the addon. Everything above this file talks to the kernel through the
// NetAddon interface, which the real addon and the test fake both implement.
import { closeSync, fstatSync } from 'node:fs';
import { withDeadline } from '../util/deadline.js';
import { loadRawAddon, type RawAddon, type RawExecutorStats, type RawHeapRelease } from './binding.js';
import { NativeNetnsWatch, NFT_POLL_MS, type NetnsWatch, type WatchOptions } from './netns-watch.js';
import { NftGenerationPoller } from './nft-generation-poller.js';
import { assertValidSteps, type ResultsOf, type SocketStep, type Step } from './steps.js';

export interface NetnsIdentity {
  ino: number;
  dev: number;
}

/** The same network namespace: its nsfs inode and device (an fd's number says nothing). */
export function sameNetns(a: NetnsIdentity, b: NetnsIdentity): boolean {
  return a.ino === b.ino && a.dev === b.dev;
}

/** An open network namespace. Holding the fd keeps the namespace alive. */
export interface NetnsHandle extends NetnsIdentity {
  readonly fd: number;
  readonly path: string;
  readonly closed: boolean;
  /** Closes the fd exactly once; later calls do nothing. */
  close(): void;
}

/** Where a step list runs: an open namespace, or a fresh private one that vanishes afterwards. */
export type NetnsTarget = NetnsHandle | 'fresh';

export interface RunOptions {
  /**
   * Runs after the other step lists that share its visit (see NetAddon.run): a netlink watch
   * opened after an ADD's rules does not report the rules' own commit.
   */
  background?: boolean;
}

/** A namespace file opened in a directory, and where that directory really is. */
export interface NetnsInDirectory {
  handle: NetnsHandle;
  /** The directory's real path (symlinks resolved), read from the fd the file was opened in. */
  directory: string;
}

export interface NetAddon {
  /** Opens a namespace file, following a symlink (/proc/<pid>/ns/net is one). */
  openNetns(path: string): NetnsHandle;
  /**
   * Opens `name` (one path component) in `directory` without following a symlink there (ELOOP),
   * and reports the directory's real path as the open itself saw it: a check of that path
   * cannot be raced by swapping the directory between the check and the open.
   */
  openNetnsInDirectory(directory: string, name: string): NetnsInDirectory;
  /**
   * Runs the steps in order inside the namespace; the first failure rejects (with its step).
   * Step lists for the same handle asked for in the same turn of the event loop share one visit
   * (one thread hop and setns), each with its own result and failure; each promise settles as
   * soon as its own list is done, so an early list does not wait for the later ones. Lists that
   * may block (exec, connect) always run on a thread of their own.
   */
  run<const S extends readonly Step[]>(target: NetnsTarget, steps: S, options?: RunOptions): Promise<ResultsOf<S>>;
  /** Pays libnftables' one-time initialisation so the first pod does not. */
  warmUp(): void;
  /**
   * The calling thread's own CPU time in seconds (CLOCK_THREAD_CPUTIME_ID: user + kernel), exact
   * at the call; on the JS thread, the event loop's. Node's process.threadCpuUsage() reads
   * getrusage(RUSAGE_THREAD), which lags a running thread by its CPU time since its last tick or
   * context switch: a handler that never sleeps reads the same value before and after.
   */
  threadCpuSeconds(): number;
  stats(): RawExecutorStats;
  /**
   * Gives the free pages of the C library's heap back to the kernel (malloc_trim), off the JS
   * thread: memory freed by V8's compiler threads and by a burst of pods otherwise stays in RSS.
   */
  releaseFreeHeap(): Promise<RawHeapRelease>;
  /** Opens netlink watches inside `ns` (one fd per kind) and reports its changes on the event loop. */
  watchNetns(ns: NetnsHandle, opts: WatchOptions): Promise<NetnsWatch>;
}

/**
 * The fd that keeps the namespace alive is its namespace file at first; the namespace's watch
 * may lend it a netlink socket opened inside it instead (a socket holds its namespace just as
 * well, and the addon turns it back into a namespace fd for jobs and for ztunnel): one fd per
 * pod instead of two beside the watch's own.
 */
class NativeNetnsHandle implements NetnsHandle {
  #closed = false;
  #fd: number;
  /** Set while a watch's socket holds the namespace: the watch stops polling it before it closes. */
  #lender: (() => void) | undefined;

  constructor(
    private readonly raw: RawAddon,
    fd: number,
    readonly ino: number,
    readonly dev: number,
    readonly path: string,
    /** The addon that opened it (lists for it share visits), told before the fd closes. */
    readonly owner?: NativeNetAddon,
  ) {
    this.#fd = fd;
  }

  get fd(): number {
    return this.#fd;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /**
   * Lets `socket` (opened inside this namespace; it must give back this very namespace) hold it
   * instead of the namespace file, which closes. `stopPolling` runs before the socket closes.
   * False (nothing changed) when a socket holds it already or the socket cannot give the
   * namespace back (SIOCGSKNS needs CAP_NET_ADMIN).
   */
  holdBy(socket: number, stopPolling: () => void): boolean {
    if (this.#closed || this.#lender) return false;
    let probe: number;
    try {
      probe = this.raw.netnsFdOf(socket);
    } catch {
      return false;
    }
    const same = sameNetns(fstatSync(probe), this);
    this.raw.closeFd(probe);
    if (!same) return false;
    this.raw.closeFd(this.#fd);
    this.#fd = socket;
    this.#lender = stopPolling;
    return true;
  }

  /**
   * The watch closes while the namespace is still needed: the namespace file takes over again
   * (a namespace fd made from the socket), and the socket goes back to the watch to close.
   */
  release(): void {
    if (this.#closed || !this.#lender) return;
    this.#fd = this.raw.netnsFdOf(this.#fd); // the socket is the watch's to close now
    this.#lender = undefined;
  }

  close(): void {
    if (this.#closed) return;
    // Lists asked for before the close still run: their visit is submitted now, while the fd is
    // open (the job keeps its own fd of the namespace), as if each had been submitted when asked.
    this.owner?.submitPending(this);
    this.#closed = true;
    this.#lender?.(); // libuv: stop polling before the fd is closed
    this.#lender = undefined;
    this.raw.closeFd(this.#fd);
  }
}

function mayBlock(step: Step): boolean {
  return step.op === 'exec' || (step.op === 'socket' && step.connectAddress !== undefined);
}

/** A step list waiting for its visit. */
interface QueuedSteps {
  steps: readonly Step[];
  resolve(results: unknown[]): void;
  reject(err: unknown): void;
}

/** The step lists of one namespace asked for in this turn, submitted together at its end. */
interface PendingVisit {
  target: NetnsHandle;
  lists: QueuedSteps[];
  background: QueuedSteps[];
}

export class NativeNetAddon implements NetAddon {
  readonly #pending = new Map<NetnsHandle, PendingVisit>();
  readonly #generationPollers = new Map<number, NftGenerationPoller>();

  constructor(private readonly raw: RawAddon = loadRawAddon()) {}

  openNetns(path: string): NetnsHandle {
    const info = this.raw.openNetns(path);
    return new NativeNetnsHandle(this.raw, info.fd, info.ino, info.dev, path, this);
  }

  openNetnsInDirectory(directory: string, name: string): NetnsInDirectory {
    const info = this.raw.openNetnsInDirectory(directory, name);
    const handle = new NativeNetnsHandle(this.raw, info.fd, info.ino, info.dev, `${directory}/${name}`, this);
    return { handle, directory: info.directory };
  }

  run<const S extends readonly Step[]>(target: NetnsTarget, steps: S, options: RunOptions = {}): Promise<ResultsOf<S>> {
    if (target !== 'fresh' && target.closed) {
      return Promise.reject(new Error(`netns ${target.path} is already closed`));
    }
    try {
      assertValidSteps(steps);
      if (target === 'fresh') return this.raw.runInNetns(null, steps) as Promise<ResultsOf<S>>;
      // A list that may block (a child process, a connect) gets a thread of its own: sharing a
      // visit would make every other list of that turn wait for it. Handles this addon did not
      // open (adoptNetnsFd) cannot tell it before they close, so their lists go at once too.
      const alone = steps.some(mayBlock) || !(target instanceof NativeNetnsHandle) || target.owner !== this;
      if (alone) return this.raw.runInNetns(target.fd, steps) as Promise<ResultsOf<S>>;
    } catch (err) {
      return Promise.reject(err); // callers handle one failure path: the promise
    }
    return new Promise((resolve, reject) => {
      const queued: QueuedSteps = { steps, resolve: resolve as (r: unknown[]) => void, reject };
      const visit = this.#pending.get(target) ?? this.#newVisit(target);
      (options.background ? visit.background : visit.lists).push(queued);
    });
  }

  /** Submitted at the end of this turn (a microtask): every list asked for until then joins it. */
  #newVisit(target: NetnsHandle): PendingVisit {
    const visit: PendingVisit = { target, lists: [], background: [] };
    this.#pending.set(target, visit);
    queueMicrotask(() => this.#submit(visit));
    return visit;
  }

  /** Submits the visit waiting for `target` now (its handle is about to close). */
  submitPending(target: NetnsHandle): void {
    const visit = this.#pending.get(target);
    if (visit) this.#submit(visit);
  }

  #submit(visit: PendingVisit): void {
    if (this.#pending.get(visit.target) !== visit) return; // submitted already (the handle closed first)
    this.#pending.delete(visit.target);
    const queued = [...visit.lists, ...visit.background];
    try {
      if (visit.target.closed) throw new Error(`netns ${visit.target.path} is already closed`);
      const settled = this.raw.visitNetns(
        visit.target.fd,
        queued.map((q) => q.steps),
      );
      settled.forEach((promise, i) => promise.then(queued[i]!.resolve, queued[i]!.reject));
    } catch (err) {
      for (const q of queued) q.reject(err);
    }
  }

  async watchNetns(ns: NetnsHandle, opts: WatchOptions): Promise<NetnsWatch> {
    const results = await this.run(
      ns,
      opts.kinds.map((kind) => ({ op: 'netlinkWatch' as const, kind })),
      { background: true },
    );
    const holder = ns instanceof NativeNetnsHandle && ns.owner === this ? ns : undefined;
    return new NativeNetnsWatch(
      this.raw,
      results.map((r) => r.fd),
      opts,
      holder,
      this.#generationPoller(opts.nftPollMs ?? NFT_POLL_MS),
    );
  }

  /** One poller per period (the agent has one); undefined for 0, which never asks. */
  #generationPoller(periodMs: number): NftGenerationPoller | undefined {
    if (periodMs === 0) return undefined;
    let poller = this.#generationPollers.get(periodMs);
    if (!poller) {
      poller = new NftGenerationPoller(this.raw, periodMs);
      this.#generationPollers.set(periodMs, poller);
    }
    return poller;
  }

  warmUp(): void {
    this.raw.warmUp();
  }

  threadCpuSeconds(): number {
    return this.raw.threadCpuSeconds();
  }

  stats(): RawExecutorStats {
    return this.raw.executorStats();
  }

  releaseFreeHeap(): Promise<RawHeapRelease> {
    return this.raw.releaseFreeHeap();
  }
}

/**
 * Wraps an fd that already refers to a network namespace (for example one received over ZDS)
 * as a handle that owns it: close() closes it once.
 */
export function adoptNetnsFd(fd: number, path: string, raw: RawAddon = loadRawAddon()): NetnsHandle {
  const st = fstatSync(fd);
  return new NativeNetnsHandle(raw, fd, st.ino, st.dev, path);
}

/**
 * Runs one socket step in `ns` and returns the fd, with an outer deadline as a safety net (the
 * addon enforces the connect deadline itself); an fd that arrives after it is closed, not leaked.
 */
export async function socketInNetns(addon: NetAddon, ns: NetnsHandle, step: SocketStep, what: string, graceMs = 2_000): Promise<number> {
  let abandoned = false;
  const job = addon.run(ns, [step] as const).then(([r]) => {
    if (abandoned) closeSync(r.fd);
    return r.fd;
  });
  try {
    return await withDeadline(job, (step.timeoutMs ?? 5_000) + graceMs, what);
  } catch (err) {
    abandoned = true;
    job.catch(() => undefined);
    throw err;
  }
}
