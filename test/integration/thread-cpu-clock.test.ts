// The addon's threadCpuSeconds (native/step_clock.cc, CLOCK_THREAD_CPUTIME_ID) on the JS thread:
// the event loop's own CPU time, exact at each read (the metric of src/ops/busy-loop-cpu.ts).
import { describe, expect, it } from 'vitest';
import { NativeNetAddon } from '../../src/addon/net-addon.js';

const addon = new NativeNetAddon();

/** Spins for `ms` without a syscall (performance.now() is the vDSO): no tick or switch need update the thread's account. */
function spin(ms: number): void {
  for (const end = performance.now() + ms; performance.now() < end;);
}

describe('threadCpuSeconds (the calling thread CPU clock)', () => {
  it('counts what the thread ran up to the read itself, without a context switch in between', () => {
    spin(1); // settle onto a CPU
    const wallStart = performance.now();
    const before = addon.threadCpuSeconds();
    spin(3);
    const spent = addon.threadCpuSeconds() - before;
    const wall = (performance.now() - wallStart) / 1000;
    // getrusage(RUSAGE_THREAD) can read 0 here (no tick or switch in 3 ms); this clock counts
    // the spin, at most its wall time, at least a fair part of it even on a CPU shared with
    // the other test files.
    expect(spent).toBeGreaterThan(wall / 10);
    expect(spent).toBeLessThanOrEqual(wall + 0.0005);
  });

  it('does not count the time the thread sleeps', () => {
    const before = addon.threadCpuSeconds();
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50);
    expect(addon.threadCpuSeconds() - before).toBeLessThan(0.01);
  });
});
