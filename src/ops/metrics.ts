// Prometheus metrics with Istio's names (docs/istio-behaviours.md §6.1) plus latency histograms
// of our own, on --metrics-port /metrics.
import { createRequire } from 'node:module';
import type * as PromClient from 'prom-client';
import type { RawExecutorStats } from '../addon/binding.js';
import { PortServer } from '../util/http-server.js';

// prom-client's index also loads its Pushgateway (Node's https and TLS) and, at once, its default
// process metrics (@opentelemetry/api among them): 30-50 ms of a restarted agent's start on Node
// 24 before it can serve ztunnel the snapshot (22 MB of RSS in a bare Node 24, the four files
// below about 4 MB). So the classes come from their own files (the modules the index
// exports; prom-client is pinned, and test/unit/metrics.test.ts checks they are its classes), and
// the process metrics load on the first scrape (processMetrics()).
const require = createRequire(import.meta.url);
const Registry = require('prom-client/lib/registry') as typeof PromClient.Registry;
const Counter = require('prom-client/lib/counter') as typeof PromClient.Counter;
const Gauge = require('prom-client/lib/gauge') as typeof PromClient.Gauge;
const Histogram = require('prom-client/lib/histogram') as typeof PromClient.Histogram;
const loadDefaultMetrics = (): typeof PromClient.collectDefaultMetrics =>
  require('prom-client/lib/defaultMetrics') as typeof PromClient.collectDefaultMetrics;

const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

export class AgentMetrics {
  readonly registry = new Registry();
  /** Istio: CNI plugin requests by HTTP response code. */
  readonly pluginRequests = new Counter({
    name: 'istio_cni_plugin_requests_total',
    help: 'CNI plugin requests to the agent, by response code',
    labelNames: ['response_code'],
    registers: [this.registry],
  });
  /** Istio: informer events (namespace events included). */
  readonly reconcileEvents = new Counter({
    name: 'nodeagent_reconcile_events_total',
    help: 'Informer events handled, by type',
    labelNames: ['type'],
    registers: [this.registry],
  });
  /** Istio: connected ztunnels. */
  readonly ztunnelConnected = new Gauge({ name: 'ztunnel_connected', help: 'Number of connected ztunnels', registers: [this.registry] });
  /** Istio: installer runs by result. */
  readonly installs = new Counter({
    name: 'istio_cni_installs_total',
    help: 'CNI plugin installs, by result',
    labelNames: ['result'],
    registers: [this.registry],
  });
  /** Istio: 1 while the plugin is installed and chained. */
  readonly installReady = new Gauge({
    name: 'istio_cni_install_ready',
    help: 'Whether the CNI plugin is installed and chained (0/1)',
    registers: [this.registry],
  });
  readonly podOnboarding = new Histogram({
    name: 'ambient_node_agent_pod_onboarding_seconds',
    help: 'CNI ADD handled by the agent: netns, in-pod rules, ztunnel ack',
    labelNames: ['result'],
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });
  readonly ruleOperations = new Histogram({
    name: 'ambient_node_agent_rule_operation_seconds',
    help: 'In-pod rule operations (apply, remove, verify) in a pod netns',
    labelNames: ['backend', 'operation', 'result'],
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });
  readonly zdsAck = new Histogram({
    name: 'ambient_node_agent_zds_ack_seconds',
    help: 'Time from sending a ZDS request to ztunnel until its ack',
    labelNames: ['request', 'result'],
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });

  /** CNI ADDs (and informer adds) that found no ztunnel, or lost its connection, and waited for the next one. */
  readonly ztunnelWaits = new Counter({
    name: 'ambient_node_agent_ztunnel_waits_total',
    help: 'Pod adds that waited for a (re)connecting ztunnel, by result (enrolled, failed)',
    labelNames: ['result'],
    registers: [this.registry],
  });
  readonly ztunnelWaitSeconds = new Histogram({
    name: 'ambient_node_agent_ztunnel_wait_seconds',
    help: 'How long pod adds waited for a (re)connecting ztunnel to acknowledge them, by result',
    labelNames: ['result'],
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });
  readonly reconcileRepairs = new Counter({
    name: 'ambient_node_agent_reconcile_repairs_total',
    help: 'Rules found drifted and re-applied by live reconciliation, by scope (pod, host) and what drifted',
    labelNames: ['scope', 'reason'],
    registers: [this.registry],
  });
  readonly reconcileChecks = new Counter({
    name: 'ambient_node_agent_reconcile_checks_total',
    help: 'Live reconciliation checks (event-driven and sweep), by scope and result (in-sync, repaired, failed)',
    labelNames: ['scope', 'result'],
    registers: [this.registry],
  });

  /** The event loop's own CPU time while pod events were in flight (src/ops/busy-loop-cpu.ts). */
  readonly podEventsLoopCpu = new Counter({
    name: 'ambient_node_agent_pod_events_loop_cpu_seconds_total',
    help: "The event loop's own CPU time (its thread clock: user + kernel) while pod events were in flight",
    registers: [this.registry],
  });

  #processMetrics = false;

  /** Refreshes the netns-thread counters from one reading of the addon (netnsThreads). */
  #refreshNetnsThreads: (() => void) | undefined;

  /**
   * What the netns threads cost, read from the addon once per scrape: by step op, the running
   * thread's own CPU time (user + kernel) and the wall time around the step (CPU near wall: the
   * step works, for the rules the kernel's nf_tables and routing work; wall above CPU: it waits),
   * and the two hops of every job: submit to a worker's pick-up, a result's post to its
   * settlement on the event loop (both: a thread waking up and getting a CPU).
   */
  netnsThreads(stats: () => RawExecutorStats): void {
    const counter = (name: string, help: string, labelNames: string[] = []): PromClient.Counter =>
      new Counter({ name, help, labelNames, registers: [this.registry] });
    const steps = counter('ambient_node_agent_netns_steps_total', 'Steps run by the netns threads, by step op', ['step']);
    const stepCpu = counter(
      'ambient_node_agent_netns_step_cpu_seconds_total',
      "The netns threads' own CPU time (user + kernel) in their steps, by step op",
      ['step'],
    );
    const stepWall = counter('ambient_node_agent_netns_step_wall_seconds_total', "Wall time of the netns threads' steps, by step op", [
      'step',
    ]);
    const jobs = counter('ambient_node_agent_netns_jobs_total', 'Jobs (netns visits) the netns threads picked up');
    const queueWait = counter(
      'ambient_node_agent_netns_job_queue_wait_seconds_total',
      'Submit to a netns thread picking the job up, summed',
    );
    const results = counter('ambient_node_agent_netns_results_total', 'Step-list results delivered to the event loop');
    const resultWait = counter(
      'ambient_node_agent_netns_result_wait_seconds_total',
      'A netns thread posting a result to the event loop running its settlement, summed',
    );
    this.#refreshNetnsThreads = () => {
      const now = stats();
      for (const c of [steps, stepCpu, stepWall, jobs, queueWait, results, resultWait]) c.reset();
      for (const [step, total] of Object.entries(now.steps)) {
        steps.inc({ step }, total.count);
        stepCpu.inc({ step }, total.cpuSeconds);
        stepWall.inc({ step }, total.wallSeconds);
      }
      jobs.inc(now.jobsRun);
      queueWait.inc(now.queueWaitSeconds);
      results.inc(now.resultsDelivered);
      resultWait.inc(now.resultWaitSeconds);
    };
  }

  /**
   * Node's process metrics (CPU, memory, fds, event loop lag, GC), registered once, on the first
   * scrape: counters such as the CPU seconds are read from the process at each scrape and lose
   * nothing; the event-loop and GC histograms start counting then.
   */
  processMetrics(): void {
    if (this.#processMetrics) return;
    loadDefaultMetrics()({ register: this.registry });
    this.#processMetrics = true;
  }

  /** The exposition text of every metric (what /metrics answers). */
  text(): Promise<string> {
    this.processMetrics();
    this.#refreshNetnsThreads?.();
    return this.registry.metrics();
  }
}

/** Every path the metrics port answers; anything else is 404. */
export const METRICS_ROUTES = ['/metrics'] as const;

/** Serves /metrics (and nothing else) on the metrics port. */
export class MetricsServer extends PortServer {
  constructor(metrics: AgentMetrics, port: number, host = '0.0.0.0') {
    super(
      (req, res) => {
        if ((req.url ?? '').split('?')[0] !== '/metrics') return void res.writeHead(404).end('not found\n');
        metrics.text().then(
          (text) => res.writeHead(200, { 'Content-Type': metrics.registry.contentType }).end(text),
          (err: Error) => res.writeHead(500).end(err.message),
        );
      },
      port,
      host,
    );
  }
}
