// The agent's tier-up (src/runtime/tier-up.ts) really makes V8 optimise a function after a few
// calls. Checked in a child process with V8's natives syntax, which reports a function's tier.
// Maglev is V8's default mid tier from V8 12 (Node 22); the image runs Node 24 and CI runs this
// file on Node 24 too (scripts/test-node-lts.sh). Node 20 has no Maglev: the flags are inert there.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { DEFAULT_TIER_UP_CALLS, tierUpAfter } from '../../src/runtime/tier-up.js';

/** What the README's measurements used. */
const MEASURED = 20;
import { projectRoot } from '../../src/project-root.js';

const v8Major = Number(process.versions.v8.split('.')[0]);
// The child imports the TypeScript source, so it needs Node's own type stripping too.
const canCheck = v8Major >= 12 && (process.features as { typescript?: unknown }).typescript !== undefined;
const dir = mkdtempSync(join(tmpdir(), 'tier-up-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** V8's %GetOptimizationStatus bits (src/runtime/runtime.h OptimizationStatus). */
const OPTIMIZED = 1 << 4;
const MAGLEVVED = 1 << 5;

function tierAfter(calls: number, tierUpCalls: number | undefined): number {
  const script = join(dir, `tier-${calls}-${tierUpCalls ?? 'none'}.mjs`);
  const module = pathToFileURL(join(projectRoot(), 'src', 'runtime', 'tier-up.ts')).href;
  writeFileSync(
    script,
    [
      `import { tierUpAfter } from ${JSON.stringify(module)};`,
      // One call per pod, no loop (a loop's back edges would count too).
      `function perPod(event, settings) { return event.uid + settings.ipv6 * 2; }`,
      tierUpCalls === undefined ? '' : `tierUpAfter(${tierUpCalls});`,
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

describe('tier-up of the per-pod path', () => {
  it('0, the default, leaves V8 alone', () => {
    expect(DEFAULT_TIER_UP_CALLS).toBe(0);
    expect(tierUpAfter(0)).toBe('');
  });

  it('sets the two Maglev thresholds', () => {
    // Harmless in this worker: only when V8 optimises changes, not what code does.
    expect(tierUpAfter(MEASURED)).toBe('--invocation-count-for-maglev=20 --minimum-invocations-after-ic-update=20');
  });

  it.runIf(canCheck)("optimises a once-per-pod function after 60 calls, where V8's own thresholds leave it unoptimised", () => {
    const without = tierAfter(60, undefined);
    const lowered = tierAfter(60, MEASURED);
    expect(without & OPTIMIZED).toBe(0);
    expect(lowered & MAGLEVVED).toBe(MAGLEVVED);
  });
});
