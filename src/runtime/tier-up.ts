// When V8 optimises the agent's per-pod path. V8 moves a function from its baseline code to
// Maglev's optimised code after ~400 calls (--invocation-count-for-maglev, and 500 more after
// any change of its inline caches): a function called once per pod runs unoptimised for the
// first ~400-900 pods a node sees, which on most nodes is all of them. Lowered once the start's
// work is done, the ADD path is optimised after a few dozen pods (the agent share of a
// sequential ADD ~10% shorter), while the start's own code (run once) is not compiled at all:
// lowered on the command line, the start itself paid for compiling it.
// Not in a burst: there (a node's first pods after a start often come as one) every function of
// the path would reach the lowered threshold at once and compile on V8's threads beside the
// burst, which slowed it and left the compilers' memory in the agent's RSS right after it
// (README, "What profiling found"). So a burst (load-phases.ts) runs with V8's own thresholds
// until its last event is answered, its tail included, and the path compiles with the next pod
// after it.
import { setFlagsFromString } from 'node:v8';
import { silentLogger, type Logger } from '../ops/log.js';
import { BURST_IN_FLIGHT, type LoadPhase } from './load-phases.js';

/** The calls after which the per-pod path is optimised (once started, outside bursts); 0: V8's own. */
export const DEFAULT_TIER_UP_CALLS = 20;
/** Far above V8's own; only keeps the flag an int V8 accepts. */
export const MAX_TIER_UP_CALLS = 1_000_000;

/** The two V8 flags the tier-up moves. */
export interface TieringThresholds {
  /** --invocation-count-for-maglev */
  maglevCalls: number;
  /** --minimum-invocations-after-ic-update */
  callsAfterIcUpdate: number;
}

export function tieringFlags(t: TieringThresholds): string {
  return `--invocation-count-for-maglev=${t.maglevCalls} --minimum-invocations-after-ic-update=${t.callsAfterIcUpdate}`;
}

/**
 * V8's own thresholds by V8 version (major.minor), what a burst restores: V8 has no API to read a
 * flag, and asking the binary (`--v8-options`) at run time would start a process beside the
 * first pods. test/unit/tier-up.test.ts checks the running Node's entry against its
 * `--v8-options` (Node 20 and Node 24 in CI). A version not listed leaves V8 alone.
 */
export const V8_TIERING_DEFAULTS: Readonly<Record<string, TieringThresholds>> = {
  '11.3': { maglevCalls: 100, callsAfterIcUpdate: 500 }, // Node 20 (Maglev is off there: inert)
  '13.6': { maglevCalls: 400, callsAfterIcUpdate: 500 }, // Node 24, the image's
};

export function v8TieringDefaults(v8Version = process.versions.v8): TieringThresholds | undefined {
  return V8_TIERING_DEFAULTS[v8Version.split('.').slice(0, 2).join('.')];
}

/**
 * Lowers V8's thresholds to `calls` when the agent is idle and puts V8's own back when a burst
 * starts; a lone event changes nothing. Node lets flags change at run time (it turns V8's flag
 * freeze off); both are read at each tiering decision, so a change takes effect at once.
 */
export class PerPodTierUp {
  readonly #lowered: TieringThresholds;
  /** The thresholds last set; V8's own until the first change. */
  #current: 'defaults' | 'lowered' = 'defaults';

  constructor(
    calls: number,
    private readonly defaults: TieringThresholds,
    phase: LoadPhase = 'idle',
    private readonly setFlags: (flags: string) => void = setFlagsFromString,
  ) {
    this.#lowered = { maglevCalls: calls, callsAfterIcUpdate: calls };
    this.phase(phase);
  }

  phase(phase: LoadPhase): void {
    const want = phase === 'burst' ? 'defaults' : phase === 'idle' ? 'lowered' : this.#current;
    if (want === this.#current) return;
    this.setFlags(tieringFlags(want === 'lowered' ? this.#lowered : this.defaults));
    this.#current = want;
  }
}

/**
 * The tier-up for `calls` (0: none), from the load phase now; a V8 whose defaults are not known
 * leaves V8 alone (logged), since a burst could not get them back.
 */
export function startPerPodTierUp(
  calls: number,
  phase: LoadPhase,
  log: Logger = silentLogger,
  setFlags: (flags: string) => void = setFlagsFromString,
): PerPodTierUp | undefined {
  if (calls === 0) return undefined;
  const defaults = v8TieringDefaults();
  if (!defaults) {
    log.warn({ v8: process.versions.v8 }, "V8's own tiering thresholds are not known for this V8; leaving them alone");
    return undefined;
  }
  log.info({ calls, v8Defaults: defaults, burstInFlight: BURST_IN_FLIGHT }, 'V8 optimises the per-pod path sooner outside bursts');
  return new PerPodTierUp(calls, defaults, phase, setFlags);
}
