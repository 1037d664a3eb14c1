// The event loop's CPU while pod events are in flight (src/ops/busy-loop-cpu.ts).
import { describe, expect, it } from 'vitest';
import { BusyLoopCpu } from '../../src/ops/busy-loop-cpu.js';
import { AgentMetrics } from '../../src/ops/metrics.js';
import { LoadPhases } from '../../src/runtime/load-phases.js';

/** A clock the test moves (seconds), and the spells the meter reported. */
function metered(): { load: LoadPhases; clock: { now: number }; spells: number[] } {
  const clock = { now: 0 };
  const spells: number[] = [];
  const meter = new BusyLoopCpu(
    () => clock.now,
    (seconds) => spells.push(seconds),
  );
  return { load: new LoadPhases((phase, previous) => meter.phase(phase, previous)), clock, spells };
}

describe('BusyLoopCpu', () => {
  it('counts a sequential event from its arrival to its answer, and nothing while idle', () => {
    const { load, clock, spells } = metered();
    clock.now = 5; // idle work before the event: not counted
    load.inFlight(1);
    clock.now += 0.00125;
    load.inFlight(0);
    clock.now += 0.009; // a scrape between two pods: not counted
    load.inFlight(1);
    clock.now += 0.001;
    load.inFlight(0);
    expect(spells.map((s) => s.toFixed(5))).toEqual(['0.00125', '0.00100']);
  });

  it('counts a burst once, from the first event in until the last is answered', () => {
    const { load, clock, spells } = metered();
    load.inFlight(1);
    clock.now += 0.001;
    load.inFlight(2); // lone -> burst: the same spell goes on
    clock.now += 0.002;
    load.inFlight(1);
    clock.now += 0.0005;
    load.inFlight(0);
    expect(spells.map((s) => s.toFixed(4))).toEqual(['0.0035']);
  });

  it('exports the spells as one counter', async () => {
    const metrics = new AgentMetrics();
    metrics.podEventsLoopCpu.inc(0.00125);
    metrics.podEventsLoopCpu.inc(0.001);
    const text = await metrics.registry.metrics();
    expect(text).toContain('ambient_node_agent_pod_events_loop_cpu_seconds_total 0.00225');
  });
});
