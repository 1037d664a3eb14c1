// Asks the nftables watch sockets of many namespaces for their ruleset generation, each once per
// period, from one unref'd timer on Node's loop. Waking the process costs more than an ask
// (measured on the 2-vCPU VM: an empty 100 ms timer alone took 0.27% of a core; an ask of a cold
// socket ~10 us), so the watches fill the period's slots (a tenth of it each) one after the
// other, PER_TICK at a time, and the timer only wakes for slots that hold any: a node of up to
// 128 pods is asked in one go once a period, and no tick blocks the loop for much over a
// millisecond.
import type { RawAddon } from './binding.js';

interface Asked {
  readonly fd: number;
  last: number;
  readonly onMoved: () => void;
  readonly onError: (err: Error) => void;
}

/** No tick is shorter than this: a short period gets fewer slots instead. */
const MIN_TICK_MS = 10;
const MAX_SLOTS = 10;
/** Watches per slot before the next slot is used. */
const PER_TICK = 128;

export class NftGenerationPoller {
  readonly #slots: Array<Set<Asked>>;
  readonly #tickMs: number;
  /** The slot the pending timer asks. */
  #next = 0;
  #timer: NodeJS.Timeout | undefined;
  #size = 0;

  constructor(
    private readonly raw: Pick<RawAddon, 'nftWatchGeneration'>,
    readonly periodMs: number,
  ) {
    if (!(periodMs > 0)) throw new RangeError(`poll period must be positive, got ${periodMs}`);
    const slots = Math.max(1, Math.min(MAX_SLOTS, Math.floor(periodMs / MIN_TICK_MS)));
    this.#slots = Array.from({ length: slots }, () => new Set<Asked>());
    this.#tickMs = periodMs / slots;
  }

  /** Watches in all slots (diagnostics and tests). */
  get size(): number {
    return this.#size;
  }

  /**
   * Takes the generation now as the baseline (a failure throws here), then calls onMoved once
   * per poll that finds another number, or onError once (and stops asking) when asking fails.
   * Returns the function that stops asking.
   */
  add(fd: number, onMoved: () => void, onError: (err: Error) => void): () => void {
    const asked: Asked = { fd, last: this.raw.nftWatchGeneration(fd), onMoved, onError };
    const slot = this.#slots.find((s) => s.size < PER_TICK) ?? this.#slots.reduce((least, s) => (s.size < least.size ? s : least));
    slot.add(asked);
    this.#size++;
    if (!this.#timer) this.#scheduleAfter(this.#slots.indexOf(slot));
    return () => this.#remove(slot, asked);
  }

  #remove(slot: Set<Asked>, asked: Asked): void {
    if (!slot.delete(asked)) return;
    if (--this.#size === 0 && this.#timer) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
  }

  /** Sleeps until the next slot after `from` that holds a watch (a whole period when only `from` does). */
  #scheduleAfter(from: number): void {
    const count = this.#slots.length;
    let ticks = 1;
    while (ticks < count && this.#slots[(from + ticks) % count]!.size === 0) ticks++;
    this.#next = (from + ticks) % count;
    this.#timer = setTimeout(() => this.#askNext(), ticks * this.#tickMs);
    this.#timer.unref();
  }

  #askNext(): void {
    this.#timer = undefined;
    const asking = this.#next;
    this.#ask(this.#slots[asking]!);
    if (this.#size > 0 && !this.#timer) this.#scheduleAfter(asking);
  }

  #ask(slot: Set<Asked>): void {
    for (const asked of [...slot]) {
      if (!slot.has(asked)) continue; // an earlier callback of this tick closed its watch
      let now: number;
      try {
        now = this.raw.nftWatchGeneration(asked.fd);
      } catch (err) {
        this.#remove(slot, asked);
        asked.onError(err as Error);
        continue;
      }
      if (now === asked.last) continue;
      asked.last = now;
      asked.onMoved();
    }
  }
}
