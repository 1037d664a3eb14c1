import { defineConfig } from 'vitest/config';

// Two projects: "unit" needs no privileges and uses the fake addon; "priv" drives the
// real addon against real network namespaces and runs one file at a time so that
// namespace-heavy tests do not compete for the two CI cores.
export default defineConfig({
  test: {
    reporters: ['default', './test/summary-reporter.ts'],
    projects: [
      { test: { name: 'unit', include: ['test/unit/**/*.test.ts'] } },
      {
        test: {
          name: 'priv',
          include: ['test/priv/**/*.test.ts'],
          fileParallelism: false,
          testTimeout: 60_000,
          hookTimeout: 60_000,
        },
      },
    ],
  },
});
