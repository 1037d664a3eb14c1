import * as promClient from 'prom-client';
import { describe, expect, it } from 'vitest';

import type { RawExecutorStats } from '../../src/addon/binding.js';
import { AgentMetrics } from '../../src/ops/metrics.js';

describe('AgentMetrics', () => {
  it("uses prom-client's own classes, loaded from their files without its index", () => {
    const m = new AgentMetrics();
    expect(m.registry).toBeInstanceOf(promClient.Registry);
    expect(m.pluginRequests).toBeInstanceOf(promClient.Counter);
    expect(m.ztunnelConnected).toBeInstanceOf(promClient.Gauge);
    expect(m.podOnboarding).toBeInstanceOf(promClient.Histogram);
  });

  it("registers Node's process metrics on the first scrape, once, beside Istio's names", async () => {
    const m = new AgentMetrics();
    expect(m.registry.getSingleMetric('process_cpu_user_seconds_total')).toBeUndefined();
    m.pluginRequests.inc({ response_code: '200' });
    const first = await m.text();
    expect(first).toContain('process_cpu_user_seconds_total');
    expect(first).toContain('nodejs_heap_size_used_bytes');
    expect(first).toContain('istio_cni_plugin_requests_total{response_code="200"} 1');
    // A second scrape does not register them again (prom-client throws on a duplicate name).
    const second = await m.text();
    expect(second.match(/^# TYPE process_cpu_user_seconds_total /gm)).toHaveLength(1);
  });

  it("exposes the netns threads' totals the addon reports, read at each scrape", async () => {
    const m = new AgentMetrics();
    const stats = (count: number): RawExecutorStats => ({
      threadsStarted: 4,
      threadsRetired: 0,
      threadsAlive: 4,
      jobsRun: count,
      pending: 0,
      queueWaitSeconds: 0.0001 * count,
      resultsDelivered: 2 * count,
      resultWaitSeconds: 0.0002 * count,
      steps: { nftBatch: { count, cpuSeconds: 0.0005 * count, wallSeconds: 0.0006 * count } },
    });
    let count = 2;
    let reads = 0;
    m.netnsThreads(() => {
      reads++;
      return stats(count);
    });
    const first = await m.text();
    expect(reads).toBe(1); // one reading of the addon per scrape, for all seven counters
    expect(first).toContain('ambient_node_agent_netns_steps_total{step="nftBatch"} 2');
    expect(first).toContain('ambient_node_agent_netns_step_cpu_seconds_total{step="nftBatch"} 0.001');
    expect(first).toContain('ambient_node_agent_netns_step_wall_seconds_total{step="nftBatch"} 0.0012');
    expect(first).toContain('ambient_node_agent_netns_jobs_total 2');
    expect(first).toContain('ambient_node_agent_netns_job_queue_wait_seconds_total 0.0002');
    expect(first).toContain('ambient_node_agent_netns_results_total 4');
    expect(first).toContain('ambient_node_agent_netns_result_wait_seconds_total 0.0004');
    count = 3;
    const second = await m.text();
    expect(second).toContain('ambient_node_agent_netns_steps_total{step="nftBatch"} 3');
    expect(second).toContain('ambient_node_agent_netns_jobs_total 3');
  });
});
