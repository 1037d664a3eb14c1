// The agent's tier-up (src/runtime/tier-up.ts): lowered thresholds outside bursts, V8's own in
// them, and V8's own known for the Node that runs. That the flags really make V8 optimise a
// function after a few calls, and that V8's own put back leave it alone, is checked in a child
// process with V8's natives syntax, which reports a function's tier. Maglev is V8's default mid
// tier from V8 12 (Node 22); the image runs Node 24 and CI runs this file on Node 24 too
// (scripts/test-node-lts.sh). Node 20 has no Maglev: the flags are inert there.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  DEFAULT_TIER_UP_CALLS,
  PerPodTierUp,
  startPerPodTierUp,
  tieringFlags,
  v8TieringDefaults,
  type TieringThresholds,
} from '../../src/runtime/tier-up.js';
import type { LoadPhase } from '../../src/runtime/load-phases.js';

const canCheck = Number(process.versions.v8.split('.')[0]) >= 12;
const dir = mkdtempSync(join(tmpdir(), 'tier-up-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** V8's %GetOptimizationStatus bits (src/runtime/runtime.h OptimizationStatus). */
const OPTIMIZED = 1 << 4;
const MAGLEVVED = 1 << 5;

const V8_OWN: TieringThresholds = { maglevCalls: 400, callsAfterIcUpdate: 500 };
const LOWERED = '--invocation-count-for-maglev=20 --minimum-invocations-after-ic-update=20';
const OWN = '--invocation-count-for-maglev=400 --minimum-invocations-after-ic-update=500';

/** Both thresholds' defaults as `node --v8-options` prints them. */
function printedDefaults(v8Options: string): TieringThresholds {
  const value = (flag: string): number => Number(new RegExp(`default: --${flag}=(\\d+)\\b`).exec(v8Options)?.[1]);
  return { maglevCalls: value('invocation-count-for-maglev'), callsAfterIcUpdate: value('minimum-invocations-after-ic-update') };
}

/** A tier-up of 20 calls over V8_OWN, with the flags it sets recorded. */
function recorded(phase: LoadPhase = 'idle'): { tierUp: PerPodTierUp; set: string[] } {
  const set: string[] = [];
  return { tierUp: new PerPodTierUp(DEFAULT_TIER_UP_CALLS, V8_OWN, phase, (f) => set.push(f)), set };
}

/**
 * The tier of a once-per-pod function after `calls` calls in a child that first sets the flags a
 * tier-up set in the parent (in order), with V8's own thresholds of the Node that runs.
 */
function tierAfter(calls: number, scenario?: (tierUp: PerPodTierUp) => void): number {
  const set: string[] = [];
  if (scenario) scenario(new PerPodTierUp(DEFAULT_TIER_UP_CALLS, v8TieringDefaults()!, 'idle', (f) => set.push(f)));
  const script = join(dir, `tier-${calls}-${set.length}.mjs`);
  writeFileSync(
    script,
    [
      `import { setFlagsFromString } from 'node:v8';`,
      // One call per pod, no loop (a loop's back edges would count too).
      `function perPod(event, settings) { return event.uid + settings.ipv6 * 2; }`,
      ...set.map((flags) => `setFlagsFromString(${JSON.stringify(flags)});`),
      `const event = { uid: 1 }, settings = { ipv6: 1 };`,
      `for (let i = 0; i < ${calls}; i++) perPod(event, settings);`,
      // Maglev compiles on a background thread; the next call after it finished installs the code.
      `await new Promise((resolve) => setTimeout(resolve, 300));`,
      `perPod(event, settings);`,
      `process.stdout.write(String(%GetOptimizationStatus(perPod)));`,
    ].join('\n'),
  );
  const out = spawnSync(process.execPath, ['--allow-natives-syntax', '--no-warnings', script], { encoding: 'utf8' });
  if (out.status !== 0) throw new Error(`child failed: ${out.stderr}`);
  return Number(out.stdout);
}

const idle = (): void => undefined;
const burst = (tierUp: PerPodTierUp): void => tierUp.phase('burst');

describe('tier-up of the per-pod path', () => {
  it("knows V8's own thresholds for the Node that runs this (what a burst puts back), as the binary prints them", () => {
    const printed = printedDefaults(execFileSync(process.execPath, ['--v8-options'], { encoding: 'utf8', maxBuffer: 8 * 2 ** 20 }));
    expect(v8TieringDefaults()).toEqual(printed);
  });

  it('a V8 it does not know, or 0 calls, leaves V8 alone', () => {
    expect(v8TieringDefaults('99.1.0.0')).toBeUndefined();
    const set: string[] = [];
    expect(startPerPodTierUp(0, 'idle', undefined, (f) => set.push(f))).toBeUndefined();
    expect(set).toEqual([]);
    expect(DEFAULT_TIER_UP_CALLS).toBe(20);
    expect(tieringFlags(V8_OWN)).toBe(OWN);
  });

  it("lowers the thresholds when idle, keeps them for a lone event, and puts V8's own back for a burst until it is over", () => {
    const { tierUp, set } = recorded();
    expect(set).toEqual([LOWERED]);
    for (const phase of ['lone', 'idle', 'lone'] as const) tierUp.phase(phase); // sequential pods
    expect(set).toEqual([LOWERED]);
    tierUp.phase('burst');
    expect(set).toEqual([LOWERED, OWN]);
    tierUp.phase('idle');
    expect(set).toEqual([LOWERED, OWN, LOWERED]);
  });

  it('started inside a burst or beside a lone event, it waits for the agent to go idle', () => {
    for (const phase of ['lone', 'burst'] as const) {
      const { tierUp, set } = recorded(phase);
      expect(set).toEqual([]);
      tierUp.phase('idle');
      expect(set).toEqual([LOWERED]);
    }
  });

  it.runIf(canCheck)("optimises a once-per-pod function after 60 calls, where V8's own thresholds leave it unoptimised", () => {
    expect(tierAfter(60) & OPTIMIZED).toBe(0); // no tier-up: nothing set
    expect(tierAfter(60, idle) & MAGLEVVED).toBe(MAGLEVVED);
  });

  it.runIf(canCheck)("in a burst V8's own thresholds are back: 60 calls leave the function unoptimised", () => {
    expect(tierAfter(60, burst) & OPTIMIZED).toBe(0);
  });
});
