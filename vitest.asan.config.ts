// npm run test:asan (scripts/test-asan.sh): the projects of vitest.config.ts that run native code
// (integration, priv), with the test workers running the AddressSanitizer + UBSan builds from
// build-asan/ (the script sets AMBIENT_NATIVE_ADDON, AMBIENT_CNI_PLUGIN and the sanitizer options).
//
// Node itself is not instrumented, so the ASan runtime must be the first library of the process
// that dlopen()s the sanitized addon: the workers are started with LD_PRELOAD (ASAN_PRELOAD from
// the script), set here in the vitest main process's environment, which the workers inherit (the
// main process itself never loads the addon and runs without it).
//
// Nothing a worker starts gets LD_PRELOAD: ip, nft, python3 and bash would run under ASan too and
// fail the run on their own bugs (iproute2's `ip route show` trips ASan's strncpy-overlap check).
// So every node process below the main one (NODE_OPTIONS --import, before anything else) drops
// LD_PRELOAD from its environment, and a node process started without the runtime (a test's
// child, e.g. test/helpers/cni-driver.mjs) also drops AMBIENT_NATIVE_ADDON: it cannot load the
// sanitized addon and loads the normal one from build/Release. The sanitized plugin links the
// runtime itself (test/helpers/plugin-exec.ts runs it with AMBIENT_CNI_PLUGIN).
import { defineConfig } from 'vitest/config';
import base from './vitest.config.ts';

const preload = process.env['ASAN_PRELOAD'];
if (!preload) throw new Error('vitest.asan.config.ts is run by scripts/test-asan.sh (npm run test:asan), which sets ASAN_PRELOAD');

const scrub = `
const env = process.env;
if (env.LD_PRELOAD !== env.ASAN_PRELOAD) delete env.AMBIENT_NATIVE_ADDON;
delete env.LD_PRELOAD;
`;
process.env['LD_PRELOAD'] = preload;
process.env['NODE_OPTIONS'] = [process.env['NODE_OPTIONS'], `--import=data:text/javascript,${encodeURIComponent(scrub)}`]
  .filter(Boolean)
  .join(' ');

/**
 * Not run under the sanitizers: the soak measures the RSS growth of the normal allocator over
 * 5,000 cycles; ASan's quarantine (freed memory held back to catch use-after-free) and shadow
 * memory grow it by design, and the cycles alone take over 2 minutes under ASan. The idle-cost
 * test bounds the CPU share of 330 watched pods (< 1% of a core, 0.3-0.35% with the normal
 * build): the instrumented poll and drain code triples it (1.03% measured), by design too.
 */
const EXCLUDED = ['test/priv/soak.test.ts', 'test/priv/reconcile-idle.test.ts'];

interface ProjectLike {
  test?: { name?: string; exclude?: string[]; testTimeout?: number; hookTimeout?: number; [k: string]: unknown };
  [k: string]: unknown;
}

const projects = ((base.test?.projects ?? []) as ProjectLike[])
  .filter((p) => p.test?.name !== 'unit')
  .map((p) => ({
    ...p,
    test: {
      ...p.test,
      exclude: [...(p.test?.exclude ?? ['**/node_modules/**', '**/.git/**']), ...EXCLUDED],
      // ASan and UBSan slow native code (and the processes around it) down 2-3x.
      testTimeout: Math.max(p.test?.testTimeout ?? 5_000, 60_000),
      hookTimeout: Math.max(p.test?.hookTimeout ?? 10_000, 60_000),
    },
  }));

export default defineConfig({ test: { ...base.test, projects } });
