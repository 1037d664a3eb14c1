// Live reconciliation: every enrolled pod's netns (and the host netns) is watched through netlink
// (routing events; the nftables generation, asked every nftPollMs) and verified on change, with a
// periodic sweep as the safety net for anything the watch misses (iptables-legacy, a watch that
// failed to open, a lost notification). A target that keeps drifting is repaired with
// exponential backoff (capped, so the last tampering is still repaired within the cap), with one
// warning per episode and one line per repair.
import type { NetAddon, NetnsHandle } from '../addon/net-addon.js';
import type { NetnsChanges, NetnsWatch, WatchKind } from '../addon/netns-watch.js';
import { silentLogger, type Logger } from '../ops/log.js';
import type { RepairOutcome } from './repair.js';

export type ReconcileScope = 'pod' | 'host';

export interface ReconcileTarget {
  /** Unique among targets: the pod UID, or 'host'. */
  readonly key: string;
  readonly scope: ReconcileScope;
  readonly netns: NetnsHandle;
  readonly kinds: readonly WatchKind[];
  /** Fields for every log line about this target (pod, uid). */
  readonly logFields: Record<string, string>;
  /** Verify and repair; undefined when there is nothing to check any more (the pod left). */
  check(): Promise<RepairOutcome | undefined>;
  /** After every check that returned an outcome (annotations, persisted stamps). */
  onOutcome?(outcome: RepairOutcome): void;
  /** An interface address came or went in the netns (Kubernetes mode checks the sandbox). */
  onAddressesChanged?(): void;
}

export interface ReconcileMetrics {
  repairs(scope: ReconcileScope, reason: string): void;
  check(scope: ReconcileScope, result: RepairOutcome['status']): void;
}

export interface ReconcilerOptions {
  addon: NetAddon;
  /** The routing table the in-pod routes and the fwmark rule use (Istio: 100). */
  routeTable: number;
  /** AMBIENT_RECONCILE_ENROLLMENT_INTERVAL: the sweep; 0 turns it off. */
  intervalMs: number;
  log?: Logger;
  metrics?: ReconcileMetrics;
  /** Events within this are checked once. */
  debounceMs?: number;
  /** Repairs of one target back off from this, doubling, up to maxBackoffMs. */
  firstBackoffMs?: number;
  maxBackoffMs?: number;
  /** No repair for this long ends an episode (backoff and warning reset). */
  quietMs?: number;
  /** Checks in flight at once (the addon has four netns threads; ADDs must not queue behind us). */
  concurrency?: number;
  /** First check after a watch opened (events from before it opened were missed). */
  initialCheckMs?: number;
  /** How often each watched netns is asked for its nftables generation (default NFT_POLL_MS). */
  nftPollMs?: number;
  /** The longest a held watch waits for the holds to end (default WATCH_HOLD_MAX_MS). */
  watchHoldMaxMs?: number;
}

export interface ReconcileStatus {
  lastVerified: string | null;
  repairs: number;
  watched: boolean;
  failing: boolean;
}

interface Tracked {
  readonly target: ReconcileTarget;
  watch: NetnsWatch | undefined;
  opening: boolean;
  timer: NodeJS.Timeout | undefined;
  dueAt: number;
  running: boolean;
  rerun: boolean;
  closed: boolean;
  lastVerified: number | undefined;
  repairs: number;
  /** Repairs (or failed attempts) in the current episode. */
  streak: number;
  lastRepairAt: number;
  failing: boolean;
  watchFailed: boolean;
  /** Its watch waits for the holds to end (holdWatches). */
  held: boolean;
}

/** Held watches opened per turn of the event loop (each is a netns visit submitted from it). */
const WATCH_OPEN_CHUNK = 16;

/**
 * The longest a watch is held: holds come and go with the node's ADDs, and a node that is never
 * without one (a busy churn) must still watch its pods. The sweep and the first check's delay
 * (initialCheckMs) are of the same order.
 */
export const WATCH_HOLD_MAX_MS = 1_000;

export class Reconciler {
  readonly #targets = new Map<string, Tracked>();
  readonly #log: Logger;
  readonly #debounceMs: number;
  readonly #firstBackoffMs: number;
  readonly #maxBackoffMs: number;
  readonly #quietMs: number;
  readonly #concurrency: number;
  readonly #initialCheckMs: number;
  readonly #waiting: Array<() => void> = [];
  #inFlight = 0;
  #sweep: NodeJS.Timeout | undefined;
  #stopped = false;
  /** Holds taken and not released (holdWatches); while any is, added targets' watches wait. */
  #holds = 0;
  /** The targets whose watch waits, oldest first. */
  #held: Tracked[] = [];
  /** Opens the held watches WATCH_HOLD_MAX_MS after the oldest of them was held. */
  #holdCap: NodeJS.Timeout | undefined;
  readonly #watchHoldMaxMs: number;

  constructor(private readonly opts: ReconcilerOptions) {
    this.#log = (opts.log ?? silentLogger).child({ component: 'reconciler' });
    this.#debounceMs = opts.debounceMs ?? 25;
    this.#firstBackoffMs = opts.firstBackoffMs ?? 50;
    this.#maxBackoffMs = opts.maxBackoffMs ?? 2_000;
    this.#quietMs = opts.quietMs ?? 5_000;
    this.#concurrency = opts.concurrency ?? 2;
    this.#initialCheckMs = opts.initialCheckMs ?? 500;
    this.#watchHoldMaxMs = opts.watchHoldMaxMs ?? WATCH_HOLD_MAX_MS;
  }

  /** Starts the sweep. Targets may be added before. */
  start(): void {
    if (this.opts.intervalMs > 0 && !this.#sweep) {
      this.#sweep = setInterval(() => this.sweep(), this.opts.intervalMs);
      this.#sweep.unref();
    }
  }

  /**
   * Until the returned release is called (once; more calls do nothing), targets added are
   * tracked but their watches wait, at most WATCH_HOLD_MAX_MS. Opening a watch is a netns visit
   * and event-loop work per pod: taken while a restart restores every enrolled pod at once, and
   * while an ADD is onboarding a pod (its own watch included), so neither shares the CPUs with
   * them. The watches open from the turn after the last hold is released, WATCH_OPEN_CHUNK per
   * turn of the event loop so nothing waits behind them all.
   */
  holdWatches(): () => void {
    this.#holds++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      if (--this.#holds === 0) this.#openHeld();
    };
  }

  #hold(t: Tracked): void {
    t.held = true;
    this.#held.push(t);
    if (this.#holdCap) return;
    this.#holdCap = setTimeout(() => this.#openHeld(), this.#watchHoldMaxMs);
    this.#holdCap.unref();
  }

  #openHeld(): void {
    clearTimeout(this.#holdCap);
    this.#holdCap = undefined;
    const waiting = this.#held.splice(0);
    for (const t of waiting) t.held = false;
    const openSome = (): void => {
      if (this.#stopped) return;
      for (const t of waiting.splice(0, WATCH_OPEN_CHUNK)) if (!t.closed && !t.watch && !t.opening) this.#openWatch(t);
      if (waiting.length > 0) setImmediate(openSome);
    };
    // From the next turn: the last ADD's answer, written in this one, goes out first.
    if (waiting.length > 0) setImmediate(openSome);
  }

  /** Watches the target (replacing one with the same key) and checks it soon. */
  add(target: ReconcileTarget): void {
    if (this.#stopped) return;
    this.remove(target.key);
    const t: Tracked = {
      target,
      watch: undefined,
      opening: false,
      timer: undefined,
      dueAt: 0,
      running: false,
      rerun: false,
      closed: false,
      lastVerified: undefined,
      repairs: 0,
      streak: 0,
      lastRepairAt: 0,
      failing: false,
      watchFailed: false,
      held: false,
    };
    this.#targets.set(target.key, t);
    if (this.#holds > 0) this.#hold(t);
    else this.#openWatch(t);
  }

  /** Stops watching; a check in flight finishes, nothing new starts. */
  remove(key: string): void {
    const t = this.#targets.get(key);
    if (!t) return;
    this.#targets.delete(key);
    t.closed = true;
    if (t.timer) clearTimeout(t.timer);
    t.watch?.close();
  }

  has(key: string): boolean {
    return this.#targets.has(key);
  }

  status(key: string): ReconcileStatus | undefined {
    const t = this.#targets.get(key);
    if (!t) return undefined;
    return {
      lastVerified: t.lastVerified === undefined ? null : new Date(t.lastVerified).toISOString(),
      repairs: t.repairs,
      watched: t.watch !== undefined && !t.watch.closed,
      failing: t.failing,
    };
  }

  /** Fds held by open watches (diagnostics and the idle-cost test). */
  watchFds(): number {
    let n = 0;
    for (const t of this.#targets.values()) n += t.watch && !t.watch.closed ? t.watch.fds.length : 0;
    return n;
  }

  /** Checks every target (the periodic safety net); reopens watches that failed. */
  sweep(): void {
    for (const t of this.#targets.values()) {
      if (!t.watch && !t.opening && !t.held) this.#openWatch(t);
      this.#schedule(t, 0);
    }
  }

  /** Checks one target now (after its backoff) and resolves when that check is done. */
  async checkNow(key: string): Promise<void> {
    const t = this.#targets.get(key);
    if (t) await this.#run(t);
  }

  stop(): void {
    this.#stopped = true;
    if (this.#sweep) clearInterval(this.#sweep);
    this.#sweep = undefined;
    clearTimeout(this.#holdCap);
    this.#holdCap = undefined;
    this.#held.length = 0;
    for (const key of [...this.#targets.keys()]) this.remove(key);
  }

  #openWatch(t: Tracked): void {
    t.opening = true;
    this.opts.addon
      .watchNetns(t.target.netns, {
        kinds: t.target.kinds,
        routeTable: this.opts.routeTable,
        ...(this.opts.nftPollMs !== undefined ? { nftPollMs: this.opts.nftPollMs } : {}),
        onChange: (changes) => this.#onChange(t, changes),
        onError: (err) => {
          t.watch = undefined;
          this.#log.warn({ ...t.target.logFields, err: err.message }, 'netlink watch failed; the sweep covers this netns until it reopens');
        },
      })
      .then(
        (watch) => {
          t.opening = false;
          if (t.closed) return watch.close();
          t.watch = watch;
          t.watchFailed = false;
          this.#schedule(t, this.#initialCheckMs);
        },
        (err: unknown) => {
          t.opening = false;
          if (t.closed) return;
          if (!t.watchFailed)
            this.#log.warn({ ...t.target.logFields, err: (err as Error).message }, 'cannot watch the netns; the sweep covers it');
          t.watchFailed = true;
          this.#schedule(t, this.#initialCheckMs);
        },
      );
  }

  #onChange(t: Tracked, changes: NetnsChanges): void {
    if (changes.addresses > 0) t.target.onAddressesChanged?.();
    if (changes.overrun || changes.nftables + changes.rules + changes.routes > 0) this.#schedule(t, this.#debounceMs);
  }

  /** How long the current episode's backoff still holds this target off. */
  #backoffLeft(t: Tracked, now: number): number {
    if (t.streak === 0 || now - t.lastRepairAt > this.#quietMs) return 0;
    const backoff = Math.min(this.#maxBackoffMs, this.#firstBackoffMs * 2 ** (t.streak - 1));
    return Math.max(0, t.lastRepairAt + backoff - now);
  }

  #schedule(t: Tracked, delayMs: number): void {
    if (t.closed || this.#stopped) return;
    if (t.running) {
      t.rerun = true;
      return;
    }
    const now = Date.now();
    const dueAt = now + Math.max(delayMs, this.#backoffLeft(t, now));
    if (t.timer && t.dueAt <= dueAt) return; // already due sooner
    if (t.timer) clearTimeout(t.timer);
    t.dueAt = dueAt;
    t.timer = setTimeout(() => {
      t.timer = undefined;
      void this.#run(t);
    }, dueAt - now);
    t.timer.unref();
  }

  async #run(t: Tracked): Promise<void> {
    if (t.closed || t.running) return;
    t.running = true;
    t.rerun = false;
    await this.#acquire();
    let outcome: RepairOutcome | undefined;
    try {
      outcome = await t.target
        .check()
        .catch((err: unknown) => ({ status: 'failed' as const, reason: 'check-failed', drift: [], error: err as Error }));
    } finally {
      this.#release();
      t.running = false;
    }
    if (outcome && !t.closed) this.#record(t, outcome);
    if (t.rerun) this.#schedule(t, this.#debounceMs);
  }

  #record(t: Tracked, outcome: RepairOutcome): void {
    const now = Date.now();
    this.opts.metrics?.check(t.target.scope, outcome.status);
    if (outcome.status === 'in-sync') {
      t.lastVerified = now;
      t.failing = false;
    } else {
      const newEpisode = t.streak === 0 || now - t.lastRepairAt > this.#quietMs;
      t.streak = newEpisode ? 1 : t.streak + 1;
      t.lastRepairAt = now;
      const backoffMs = Math.min(this.#maxBackoffMs, this.#firstBackoffMs * 2 ** (t.streak - 1));
      const fields = { ...t.target.logFields, scope: t.target.scope, reason: outcome.reason, drift: outcome.drift, attempt: t.streak };
      if (outcome.status === 'repaired') {
        t.lastVerified = now;
        t.repairs++;
        t.failing = false;
        this.opts.metrics?.repairs(t.target.scope, outcome.reason);
        if (newEpisode) this.#log.warn(fields, 'rules drifted; repaired');
        else this.#log.info({ ...fields, backoffMs }, 'rules drifted again; repaired (repairs of this target back off)');
      } else {
        t.failing = true;
        const level = newEpisode ? 'error' : 'info';
        this.#log[level](
          { ...fields, err: outcome.error.message, retryInMs: backoffMs },
          'rules drifted and the repair failed; retrying with backoff',
        );
        this.#schedule(t, backoffMs);
      }
    }
    t.target.onOutcome?.(outcome);
  }

  async #acquire(): Promise<void> {
    if (this.#inFlight < this.#concurrency) {
      this.#inFlight++;
      return;
    }
    await new Promise<void>((resolve) => this.#waiting.push(resolve));
  }

  #release(): void {
    const next = this.#waiting.shift();
    if (next)
      next(); // the slot passes straight on
    else this.#inFlight--;
  }
}
