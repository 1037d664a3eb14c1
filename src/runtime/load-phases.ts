// The agent's pod-event load as phases, the one place that says what a burst is. The runtime
// policies act on them: V8's tiering thresholds (tier-up.ts) and the heap release
// (idle-heap-release.ts).

/** This many pod events in flight, or more, starts a burst; it lasts until none is left. */
export const BURST_IN_FLIGHT = 2;

/** idle: nothing in flight; lone: one event (sequential pods); burst: see BURST_IN_FLIGHT. */
export type LoadPhase = 'idle' | 'lone' | 'burst';

export class LoadPhases {
  #phase: LoadPhase = 'idle';

  constructor(private readonly onChange: (phase: LoadPhase, previous: LoadPhase) => void) {}

  get phase(): LoadPhase {
    return this.#phase;
  }

  /** The plugin-event server's count of events in flight changed. */
  inFlight(count: number): void {
    const next: LoadPhase = count === 0 ? 'idle' : count >= BURST_IN_FLIGHT || this.#phase === 'burst' ? 'burst' : 'lone';
    if (next === this.#phase) return;
    const previous = this.#phase;
    this.#phase = next;
    this.onChange(next, previous);
  }
}
