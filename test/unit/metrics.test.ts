import * as promClient from 'prom-client';
import { describe, expect, it } from 'vitest';

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
});
