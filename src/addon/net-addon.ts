// The typed facade over the addon. Everything above this file talks to the kernel through the
// NetAddon interface, which the real addon and the test fake both implement.
import { closeSync, fstatSync } from 'node:fs';
import { withDeadline } from '../util/deadline.js';
import { loadRawAddon, type RawAddon, type RawExecutorStats } from './binding.js';
import { NativeNetnsWatch, type NetnsWatch, type WatchOptions } from './netns-watch.js';
import { assertValidSteps, type ResultsOf, type SocketStep, type Step } from './steps.js';

export interface NetnsIdentity {
  ino: number;
  dev: number;
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

export interface NetAddon {
  openNetns(path: string): NetnsHandle;
  run<const S extends readonly Step[]>(target: NetnsTarget, steps: S): Promise<ResultsOf<S>>;
  /** Pays libnftables' one-time initialisation so the first pod does not. */
  warmUp(): void;
  stats(): RawExecutorStats;
  /** Opens netlink watches inside `ns` (one fd per kind) and reports its changes on the event loop. */
  watchNetns(ns: NetnsHandle, opts: WatchOptions): Promise<NetnsWatch>;
}

class NativeNetnsHandle implements NetnsHandle {
  #closed = false;
  constructor(
    private readonly raw: RawAddon,
    readonly fd: number,
    readonly ino: number,
    readonly dev: number,
    readonly path: string,
  ) {}

  get closed(): boolean {
    return this.#closed;
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.raw.closeFd(this.fd);
  }
}

export class NativeNetAddon implements NetAddon {
  constructor(private readonly raw: RawAddon = loadRawAddon()) {}

  openNetns(path: string): NetnsHandle {
    const info = this.raw.openNetns(path);
    return new NativeNetnsHandle(this.raw, info.fd, info.ino, info.dev, path);
  }

  run<const S extends readonly Step[]>(target: NetnsTarget, steps: S): Promise<ResultsOf<S>> {
    if (target !== 'fresh' && target.closed) {
      return Promise.reject(new Error(`netns ${target.path} is already closed`));
    }
    const fd = target === 'fresh' ? null : target.fd;
    try {
      assertValidSteps(steps);
      return this.raw.runInNetns(fd, steps) as Promise<ResultsOf<S>>;
    } catch (err) {
      return Promise.reject(err); // callers handle one failure path: the promise
    }
  }

  async watchNetns(ns: NetnsHandle, opts: WatchOptions): Promise<NetnsWatch> {
    const results = await this.run(
      ns,
      opts.kinds.map((kind) => ({ op: 'netlinkWatch' as const, kind })),
    );
    return new NativeNetnsWatch(
      this.raw,
      results.map((r) => r.fd),
      opts,
    );
  }

  warmUp(): void {
    this.raw.warmUp();
  }

  stats(): RawExecutorStats {
    return this.raw.executorStats();
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
