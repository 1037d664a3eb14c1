import { defineConfig } from 'vitest/config';

// "unit" needs no privileges and uses the fake addon; "integration" uses the real addon
// without privileges (sockets, own namespace files); "priv" drives the
// real addon against real network namespaces and runs one file at a time so that
// namespace-heavy tests do not compete for the two CI cores. "conformance" (opt-in, only when
// ZDS_CONFORMANCE_CLIENT names an independent ztunnel-like client) runs the ZDS scenarios against
// that client too; `npm run test:conformance` runs it alone (vitest.conformance.config.ts).
const conformance = { test: { name: 'conformance', include: ['test/conformance/**/*.test.ts'], testTimeout: 30_000 } };

export default defineConfig({
  test: {
    reporters: ['default', './test/summary-reporter.ts'],
    projects: [
      { test: { name: 'unit', include: ['test/unit/**/*.test.ts'] } },
      // Real addon and real sockets, no privileges needed.
      { test: { name: 'integration', include: ['test/integration/**/*.test.ts'], testTimeout: 30_000 } },
      {
        test: {
          name: 'priv',
          include: ['test/priv/**/*.test.ts'],
          fileParallelism: false,
          testTimeout: 60_000,
          hookTimeout: 60_000,
        },
      },
      ...(process.env['ZDS_CONFORMANCE_CLIENT'] ? [conformance] : []),
    ],
  },
});
