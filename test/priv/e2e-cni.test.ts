// End to end (root): what the demo does, with asserts, plus the failure cases of the CNI path:
// another CNI rewriting the config, the agent crashing and coming back, the agent being down.
import { readFileSync, writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CniPluginError } from '../../src/demo/cni-runtime.js';
import { demoPrerequisites, DemoEnvironment } from '../../src/demo/environment.js';
import { requirePrivilegedInCi } from '../helpers/netns.js';
import { PodStateStore } from '../../src/standalone/state-store.js';

requirePrivilegedInCi();
const skip = demoPrerequisites();
if (skip && process.env['CI']) throw new Error(`end-to-end test cannot run in CI: ${skip}`);

describe.skipIf(skip)(`CNI path end to end${skip ? ` — skipped: ${skip}` : ''}`, () => {
  let env: DemoEnvironment;

  beforeAll(async () => {
    env = new DemoEnvironment({ subnet: 91, podNames: ['web', 'api', 'db'] });
    await env.setUp();
  }, 60_000);

  afterAll(async () => {
    await env?.tearDown();
  }, 60_000);

  it('installs the plugin and chains it last into the node config', () => {
    expect(env.chainedConfig().plugins.map((p) => p.type)).toEqual(['bridge', 'istio-cni']);
  });

  it('enrolls pods during CNI ADD: each one is in ztunnel before the runtime gets its result', async () => {
    await env.createPods((pod) => {
      expect(env.standIn!.pods().get(pod.uid)).toMatchObject({
        name: pod.name,
        namespace: 'demo',
        serviceAccount: 'default',
        state: 'running',
      });
    });
    expect(env.pods.map((p) => p.ip)).toEqual(['10.248.91.2', '10.248.91.3', '10.248.91.4']);
  });

  it('sends pod-to-pod traffic through ztunnel: outbound 15001, inbound 15006, client IP preserved', async () => {
    const rows = await env.connectAll();
    for (const row of rows) {
      const from = env.pods.find((p) => p.name === row.from)!;
      const to = env.pods.find((p) => p.name === row.to)!;
      expect(row.outbound).toMatchObject({ listener: expect.stringContaining('15001'), originalDst: `${to.ip}:8080` });
      expect(row.inbound).toMatchObject({ listener: expect.stringContaining('15006'), originalDst: `${to.ip}:8080`, clientIp: from.ip });
      expect(row.peerSeenByApp).toBe(from.ip);
      expect(row.echoed).toBe(true);
    }
  });

  it('sends DNS through ztunnel (15053)', async () => {
    const rows = await env.resolveAll();
    for (const [i, row] of rows.entries()) {
      expect(row.answer).toBe(env.pods[(i + 1) % env.pods.length]!.ip);
      expect(row.event).toMatchObject({ kind: 'dns', listener: expect.stringContaining('15053') });
    }
  });

  it('re-chains within a second when another CNI rewrites the config without our entry', async () => {
    const original = JSON.parse(readFileSync(env.primaryConfig, 'utf8')) as { plugins: Array<{ type: string }> };
    writeFileSync(env.primaryConfig, JSON.stringify({ ...original, plugins: original.plugins.filter((p) => p.type !== 'istio-cni') }));
    const started = Date.now();
    while (!env.chainedConfig().plugins.some((p) => p.type === 'istio-cni')) {
      if (Date.now() - started > 1500) throw new Error('not re-chained within 1.5 s');
      await new Promise((r) => setTimeout(r, 25));
    }
    expect(env.chainedConfig().plugins.map((p) => p.type)).toEqual(['bridge', 'istio-cni']);
  });

  it('while the agent is down: ambient pods fail closed (try again later), excluded ones start, DEL succeeds', async () => {
    await env.stopAgent('SIGKILL');
    // Traffic of enrolled pods is still redirected: the rules stay, ztunnel keeps its proxies.
    const during = await env.connect(env.pods[0]!, env.pods[1]!);
    expect(during.outbound).toBeDefined();
    const err = await env.createPod('late').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CniPluginError);
    expect(err).toMatchObject({ plugin: 'istio-cni', code: 11 });
    const system = await env.createPod('sys', 'kube-system'); // excluded: the plugin never asks the agent
    expect(env.standIn!.pods().has(system.uid)).toBe(false);
    await env.deletePod(system);
  }, 30_000);

  it('after SIGKILL and restart: the pods are in the next ZDS snapshot and still redirected', async () => {
    const connectionsBefore = env.standIn!.connectionCount;
    await env.startAgent();
    await env.standIn!.waitFor(
      () => env.standIn!.connectionCount > connectionsBefore && env.standIn!.ready,
      10_000,
      'reconnect after restart',
    );
    const uids = [...env.standIn!.pods().keys()].sort();
    expect(uids).toEqual(env.pods.map((p) => p.uid).sort());
    const rows = await env.connectAll();
    expect(rows.every((r) => r.outbound && r.inbound && r.echoed)).toBe(true);
  }, 30_000);

  it('CNI DEL takes the pod out of ztunnel and its netns out of redirection', async () => {
    const pod = env.pods.at(-1)!;
    await env.deletePod(pod);
    await env.standIn!.waitFor(() => !env.standIn!.pods().has(pod.uid), 5_000, 'del reached ztunnel');
    expect(new PodStateStore(env.runDir).load().pods.map((p) => p.uid)).not.toContain(pod.uid);
  });
});
