// Kubernetes mode live reconciliation in real namespaces: the real agent (real addon, informers
// against the fake API server, ZDS to a ztunnel-like client) enrolls a pod whose netns is a real
// namespace with a veth; its nftables flushed from another process are repaired within 1 s,
// counted in the metrics and shown in /debug/pods; a repair that cannot succeed (another process
// owns the table: nftables' `flags owner`) flips the annotation to `pending` and is retried with
// backoff until the owner is gone, then the pod is `enabled` again; then the runtime "re-creates the sandbox"
// (the old veth deleted, the pod IP on a veth in a new netns) and the pod is re-enrolled with the
// new netns: rules there, ztunnel told with the new fd, the old handle released.
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NativeNetAddon } from '../../src/addon/net-addon.js';
import { Agent } from '../../src/agent/agent.js';
import { debugSocketPath, getDebug } from '../../src/agent/debug-server.js';
import { FakeKubeApi, type FakeObject } from '../helpers/fake-kube-api.js';
import { FakeZtunnel } from '../helpers/fake-ztunnel.js';
import { kubeModeTestAgent, TEST_NODE } from '../helpers/kube-agent.js';
import { createNetns, deleteNetns, execIn, ipIn, privilegedSkipReason, requirePrivilegedInCi, type TestNetns } from '../helpers/netns.js';
import { waitUntil } from '../helpers/wait.js';
import { testAgentConfig } from '../helpers/agent-config.js';

requirePrivilegedInCi();
const skip = privilegedSkipReason();
const run = promisify(execFile);
const NODE = TEST_NODE;
const POD_IP = '198.18.2.1';
const REDIRECTION = 'ambient.istio.io/redirection';

describe.skipIf(skip)(`Kubernetes mode live reconciliation in real namespaces${skip ? ` — skipped: ${skip}` : ''}`, () => {
  const dir = mkdtempSync(join(tmpdir(), 'kube-reconcile-priv-'));
  const namespaces: TestNetns[] = [];
  const sandboxOf = new Map<string, string>();
  let api: FakeKubeApi;
  let agent: Agent;
  let ztunnel: FakeZtunnel;
  let podNs: TestNetns;
  let peerNs: TestNetns;

  const annotation = (): string | undefined =>
    (api.pod('shop', 'web')?.metadata as { annotations?: Record<string, string> }).annotations?.[REDIRECTION];
  const hasRules = (ns: TestNetns): boolean => execIn(ns.name, ['nft', 'list', 'ruleset']).includes('table inet istio-ambient-nat');

  /** A veth from `ns` to the peer namespace carrying the pod IP, as a runtime's bridge plugin would. */
  function wire(ns: TestNetns, tag: string): void {
    const a = `ank${process.pid}${tag}`;
    ipIn(ns.name, ['link', 'add', a, 'type', 'veth', 'peer', 'name', `${a}x`, 'netns', peerNs.name]);
    ipIn(ns.name, ['addr', 'add', `${POD_IP}/24`, 'dev', a]);
    ipIn(ns.name, ['link', 'set', a, 'up']);
  }

  beforeAll(async () => {
    api = new FakeKubeApi({ bookmarkIntervalMs: 200 });
    await api.start();
    peerNs = createNetns('kpeer');
    podNs = createNetns('kpod');
    namespaces.push(peerNs, podNs);
    wire(podNs, 'a');
    sandboxOf.set('uid-web', podNs.path);
    const addon = new NativeNetAddon();
    const config = testAgentConfig(dir, { flags: ['--ipv6', 'false', '--reconcile-nft-poll-interval', '50ms'] });
    api.upsertNamespace({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'shop', labels: {} } } as FakeObject);
    api.upsertPod({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'web', namespace: 'shop', uid: 'uid-web', labels: {}, annotations: {} },
      spec: { nodeName: NODE, serviceAccountName: 'sa', containers: [{ name: 'app', image: 'app' }] },
      status: { phase: 'Running', podIP: POD_IP, podIPs: [{ ip: POD_IP }] },
    } as FakeObject);
    agent = kubeModeTestAgent(config, addon, api.kubeconfigPath, sandboxOf);
    await agent.start();
    ztunnel = await FakeZtunnel.connect(config.zdsSocket);
    await ztunnel.waitFor(() => ztunnel.snapshotSent);
    api.upsertNamespace({
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: { name: 'shop', labels: { 'istio.io/dataplane-mode': 'ambient' } },
    } as FakeObject);
    await waitUntil(() => annotation() === 'enabled', 5_000, 'enrolled');
    await waitUntil(() => agent.reconciler.status('uid-web')?.watched === true, 5_000, 'watched');
  }, 30_000);

  afterAll(async () => {
    ztunnel?.close();
    await agent?.stop();
    await api?.close();
    for (const ns of namespaces) deleteNetns(ns);
    rmSync(dir, { recursive: true, force: true });
  });

  it('nft flush ruleset in the pod: repaired within 1 s, counted in the metrics and in /debug/pods; the annotation stays enabled', async () => {
    expect(hasRules(podNs)).toBe(true);
    await run('ip', ['netns', 'exec', podNs.name, 'nft', 'flush', 'ruleset']);
    expect(await waitUntil(() => hasRules(podNs), 1_000, 'rules back')).toBeLessThan(1_000);
    await waitUntil(() => agent.reconciler.status('uid-web')?.repairs === 1, 5_000, 'repair counted');
    const metrics = await (await fetch(`http://127.0.0.1:${agent.metricsPort}/metrics`)).text();
    expect(metrics).toMatch(/ambient_node_agent_reconcile_repairs_total\{scope="pod",reason="nftables"\} 1/);
    expect(metrics).toMatch(/ambient_node_agent_reconcile_checks_total\{scope="pod",result="repaired"\} 1/);
    const body = JSON.parse((await getDebug(debugSocketPath(agent.config.runDir), '/debug/pods')).body) as {
      pods: Array<{ uid: string; repairs: number; lastVerified: string | null; rules: string }>;
    };
    expect(body.pods).toEqual([
      expect.objectContaining({ uid: 'uid-web', repairs: 1, rules: 'verified', lastVerified: expect.any(String) }),
    ]);
    expect(annotation()).toBe('enabled');
  });

  it('a repair that fails sets the annotation to pending and is retried with backoff; once it can succeed the pod is enabled again', async () => {
    // `nft -i` keeps its netlink socket: a table it creates with `flags owner` cannot be changed
    // or deleted by anyone else until it exits (EPERM for our transaction).
    const owner = spawn('ip', ['netns', 'exec', podNs.name, 'nft', '-i'], { stdio: ['pipe', 'ignore', 'ignore'] });
    try {
      owner.stdin.write('flush ruleset; add table inet istio-ambient-nat { flags owner ; }\n'); // one line: one transaction
      await waitUntil(() => annotation() === 'pending', 3_000, 'annotation pending');
      expect(agent.reconciler.status('uid-web')).toMatchObject({ failing: true });
      const metrics = await (await fetch(`http://127.0.0.1:${agent.metricsPort}/metrics`)).text();
      expect(metrics).toMatch(/ambient_node_agent_reconcile_checks_total\{scope="pod",result="failed"\} [1-9]/);
    } finally {
      owner.stdin.end();
      owner.kill();
    }
    // The owner's table goes with it; the next attempt (at most 2 s of backoff away) succeeds.
    await waitUntil(() => annotation() === 'enabled', 6_000, 'annotation enabled again');
    expect(hasRules(podNs)).toBe(true);
    expect(execIn(podNs.name, ['nft', 'list', 'ruleset'])).not.toContain('flags owner'); // ours, not the owner's
    // The controller's retry may re-enrol the pod just before the reconciler's own backoff check,
    // which then ends the failing episode.
    await waitUntil(() => agent.reconciler.status('uid-web')?.failing === false, 3_000, 'reconciler no longer failing');
  });

  it('a re-created sandbox (pod IP now in a new netns) is re-enrolled with the new netns; the old handle is released', async () => {
    const oldHandle = agent.registry.netnsOf('uid-web')!;
    const addsBefore = ztunnel.messages.filter((m) => m.kind === 'add' && m.uid === 'uid-web').length;
    const fresh = createNetns('kpod2');
    namespaces.push(fresh);
    ipIn(podNs.name, ['link', 'del', `ank${process.pid}a`]); // the old sandbox's network is torn down
    wire(fresh, 'b');
    sandboxOf.set('uid-web', fresh.path);
    const freshIno = agent.addon.openNetns(fresh.path);
    const ino = freshIno.ino;
    freshIno.close();
    await waitUntil(() => agent.registry.netnsOf('uid-web')?.ino === ino, 5_000, 're-enrolled with the new netns');
    expect(oldHandle.closed).toBe(true);
    expect(hasRules(fresh)).toBe(true);
    await waitUntil(
      () => ztunnel.messages.filter((m) => m.kind === 'add' && m.uid === 'uid-web').length === addsBefore + 1,
      5_000,
      'ztunnel got the new netns',
    );
    await waitUntil(() => agent.reconciler.status('uid-web')?.watched === true, 5_000, 'the new netns watched');
    expect(annotation()).toBe('enabled');
  });
});
