// Kubernetes mode end to end without root: the real client library and informers against the
// fake API server, the real agent (plugin-event socket, ZDS server) with a ztunnel-like client;
// the kernel side (netns, rules), the host probe sets and the /proc scan are fakes.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { NetnsHandle } from '../../src/addon/net-addon.js';
import { Agent } from '../../src/agent/agent.js';
import type { AgentConfig } from '../../src/agent/config.js';
import { KubernetesMode } from '../../src/kube/kube-mode.js';
import { loadKubeConfig } from '../../src/kube/client.js';
import { FakeNetAddon, type FakeNamespace } from '../fakes/fake-net-addon.js';
import { FakeKubeApi, type FakeObject } from '../helpers/fake-kube-api.js';
import { FakeZtunnel } from '../helpers/fake-ztunnel.js';
import { postUnix } from '../helpers/unix-http.js';
import { testAgentConfig } from '../helpers/agent-config.js';

const NODE = 'node-1';
const AMBIENT = { 'istio.io/dataplane-mode': 'ambient' };
const REDIRECTION = 'ambient.istio.io/redirection';

class FakeHost {
  readonly calls: string[] = [];
  readonly enrolled = new Map<string, string[]>();
  cleanedUp = false;
  async start(): Promise<void> {
    this.calls.push('start');
  }
  async cleanup(): Promise<void> {
    this.cleanedUp = true;
  }
  async podEnrolled(uid: string, ips: string[]): Promise<void> {
    this.calls.push(`enrolled ${uid} ${ips.join(',')}`);
    this.enrolled.set(uid, ips);
  }
  async podRemoved(uid: string, ips: string[]): Promise<void> {
    this.calls.push(`removed ${uid} ${ips.join(',')}`);
    this.enrolled.delete(uid);
  }
  async syncEnrolled(pods: Array<{ uid: string; ips: string[] }>): Promise<void> {
    this.calls.push(`sync ${pods.map((p) => p.uid).join(',')}`);
  }
}

function podObject(
  name: string,
  opts: {
    ns?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    ips?: string[];
    hostNetwork?: boolean;
    node?: string;
  } = {},
): FakeObject {
  const ips = opts.ips ?? [`10.0.0.${name.length + 10}`];
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: opts.ns ?? 'shop', uid: `uid-${name}`, labels: opts.labels ?? {}, annotations: opts.annotations ?? {} },
    spec: {
      nodeName: opts.node ?? NODE,
      serviceAccountName: `sa-${name}`,
      hostNetwork: opts.hostNetwork ?? false,
      containers: [{ name: 'app', image: 'app' }],
    },
    status: { phase: 'Running', podIP: ips[0], podIPs: ips.map((ip) => ({ ip })) },
  } as FakeObject;
}

async function until(predicate: () => boolean, what: string, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('Kubernetes mode', () => {
  let dir: string;
  let api: FakeKubeApi;
  let addon: FakeNetAddon;
  let host: FakeHost;
  let config: AgentConfig;
  let agent: Agent | undefined;
  let ztunnel: FakeZtunnel | undefined;
  const netns = new Map<string, FakeNamespace>();

  function addPodNetns(name: string): FakeNamespace {
    const ns = addon.addNetns(`/var/run/netns/${name}`);
    netns.set(`uid-${name}`, ns);
    return ns;
  }

  async function startAgent(addAnswerMs?: number): Promise<Agent> {
    const kc = loadKubeConfig({ kubeconfig: api.kubeconfigPath })!;
    const finder = {
      find: async (pods: Array<{ uid: string }>) => {
        const found = new Map<string, NetnsHandle>();
        for (const p of pods) if (netns.has(p.uid)) found.set(p.uid, addon.openNetns(`/var/run/netns/${p.uid.slice(4)}`));
        return found;
      },
    };
    const a = new Agent(config, {
      addon,
      makeMode: (deps) =>
        new KubernetesMode(deps, {
          kc,
          nodeName: NODE,
          systemNamespace: 'istio-system',
          daemonSetName: 'istio-cni-node',
          disableSafeUpgrade: false,
          host,
          finder,
        }),
      ...(addAnswerMs ? { addAnswerMs } : {}),
    });
    await a.start();
    agent = a;
    return a;
  }

  async function connectZtunnel(): Promise<FakeZtunnel> {
    ztunnel = await FakeZtunnel.connect(config.zdsSocket);
    await ztunnel.waitFor(() => ztunnel!.snapshotSent);
    return ztunnel;
  }

  const annotation = (name: string, ns = 'shop'): string | undefined =>
    (api.pod(ns, name)?.metadata as { annotations?: Record<string, string> } | undefined)?.annotations?.[REDIRECTION];
  const running = (): string[] => [...(ztunnel?.running.keys() ?? [])].sort();

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'kube-mode-'));
    api = new FakeKubeApi({ bookmarkIntervalMs: 200 });
    await api.start();
    addon = new FakeNetAddon({ realFds: true });
    host = new FakeHost();
    netns.clear();
    config = testAgentConfig(dir, { flags: ['--ipv6', 'false', '--exclude-namespaces', 'kube-system'] });
    api.upsertNamespace({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'shop', labels: {} } } as FakeObject);
    api.upsertNamespace({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'kube-system', labels: { ...AMBIENT } } } as FakeObject);
  });

  afterEach(async () => {
    ztunnel?.close();
    ztunnel = undefined;
    await agent?.stop();
    agent = undefined;
    await api.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Changes a pod's labels the way `kubectl label` does: everything else stays. */
  const relabelPod = (name: string, labels: Record<string, string>): void => {
    const pod = structuredClone(api.pod('shop', name)!);
    (pod.metadata as { labels?: Record<string, string> }).labels = labels;
    api.upsertPod(pod);
  };

  const labelNamespace = (labels: Record<string, string>): void =>
    void api.upsertNamespace({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'shop', labels } } as FakeObject);

  it('labelling a namespace enrolls its pods on this node; unlabelling removes them', async () => {
    addPodNetns('web');
    addPodNetns('db');
    api.upsertPod(podObject('web'));
    api.upsertPod(podObject('db'));
    api.upsertPod(podObject('elsewhere', { node: 'node-2' }));
    await startAgent();
    await connectZtunnel();
    labelNamespace(AMBIENT);
    await until(() => running().length === 2, 'both pods enrolled');
    expect(running()).toEqual(['uid-db', 'uid-web']);
    await until(() => annotation('web') === 'enabled' && annotation('db') === 'enabled', 'annotations');
    expect(netns.get('uid-web')!.nftScripts).toHaveLength(1);
    expect(host.enrolled.get('uid-web')).toEqual(['10.0.0.13']);
    expect(ztunnel!.messages.find((m) => m.uid === 'uid-web')?.info).toEqual({ name: 'web', namespace: 'shop', serviceAccount: 'sa-web' });
    expect(api.patches.length).toBeGreaterThan(0);
    expect(api.patches.every((p) => p.subresource === 'status' && p.contentType.startsWith('application/merge-patch+json'))).toBe(true);

    const metrics = await (await fetch(`http://127.0.0.1:${agent!.metricsPort}/metrics`)).text();
    expect(metrics).toMatch(/nodeagent_reconcile_events_total\{type="add"\} \d+/);
    expect(metrics).toMatch(/nodeagent_reconcile_events_total\{type="update"\} \d+/);

    labelNamespace({});
    await until(() => running().length === 0, 'both pods removed');
    await until(() => annotation('web') === undefined && annotation('db') === undefined, 'annotations removed');
    expect(netns.get('uid-web')!.nftScripts.at(-1)).toContain('delete table inet istio-ambient-nat');
    expect(host.enrolled.size).toBe(0);
  });

  it('pod labels: enroll by label in any namespace, opt out with dataplane-mode=none', async () => {
    addPodNetns('api');
    addPodNetns('legacy');
    api.upsertPod(podObject('api'));
    api.upsertPod(podObject('legacy', { labels: { 'istio.io/dataplane-mode': 'none' } }));
    await startAgent();
    await connectZtunnel();
    relabelPod('api', AMBIENT);
    await until(() => running().includes('uid-api'), 'pod label enrolls');
    labelNamespace(AMBIENT);
    await new Promise((r) => setTimeout(r, 200));
    expect(running()).toEqual(['uid-api']); // legacy opted out
    await until(() => annotation('api') === 'enabled', 'enabled');
    relabelPod('api', { 'istio.io/dataplane-mode': 'none' });
    await until(() => running().length === 0, 'opt-out removes the pod');
  });

  it('never enrolls excluded namespaces, hostNetwork pods or pods with a sidecar', async () => {
    for (const n of ['sys', 'hostnet', 'sidecar']) addPodNetns(n);
    api.upsertPod(podObject('sys', { ns: 'kube-system' }));
    api.upsertPod(podObject('hostnet', { labels: AMBIENT, hostNetwork: true }));
    api.upsertPod(podObject('sidecar', { labels: AMBIENT, annotations: { 'sidecar.istio.io/status': '{}' } }));
    await startAgent();
    await connectZtunnel();
    await new Promise((r) => setTimeout(r, 300));
    expect(running()).toEqual([]);
    expect(api.patches).toEqual([]);
  });

  it('a completed job is removed using the old object (its IPs), without touching its rules', async () => {
    addPodNetns('job');
    api.upsertPod(podObject('job', { labels: AMBIENT, ips: ['10.0.0.77'] }));
    await startAgent();
    await connectZtunnel();
    labelNamespace({});
    await until(() => running().includes('uid-job'), 'job enrolled');
    const scripts = netns.get('uid-job')!.nftScripts.length;
    const done = podObject('job', { labels: AMBIENT, annotations: { [REDIRECTION]: 'enabled' }, ips: [] });
    (done.status as Record<string, unknown>)['phase'] = 'Succeeded';
    api.upsertPod(done);
    await until(() => !running().includes('uid-job'), 'job removed');
    expect(host.calls).toContain('removed uid-job 10.0.0.77');
    expect(netns.get('uid-job')!.nftScripts).toHaveLength(scripts); // no rule removal for a finished pod
    await until(() => annotation('job') === undefined, 'annotation removed');
  });

  it('marks a pod pending while ztunnel is away and enrolls it when ztunnel comes back', async () => {
    addPodNetns('wait');
    api.upsertPod(podObject('wait', { labels: AMBIENT }));
    config.ztunnelWaitMs = 200; // the informer's add waits this long for a ztunnel, then marks the pod pending
    await startAgent();
    await until(() => annotation('wait') === 'pending', 'pending annotation');
    expect(netns.get('uid-wait')!.nftScripts).not.toHaveLength(0); // rules are in place already
    await connectZtunnel();
    await until(() => annotation('wait') === 'enabled', 'enabled after ztunnel came back', 10_000);
    expect(running()).toContain('uid-wait');
  });

  it('dual stack pods get both IPs in the probe set; changed IPs are re-added', async () => {
    addPodNetns('dual');
    api.upsertPod(podObject('dual', { labels: AMBIENT, ips: ['10.0.0.5', 'fd00::5'] }));
    await startAgent();
    await connectZtunnel();
    await until(() => host.enrolled.has('uid-dual'), 'enrolled');
    expect(host.enrolled.get('uid-dual')).toEqual(['10.0.0.5', 'fd00::5']);
    await until(() => annotation('dual') === 'enabled', 'enabled');
    api.upsertPod(podObject('dual', { labels: AMBIENT, annotations: { [REDIRECTION]: 'enabled' }, ips: ['10.0.0.6', 'fd00::6'] }));
    await until(() => host.enrolled.get('uid-dual')?.[0] === '10.0.0.6', 'IPs re-added after the kubelet restart');
  });

  it('CNI ADD: looks the pod up in the cache, uses the event IPs and netns; lets non-ambient pods start', async () => {
    addPodNetns('cni');
    addPodNetns('plain');
    api.upsertPod(podObject('cni', { labels: AMBIENT, ips: [] }));
    api.upsertPod(podObject('plain', { ips: ['10.0.0.40'] }));
    await startAgent();
    await connectZtunnel();
    const sock = join(config.runDir, 'pluginevent.sock');
    const event = (name: string) => ({
      Netns: `/var/run/netns/${name}`,
      PodName: name,
      PodNamespace: 'shop',
      IPs: [{ Interface: 2, Address: { IP: '10.9.9.9', Mask: '////AA==' }, Gateway: '10.9.9.1' }],
    });
    expect(await postUnix(sock, '/cmdadd', event('cni'))).toEqual({ status: 200, body: '' });
    expect(running()).toContain('uid-cni');
    expect(host.enrolled.get('uid-cni')).toEqual(['10.9.9.9']);
    // Our plugin forwards every pod: a non-ambient one is answered 200 and stays out of the mesh.
    expect(await postUnix(sock, '/cmdadd', event('plain'))).toEqual({ status: 200, body: '' });
    expect(running()).not.toContain('uid-plain');
    // Unknown to the cache: fine in a non-ambient namespace, "retry" in an ambient one.
    expect(await postUnix(sock, '/cmdadd', event('ghost'))).toEqual({ status: 200, body: '' });
    labelNamespace(AMBIENT);
    await until(() => running().includes('uid-plain'), 'namespace label enrolls the plain pod');
    expect(await postUnix(sock, '/cmdadd', event('ghost'))).toMatchObject({
      status: 500,
      body: expect.stringContaining('not found in the informer cache'),
    });
  });

  it('CNI ADD across a ztunnel restart: waits for the new ztunnel and succeeds (enabled, never pending), counted as an add that waited', async () => {
    addPodNetns('restart');
    api.upsertPod(podObject('restart', { labels: AMBIENT, ips: [] }));
    await startAgent();
    const first = await connectZtunnel();
    first.close();
    await until(() => agent!.zds.connections().length === 0, 'the old ztunnel gone');
    const event = {
      Netns: '/var/run/netns/restart',
      PodName: 'restart',
      PodNamespace: 'shop',
      IPs: [{ Interface: 2, Address: { IP: '10.9.9.7', Mask: '////AA==' }, Gateway: '' }],
    };
    const adding = postUnix(join(config.runDir, 'pluginevent.sock'), '/cmdadd', event);
    await new Promise((r) => setTimeout(r, 300));
    const second = await connectZtunnel();
    expect(await adding).toEqual({ status: 200, body: '' });
    expect(second.messages.filter((m) => m.uid === 'uid-restart').map((m) => m.kind)).toEqual(['add']); // in its snapshot, once
    expect(annotation('restart')).toBe('enabled');
    expect(host.enrolled.get('uid-restart')).toEqual(['10.9.9.7']);
    expect(await agent!.metrics.registry.getSingleMetricAsString('ambient_node_agent_ztunnel_waits_total')).toContain(
      '{result="enrolled"} 1',
    );
  });

  it('CNI ADD is answered before the plugin gives up when ztunnel is slow; the enrolment carries on', async () => {
    addPodNetns('slow');
    api.upsertPod(podObject('slow', { labels: AMBIENT, ips: [] }));
    await startAgent(150);
    ztunnel = await FakeZtunnel.connect(config.zdsSocket, { ackDelayFor: (req) => ('add' in req ? 400 : undefined) });
    await ztunnel.waitFor(() => ztunnel!.snapshotSent);
    const event = {
      Netns: '/var/run/netns/slow',
      PodName: 'slow',
      PodNamespace: 'shop',
      IPs: [{ Interface: 2, Address: { IP: '10.9.9.8', Mask: '////AA==' }, Gateway: '' }],
    };
    const res = await postUnix(join(config.runDir, 'pluginevent.sock'), '/cmdadd', event);
    expect(res).toMatchObject({ status: 500, body: expect.stringContaining('not enrolled within 150 ms') });
    await until(() => running().includes('uid-slow') && annotation('slow') === 'enabled', 'the late enrolment completes');
  });

  it('keeps serving while the API server is down, and catches up with changes made meanwhile', async () => {
    addPodNetns('a');
    addPodNetns('b');
    api.upsertPod(podObject('a', { labels: AMBIENT }));
    api.upsertPod(podObject('b'));
    await startAgent();
    await connectZtunnel();
    await until(() => running().includes('uid-a'), 'a enrolled');
    await api.stop();
    api.upsertPod(podObject('b', { labels: AMBIENT })); // changed while the agent cannot see it
    await new Promise((r) => setTimeout(r, 300));
    expect(running()).toEqual(['uid-a']); // existing pods keep being served
    await api.start();
    await until(() => running().includes('uid-b'), 'b enrolled after the API server came back', 15_000);
  }, 30_000);

  it('recovers from an expired watch (410 Gone) by re-listing', async () => {
    addPodNetns('late');
    api.upsertPod(podObject('late'));
    await startAgent();
    await connectZtunnel();
    api.compact();
    api.cutWatches();
    relabelPod('late', AMBIENT); // an update the old watch can no longer deliver
    await until(() => running().includes('uid-late'), 'enrolled after re-list', 15_000);
  }, 30_000);

  it('after a restart: enrolled pods are found in /proc, synced to the probe set and sent in the snapshot', async () => {
    addPodNetns('old');
    api.upsertPod(podObject('old', { labels: AMBIENT, annotations: { [REDIRECTION]: 'enabled' } }));
    await startAgent();
    expect(host.calls.slice(0, 2)).toEqual(['start', 'sync uid-old']);
    const z = await connectZtunnel();
    expect(z.messages.map((m) => `${m.kind}:${m.uid ?? ''}`)).toEqual(['add:uid-old', 'snapshotSent:']);
  });

  it('keeps the plugin fallback file current from the namespace informer', async () => {
    await startAgent();
    const read = (): { namespaces: string[] } =>
      JSON.parse(readFileSync(join(config.runDir, 'ambient-enablement.json'), 'utf8')) as { namespaces: string[] };
    expect(read().namespaces).toEqual([]); // kube-system is labelled but excluded
    labelNamespace(AMBIENT);
    await until(() => read().namespaces.includes('shop'), 'file updated');
  });

  it('on SIGTERM keeps everything while the DaemonSet exists, and cleans up when it is gone', async () => {
    api.setDaemonSet('istio-system', {
      apiVersion: 'apps/v1',
      kind: 'DaemonSet',
      metadata: { name: 'istio-cni-node', namespace: 'istio-system' },
      spec: {},
    } as FakeObject);
    config = { ...config, podNamespace: 'istio-system' };
    await startAgent();
    await agent!.stop();
    agent = undefined;
    expect(host.cleanedUp).toBe(false);
    api.setDaemonSet('istio-system', undefined);
    await startAgent();
    await agent!.stop();
    agent = undefined;
    expect(host.cleanedUp).toBe(true);
  });
});
