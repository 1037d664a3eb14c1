// Gives the C library's free heap back to the kernel once the agent has been quiet for a while
// and has grown. glibc keeps freed memory in its arenas for reuse and returns only what sits at
// an arena's top, so what a burst of pods or V8's compiler threads (which optimise the per-pod
// path sooner with --tier-up-calls, see tier-up.ts) allocated and freed stays in the agent's RSS
// until malloc_trim(0) hands its whole pages back. The release is not free: the pages it returns
// are faulted in again by the next allocations, and releasing after every pod event cost the
// ADDs more than it saved (README, "What profiling found"). So it runs only when RSS has grown by
// `growthBytes` since the last release (or the start), and only after a quiet spell (no pod
// event for `quietMs`) or right as a burst ends (its last event answered, load-phases.ts):
// after a burst or a round of compilations, not in steady churn. It runs
// off the JS thread (the addon's releaseFreeHeap): it holds each arena's lock while it walks it.
import { silentLogger, type Logger } from '../ops/log.js';
import type { RawHeapRelease } from '../addon/binding.js';

export interface IdleHeapReleaseOptions {
  /** No pod event for this long before a release; default 1 s. */
  quietMs?: number;
  /** RSS growth since the last release (or the start) that makes one worth it; default 8 MiB. */
  growthBytes?: number;
  /** The process's RSS now (tests replace it). */
  rss?: () => number;
}

/** About a tenth of the agent's idle RSS (~77 MB with Node 24). */
const DEFAULT_GROWTH_BYTES = 8 * 2 ** 20;

export class IdleHeapRelease {
  readonly #release: () => Promise<RawHeapRelease>;
  readonly #log: Logger;
  readonly #quietMs: number;
  readonly #growthBytes: number;
  readonly #rss: () => number;
  /** RSS after the last release, or at the start. */
  #baseline: number;
  #running = false;
  #quietTimer: NodeJS.Timeout | undefined;
  #closed = false;
  /** Releases done (tests). */
  releases = 0;

  constructor(release: () => Promise<RawHeapRelease>, log: Logger = silentLogger, options: IdleHeapReleaseOptions = {}) {
    this.#release = release;
    this.#log = log.child({ component: 'heap' });
    this.#quietMs = options.quietMs ?? 1_000;
    this.#growthBytes = options.growthBytes ?? DEFAULT_GROWTH_BYTES;
    this.#rss = options.rss ?? (() => process.memoryUsage.rss());
    this.#baseline = this.#rss();
  }

  /** Pod events are in flight: whatever quiet spell was running is over. */
  busy(): void {
    clearTimeout(this.#quietTimer);
    this.#quietTimer = undefined;
  }

  /** The agent has just answered its last pod event in flight: the quiet spell starts again. */
  idle(): void {
    if (this.#closed) return;
    clearTimeout(this.#quietTimer);
    this.#quietTimer = setTimeout(() => this.#releaseIfGrown(), this.#quietMs).unref();
  }

  /**
   * The last event of a burst has just been answered: what the burst (and V8's compiles beside it)
   * freed goes back now rather than after the quiet spell, which still starts as after any event.
   * Bursts are rare, so the pages the next pods fault in again cost little.
   */
  idleAfterBurst(): void {
    this.idle();
    this.#releaseIfGrown();
  }

  close(): void {
    this.#closed = true;
    clearTimeout(this.#quietTimer);
  }

  #releaseIfGrown(): void {
    if (this.#running || this.#closed) return;
    const before = this.#rss();
    if (before - this.#baseline < this.#growthBytes) return;
    this.#running = true;
    this.#release()
      .then(
        (r) => {
          this.releases++;
          this.#baseline = this.#rss();
          this.#log.debug(
            { rssBefore: before, rssAfter: this.#baseline, freeBytes: r.freeBytes, released: r.released, ms: r.seconds * 1e3 },
            'released free heap',
          );
        },
        // Nothing is lost when it fails: the memory stays where it was; the next quiet spell tries again.
        (err: unknown) => this.#log.warn({ err: (err as Error).message }, 'could not release free heap memory'),
      )
      .finally(() => {
        this.#running = false;
      });
  }
}
