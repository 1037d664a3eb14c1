// When V8 optimises the agent's per-pod path (opt-in: --tier-up-calls). V8 moves a function from
// its baseline code to Maglev's optimised code after ~400 calls (--invocation-count-for-maglev,
// and 500 more after any change of its inline caches): a function called once per pod runs
// unoptimised for the first ~400-900 pods a node sees, which on most nodes is all of them.
// Lowered after start, the ADD path is optimised after a few dozen pods (the agent share of a
// sequential ADD ~10% shorter), while the start's own code (run once) is not compiled at all:
// lowered on the command line, the start itself paid for compiling it. Not the default: when the
// first pods after a start come as one burst, the whole path compiles inside it, on V8's threads
// beside the burst, and the compilers' memory peaks there (README, "What profiling found").
import { setFlagsFromString } from 'node:v8';

/** V8's own threshold (Node 24 / V8 13.6), for the help text. */
export const V8_DEFAULT_MAGLEV_CALLS = 400;
/** V8's own thresholds: see the header for why lowering them is an operator's choice. */
export const DEFAULT_TIER_UP_CALLS = 0;
/** Far above V8's own; only keeps the flag an int V8 accepts. */
export const MAX_TIER_UP_CALLS = 1_000_000;

/**
 * Lowers Maglev's call thresholds to `calls` from now on; 0 leaves V8's defaults. Returns the
 * flags it set ('' for none). Node lets flags change at run time (it turns V8's flag freeze
 * off); these two are read at each tiering decision, so the change takes effect at once.
 */
export function tierUpAfter(calls: number): string {
  if (calls === 0) return '';
  const flags = `--invocation-count-for-maglev=${calls} --minimum-invocations-after-ic-update=${calls}`;
  setFlagsFromString(flags);
  return flags;
}
