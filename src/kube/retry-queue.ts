// The informer work queue (Istio: controllers.NewQueue with effectively unlimited retries and a
// 5 ms - 5 s per-item exponential backoff). One task per key runs at a time; a newer task for a
// key replaces an older one that has not started; a failed task is retried with backoff unless a
// newer one arrived meanwhile.
import { silentLogger, type Logger } from '../ops/log.js';

type Task = () => Promise<void>;

interface Slot {
  next: Task | undefined;
  running: boolean;
  failures: number;
  timer: NodeJS.Timeout | undefined;
}

export interface RetryQueueOptions {
  initialBackoffMs?: number;
  maxBackoffMs?: number;
  log?: Logger;
}

export class RetryQueue {
  readonly #slots = new Map<string, Slot>();
  readonly #initial: number;
  readonly #max: number;
  readonly #log: Logger;
  #paused = true;
  #stopped = false;
  #idleWaiters: Array<() => void> = [];
  /** Failures per key that were retried (for tests and metrics). */
  retries = 0;

  constructor(options: RetryQueueOptions = {}) {
    this.#initial = options.initialBackoffMs ?? 5;
    this.#max = options.maxBackoffMs ?? 5_000;
    this.#log = options.log ?? silentLogger;
  }

  enqueue(key: string, task: Task): void {
    if (this.#stopped) return;
    const slot = this.#slots.get(key) ?? { next: undefined, running: false, failures: 0, timer: undefined };
    this.#slots.set(key, slot);
    slot.next = task;
    if (slot.timer) {
      clearTimeout(slot.timer); // a fresh event supersedes a scheduled retry
      slot.timer = undefined;
    }
    this.#kick(key, slot);
  }

  /** Work starts only after resume(): the agent first builds its initial snapshot. */
  resume(): void {
    this.#paused = false;
    for (const [key, slot] of this.#slots) this.#kick(key, slot);
    this.#checkIdle();
  }

  stop(): void {
    this.#stopped = true;
    for (const slot of this.#slots.values()) if (slot.timer) clearTimeout(slot.timer);
    this.#slots.clear();
    this.#checkIdle();
  }

  /** Resolves when nothing is queued, running or waiting for a retry. */
  idle(): Promise<void> {
    if (this.#isIdle()) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  get size(): number {
    return this.#slots.size;
  }

  #kick(key: string, slot: Slot): void {
    if (this.#paused || slot.running || slot.timer || !slot.next) return;
    const task = slot.next;
    slot.next = undefined;
    slot.running = true;
    task().then(
      () => this.#settle(key, slot, undefined),
      (err: unknown) => this.#settle(key, slot, { err, task }),
    );
  }

  #settle(key: string, slot: Slot, failure: { err: unknown; task: Task } | undefined): void {
    slot.running = false;
    if (this.#stopped) return this.#checkIdle();
    if (failure && !slot.next) {
      slot.failures++;
      this.retries++;
      const delay = Math.min(this.#max, this.#initial * 2 ** (slot.failures - 1));
      this.#log.warn({ key, err: (failure.err as Error).message, retryInMs: delay }, 'reconcile failed; retrying');
      slot.next = failure.task;
      slot.timer = setTimeout(() => {
        slot.timer = undefined;
        this.#kick(key, slot);
      }, delay);
      slot.timer.unref();
      return;
    }
    if (!failure) slot.failures = 0;
    if (slot.next) return this.#kick(key, slot);
    this.#slots.delete(key);
    this.#checkIdle();
  }

  #isIdle(): boolean {
    return this.#stopped || this.#slots.size === 0;
  }

  #checkIdle(): void {
    if (!this.#isIdle()) return;
    for (const w of this.#idleWaiters.splice(0)) w();
  }
}
