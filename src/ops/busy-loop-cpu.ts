// The event loop's own CPU time while pod events are in flight: what the agent's JavaScript
// thread costs per pod, apart from its netns threads (ambient_node_agent_netns_step_cpu_*) and
// V8's helpers. A sequential ADD's share of ambient_node_agent_pod_onboarding_seconds that this
// does not cover is waiting: for the netns threads, for ztunnel's ack, or for a CPU.
//
// Read from the thread's own clock (getrusage(RUSAGE_THREAD) behind process.threadCpuUsage,
// Node >= 23.9; older Nodes have no per-thread reading and get no metric). The sum of user and
// system time is exact; Linux splits it between the two by tick samples, so the split is only
// true over many events.
import type { LoadPhase } from '../runtime/load-phases.js';

export interface ThreadCpu {
  /** Microseconds, as process.cpuUsage() reports them. */
  user: number;
  system: number;
}

/** The running thread's CPU clock, or undefined where the runtime cannot read it. */
export function threadCpuClock(): (() => ThreadCpu) | undefined {
  const read = (process as { threadCpuUsage?: () => ThreadCpu }).threadCpuUsage;
  return typeof read === 'function' ? () => read.call(process) : undefined;
}

/** Counts the event loop's CPU from the first event in flight until none is left (overlapping events once). */
export class BusyLoopCpu {
  #since: ThreadCpu | undefined;

  constructor(
    private readonly clock: () => ThreadCpu,
    /** Seconds of user and system time of one busy spell. */
    private readonly add: (userSeconds: number, systemSeconds: number) => void,
  ) {}

  /** The load phase changed (src/runtime/load-phases.ts): a spell starts when it leaves idle and ends when it returns. */
  phase(phase: LoadPhase, previous: LoadPhase): void {
    if (previous === 'idle' && phase !== 'idle') this.#since = this.clock();
    else if (phase === 'idle' && this.#since) {
      const now = this.clock();
      this.add((now.user - this.#since.user) / 1e6, (now.system - this.#since.system) / 1e6);
      this.#since = undefined;
    }
  }
}
