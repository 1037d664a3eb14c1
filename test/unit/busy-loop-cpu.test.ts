// The event loop's CPU while pod events are in flight (src/ops/busy-loop-cpu.ts).
import { describe, expect, it } from 'vitest';
import { BusyLoopCpu, threadCpuClock, type ThreadCpu } from '../../src/ops/busy-loop-cpu.js';
import { AgentMetrics } from '../../src/ops/metrics.js';
import { LoadPhases } from '../../src/runtime/load-phases.js';

/** A clock the test moves, and the spells the meter reported. */
function metered(): { load: LoadPhases; clock: ThreadCpu; spells: Array<[number, number]> } {
  const clock: ThreadCpu = { user: 0, system: 0 };
  const spells: Array<[number, number]> = [];
  const meter = new BusyLoopCpu(
    () => ({ ...clock }),
    (user, system) => spells.push([user, system]),
  );
  return { load: new LoadPhases((phase, previous) => meter.phase(phase, previous)), clock, spells };
}

describe('BusyLoopCpu', () => {
  it('counts a sequential event from its arrival to its answer, and nothing while idle', () => {
    const { load, clock, spells } = metered();
    clock.user = 5_000; // idle work before the event: not counted
    load.inFlight(1);
    clock.user += 1_100;
    clock.system += 150;
    load.inFlight(0);
    clock.user += 9_000; // a scrape between two pods: not counted
    expect(spells).toEqual([[0.0011, 0.00015]]);
  });

  it('counts a burst once, from the first event in until the last is answered', () => {
    const { load, clock, spells } = metered();
    load.inFlight(1);
    clock.user += 1_000;
    load.inFlight(2); // lone -> burst: the same spell goes on
    clock.user += 2_000;
    load.inFlight(1);
    clock.system += 500;
    load.inFlight(0);
    expect(spells).toEqual([[0.003, 0.0005]]);
  });

  it("reads the running thread's own clock where the runtime has one (Node >= 23.9)", () => {
    const clock = threadCpuClock();
    const has = typeof (process as { threadCpuUsage?: unknown }).threadCpuUsage === 'function';
    expect(clock !== undefined).toBe(has);
    if (!clock) return;
    const before = clock();
    let spin = 0;
    for (const end = Date.now() + 20; Date.now() < end;) spin++;
    const after = clock();
    expect(spin).toBeGreaterThan(0);
    // 20 ms of spinning on this thread: the sum is exact, the split between user and system is sampled.
    expect(after.user + after.system - before.user - before.system).toBeGreaterThanOrEqual(15_000);
  });

  it('exports the spells as one counter by mode', async () => {
    const metrics = new AgentMetrics();
    const add = metrics.busyLoopCpu();
    add(0.0011, 0.00015);
    add(0.001, 0);
    const text = await metrics.registry.metrics();
    expect(text).toContain('ambient_node_agent_pod_events_loop_cpu_seconds_total{mode="user"} 0.0021');
    expect(text).toContain('ambient_node_agent_pod_events_loop_cpu_seconds_total{mode="system"} 0.00015');
  });
});
