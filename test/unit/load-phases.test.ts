// The agent's pod-event load as phases (src/runtime/load-phases.ts): what a burst is, once.
import { describe, expect, it } from 'vitest';
import { BURST_IN_FLIGHT, LoadPhases, type LoadPhase } from '../../src/runtime/load-phases.js';

function tracked(): { load: LoadPhases; changes: Array<[LoadPhase, LoadPhase]> } {
  const changes: Array<[LoadPhase, LoadPhase]> = [];
  return { load: new LoadPhases((phase, previous) => changes.push([phase, previous])), changes };
}

describe('LoadPhases', () => {
  it('sequential pods go idle -> lone -> idle, one change each way', () => {
    const { load, changes } = tracked();
    for (const n of [1, 0, 1, 0]) load.inFlight(n);
    expect(changes).toEqual([
      ['lone', 'idle'],
      ['idle', 'lone'],
      ['lone', 'idle'],
      ['idle', 'lone'],
    ]);
    expect(load.phase).toBe('idle');
  });

  it(`a burst starts at ${BURST_IN_FLIGHT} in flight and lasts, through a dip to one, until none is left`, () => {
    const { load, changes } = tracked();
    for (const n of [1, 2, 30, 1, 4, 1]) load.inFlight(n);
    expect(load.phase).toBe('burst');
    load.inFlight(0);
    expect(changes).toEqual([
      ['lone', 'idle'],
      ['burst', 'lone'],
      ['idle', 'burst'],
    ]);
  });

  it('a burst can start from idle (two events arrive in one turn)', () => {
    const { load, changes } = tracked();
    load.inFlight(BURST_IN_FLIGHT);
    expect(changes).toEqual([['burst', 'idle']]);
  });
});
