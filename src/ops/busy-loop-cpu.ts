// The event loop's own CPU time while pod events are in flight: what the agent's JavaScript
// thread costs per pod, apart from its netns threads (ambient_node_agent_netns_step_cpu_*) and
// V8's helpers. A sequential ADD's share of ambient_node_agent_pod_onboarding_seconds that this
// does not cover is waiting: for the netns threads, for ztunnel's ack, or for a CPU.
//
// Read from the thread's CLOCK_THREAD_CPUTIME_ID (the addon's threadCpuSeconds), which is exact
// at each read; Node's process.threadCpuUsage() is getrusage(RUSAGE_THREAD), which lags a
// running thread by its CPU time since its last tick or context switch, so an event handled
// without sleeping would count nothing.
import type { LoadPhase } from '../runtime/load-phases.js';

/** Counts the event loop's CPU from the first event in flight until none is left (overlapping events once). */
export class BusyLoopCpu {
  #since: number | undefined;

  constructor(
    /** The event loop's own CPU clock, in seconds. */
    private readonly clock: () => number,
    /** Seconds of CPU of one busy spell. */
    private readonly add: (seconds: number) => void,
  ) {}

  /** The load phase changed (src/runtime/load-phases.ts): a spell starts when it leaves idle and ends when it returns. */
  phase(phase: LoadPhase, previous: LoadPhase): void {
    if (previous === 'idle' && phase !== 'idle') this.#since = this.clock();
    else if (phase === 'idle' && this.#since !== undefined) {
      this.add(this.clock() - this.#since);
      this.#since = undefined;
    }
  }
}
