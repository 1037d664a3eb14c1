// Gives the C library's free heap back to the kernel when the agent has nothing in flight.
// glibc keeps freed memory in its arenas for reuse and returns only what sits at an arena's
// top, so what a burst of pods or V8's compiler threads (which optimise the per-pod path, see
// tier-up.ts) allocated and freed stays in the agent's RSS until malloc_trim(0) hands its whole
// pages back. The release runs off the JS thread (the addon's releaseFreeHeap) and at most once
// per interval: it holds each arena's lock while it walks it.
import { silentLogger, type Logger } from '../ops/log.js';
import type { RawHeapRelease } from '../addon/binding.js';

export interface IdleHeapReleaseOptions {
  /** At most one release per this interval; default 1 s. */
  minIntervalMs?: number;
  /** One more release this long after the last idle moment (compilations finish after the work); default 1 s. */
  settleMs?: number;
}

export class IdleHeapRelease {
  readonly #release: () => Promise<RawHeapRelease>;
  readonly #log: Logger;
  readonly #minIntervalMs: number;
  readonly #settleMs: number;
  #lastStart = -Infinity;
  #running = false;
  #settleTimer: NodeJS.Timeout | undefined;
  #closed = false;
  /** Releases done, and the time they took (metrics and tests). */
  releases = 0;

  constructor(release: () => Promise<RawHeapRelease>, log: Logger = silentLogger, options: IdleHeapReleaseOptions = {}) {
    this.#release = release;
    this.#log = log.child({ component: 'heap' });
    this.#minIntervalMs = options.minIntervalMs ?? 1_000;
    this.#settleMs = options.settleMs ?? 1_000;
  }

  /** The agent has just finished its work in flight (pod events). */
  idle(): void {
    if (this.#closed) return;
    if (performance.now() - this.#lastStart >= this.#minIntervalMs) this.#start();
    clearTimeout(this.#settleTimer);
    this.#settleTimer = setTimeout(() => this.#start(), this.#settleMs).unref();
  }

  close(): void {
    this.#closed = true;
    clearTimeout(this.#settleTimer);
  }

  #start(): void {
    if (this.#running || this.#closed) return;
    this.#running = true;
    this.#lastStart = performance.now();
    this.#release()
      .then(
        (r) => {
          this.releases++;
          this.#log.debug(
            { freeBytes: r.freeBytes, arenaBytes: r.arenaBytes, released: r.released, ms: r.seconds * 1e3 },
            'released free heap',
          );
        },
        // Nothing is lost when it fails: the memory stays where it was. Said once per failure.
        (err: unknown) => this.#log.warn({ err: (err as Error).message }, 'could not release free heap memory'),
      )
      .finally(() => {
        this.#running = false;
      });
  }
}
