import { defineConfig } from 'vitest/config';

// `npm run test:image`: the built image, started as Istio's chart starts it (podman, root). Not
// part of `npm test` / CI: it needs the image built first (README, "The image").
export default defineConfig({
  test: {
    reporters: ['default', './test/summary-reporter.ts'],
    include: ['test/image/**/*.test.ts'],
    fileParallelism: false,
    testTimeout: 120_000,
    hookTimeout: 120_000,
  },
});
