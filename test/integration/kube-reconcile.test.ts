// Kubernetes mode live reconciliation against the fake API server (real client library and
// informers, real agent and ZDS server, fake kernel): a repair that fails flips the pod's
// `ambient.istio.io/redirection` annotation to `pending` and is retried with backoff until it
// works, then the pod is `enabled` again; a pod whose sandbox netns was replaced (its IP now in
// another netns) is re-enrolled with the new netns, sent to ztunnel again and the old handle released.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Agent } from '../../src/agent/agent.js';
import type { AgentConfig } from '../../src/agent/config.js';
import { FakeNetAddon } from '../fakes/fake-net-addon.js';
import { FakeKubeApi, type FakeObject } from '../helpers/fake-kube-api.js';
import { FakeZtunnel } from '../helpers/fake-ztunnel.js';
import { kubeModeTestAgent, TEST_NODE } from '../helpers/kube-agent.js';
import { waitUntil } from '../helpers/wait.js';
import { testAgentConfig } from '../helpers/agent-config.js';

const NODE = TEST_NODE;
const REDIRECTION = 'ambient.istio.io/redirection';
const POD_IP = '10.0.0.13';

function podObject(name: string): FakeObject {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: 'shop', uid: `uid-${name}`, labels: {}, annotations: {} },
    spec: { nodeName: NODE, serviceAccountName: 'sa', containers: [{ name: 'app', image: 'app' }] },
    status: { phase: 'Running', podIP: POD_IP, podIPs: [{ ip: POD_IP }] },
  } as FakeObject;
}

describe('Kubernetes mode: live reconciliation', () => {
  let dir: string;
  let api: FakeKubeApi;
  let addon: FakeNetAddon;
  let config: AgentConfig;
  let agent: Agent | undefined;
  let ztunnel: FakeZtunnel | undefined;
  /** Where the /proc scan finds each pod's netns now. */
  const sandboxOf = new Map<string, string>();

  const annotation = (name: string): string | undefined =>
    (api.pod('shop', name)?.metadata as { annotations?: Record<string, string> } | undefined)?.annotations?.[REDIRECTION];

  async function startEnrolled(name: string): Promise<void> {
    agent = kubeModeTestAgent(config, addon, api.kubeconfigPath, sandboxOf);
    await agent.start();
    ztunnel = await FakeZtunnel.connect(config.zdsSocket);
    await ztunnel.waitFor(() => ztunnel!.snapshotSent);
    api.upsertNamespace({
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: { name: 'shop', labels: { 'istio.io/dataplane-mode': 'ambient' } },
    } as FakeObject);
    await waitUntil(() => annotation(name) === 'enabled', 5_000, `${name} enabled`);
    await waitUntil(() => agent!.reconciler.status(`uid-${name}`)?.watched === true, 5_000, `${name} watched`);
  }

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'kube-reconcile-'));
    api = new FakeKubeApi({ bookmarkIntervalMs: 200 });
    await api.start();
    addon = new FakeNetAddon({ realFds: true });
    sandboxOf.clear();
    config = testAgentConfig(dir, { flags: ['--ipv6', 'false'] });
    api.upsertNamespace({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'shop', labels: {} } } as FakeObject);
  });

  afterEach(async () => {
    ztunnel?.close();
    ztunnel = undefined;
    await agent?.stop();
    agent = undefined;
    await api.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a failed repair sets the annotation to pending and retries with backoff; once it works the pod is enabled again', async () => {
    const ns = addon.addNetns('/var/run/netns/web');
    sandboxOf.set('uid-web', '/var/run/netns/web');
    api.upsertPod(podObject('web'));
    await startEnrolled('web');
    const applied = ns.nftScripts.length;
    // Someone changes the pod's nftables, and every nft operation there now fails.
    ns.nftGeneration++;
    addon.failOn = (step, target) =>
      target === '/var/run/netns/web' && (step.op === 'nft' || step.op === 'nftBatch') ? new Error('EPERM: nft refused') : undefined;
    addon.notify('/var/run/netns/web');
    await waitUntil(() => annotation('web') === 'pending', 5_000, 'annotation pending');
    expect(agent!.reconciler.status('uid-web')).toMatchObject({ failing: true });
    addon.failOn = () => undefined;
    // No new event: the backoff retry alone finds the rules in place again.
    await waitUntil(() => annotation('web') === 'enabled', 8_000, 'annotation enabled again');
    // The controller's retry may re-enrol the pod (and annotate it) just before the reconciler's own
    // backoff check runs; that check then ends the failing episode (within the 2 s backoff cap).
    await waitUntil(() => agent!.reconciler.status('uid-web')?.failing === false, 3_000, 'reconciler no longer failing');
    expect(ns.nftScripts.length).toBeGreaterThan(applied);
    const metrics = await (await fetch(`http://127.0.0.1:${agent!.metricsPort}/metrics`)).text();
    expect(metrics).toMatch(/ambient_node_agent_reconcile_checks_total\{scope="pod",result="failed"\} [1-9]/);
  });

  it('a replaced sandbox netns (the pod IP now lives in another netns) is re-enrolled with the new one; the old is released', async () => {
    const old = addon.addNetns('/var/run/netns/api');
    old.addresses = [{ family: 4, address: POD_IP, prefixLen: 24, dev: 'eth0' }];
    sandboxOf.set('uid-api', '/var/run/netns/api');
    api.upsertPod(podObject('api'));
    await startEnrolled('api');
    const oldHandle = agent!.registry.netnsOf('uid-api')!;
    expect(oldHandle.ino).toBe(old.ino);
    const addsBefore = ztunnel!.messages.filter((m) => m.kind === 'add' && m.uid === 'uid-api').length;
    // The runtime re-created the sandbox: the old netns lost the pod's address, a new one has it.
    const fresh = addon.addNetns('/var/run/netns/api-2');
    fresh.addresses = [{ family: 4, address: POD_IP, prefixLen: 24, dev: 'eth0' }];
    old.addresses = [];
    sandboxOf.set('uid-api', '/var/run/netns/api-2');
    addon.notify('/var/run/netns/api', { addresses: 1 });
    await waitUntil(() => agent!.registry.netnsOf('uid-api')?.ino === fresh.ino, 5_000, 're-enrolled with the new netns');
    expect(oldHandle.closed).toBe(true);
    expect(fresh.nftScripts).toHaveLength(1); // the rules went into the new netns
    await waitUntil(
      () => ztunnel!.messages.filter((m) => m.kind === 'add' && m.uid === 'uid-api').length === addsBefore + 1,
      5_000,
      'ztunnel got the new netns',
    );
    await waitUntil(() => agent!.reconciler.status('uid-api')?.watched === true, 5_000, 'the new netns is watched');
    expect(annotation('api')).toBe('enabled');
  });
});
