// Prints one plain closing line, "N passed, N failed, N skipped", after vitest's own summary,
// so any CI that reads closing lines can count the tests; and, when the opt-in ZDS conformance run
// is off, a line saying so and how to turn it on.
import type { Reporter, TestModule } from 'vitest/node';
import { conformanceClient, CONFORMANCE_SKIPPED } from './conformance-client.js';

export default class SummaryReporter implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>): void {
    const counts = { passed: 0, failed: 0, skipped: 0 };
    for (const module of testModules) {
      for (const test of module.children.allTests()) {
        const state = test.result().state;
        if (state === 'passed') counts.passed++;
        else if (state === 'failed') counts.failed++;
        else counts.skipped++;
      }
      if (module.state() === 'failed' && [...module.children.allTests()].length === 0) counts.failed++;
    }
    if (conformanceClient(true) === undefined) process.stdout.write(`\n${CONFORMANCE_SKIPPED}\n`);
    process.stdout.write(`\n${counts.passed} passed, ${counts.failed} failed, ${counts.skipped} skipped\n`);
  }
}
