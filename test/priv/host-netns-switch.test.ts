// ALLOW_SWITCH_TO_HOST_NS with real namespaces: the agent stands in a "pod" netns (its own, as
// under Istio's chart without hostNetwork), the node is another netns, and the proc dir's
// `1/ns/net` is a bind mount of the node's (this machine's PID 1 has no readable
// /proc/1/ns/net, so the proc dir is built). The host rules and sets must land in the node netns
// and nowhere else, for both backends, and a kubelet-like connection from the node netns to an
// enrolled pod must reach it SNATed to 169.254.7.127. Without the switch the agent refuses:
// /readyz 503 naming the fix, one loud log line, nothing written anywhere.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { NativeNetAddon, type NetnsHandle } from '../../src/addon/net-addon.js';
import { currentThreadNetns } from '../helpers/netns-files.js';
import { Agent } from '../../src/agent/agent.js';
import { KubernetesMode } from '../../src/kube/kube-mode.js';
import { chooseBackend } from '../../src/host/backend-fallback.js';
import { HostDataplane } from '../../src/host/host-dataplane.js';
import { openHostNetns } from '../../src/host/host-netns.js';
import { loadKubeConfig } from '../../src/kube/client.js';
import { defaultRuleSettings } from '../../src/rules/settings.js';
import { FakeKubeApi, type FakeObject } from '../helpers/fake-kube-api.js';
import { FakeZtunnel } from '../helpers/fake-ztunnel.js';
import { postUnix } from '../helpers/unix-http.js';
import {
  createNetns,
  deleteAllNetns,
  deleteNetns,
  execIn,
  ipIn,
  privilegedSkipReason,
  requirePrivilegedInCi,
  type TestNetns,
} from '../helpers/netns.js';
import { destroyTrafficClients, exchangeFrom, TrafficServer, uniqueToken } from '../helpers/traffic.js';
import { testAgentConfig } from '../helpers/agent-config.js';

requirePrivilegedInCi();
const skip = privilegedSkipReason();

const NODE_IP = '10.77.0.1';
const POD_IP = '10.77.0.2';
const SNAT_IP = '169.254.7.127';

/** Everything the agent could have left in a namespace, as the nft/iptables/ipset binaries see it. */
function hostArtefacts(ns: TestNetns): string {
  const nft = execIn(ns.name, ['nft', 'list', 'tables'])
    .split('\n')
    .filter((l) => l.includes('istio'))
    .join('\n');
  const ipt = execIn(ns.name, ['iptables-save', '-t', 'nat'])
    .split('\n')
    .filter((l) => l.includes('ISTIO'))
    .join('\n');
  const ipsets = execIn(ns.name, ['ipset', 'list', '-n']);
  return [nft, ipt, ipsets].filter((s) => s.trim() !== '').join('\n');
}

describe.skipIf(skip)(`host netns switch (ALLOW_SWITCH_TO_HOST_NS)${skip ? ` — skipped: ${skip}` : ''}`, () => {
  const addon = skip ? (undefined as never) : new NativeNetAddon();
  const jsThreadNetns = skip ? undefined : currentThreadNetns();
  let node: TestNetns;
  let agentNs: TestNetns;
  let pod: TestNetns;
  let procDir: string;
  let bound = '';
  const handles: NetnsHandle[] = [];
  const servers: TrafficServer[] = [];

  beforeAll(() => addon.warmUp());

  beforeEach(() => {
    node = createNetns('node');
    agentNs = createNetns('agent');
    pod = createNetns('pod');
    // node <-> pod veth, the pod's default route back through the node (for the SNATed replies).
    const [a, b] = [
      `n${process.pid % 10000}${Math.random().toString(36).slice(2, 6)}`,
      `p${process.pid % 10000}${Math.random().toString(36).slice(2, 6)}`,
    ];
    ipIn(node.name, ['link', 'add', a, 'type', 'veth', 'peer', 'name', b, 'netns', pod.name]);
    ipIn(node.name, ['addr', 'add', `${NODE_IP}/24`, 'dev', a]);
    ipIn(node.name, ['link', 'set', a, 'up']);
    ipIn(pod.name, ['addr', 'add', `${POD_IP}/24`, 'dev', b]);
    ipIn(pod.name, ['link', 'set', b, 'up']);
    ipIn(pod.name, ['route', 'add', 'default', 'via', NODE_IP]);
    // The host's /proc: PID 1 in the node netns, and a kubelet running as root (uid 0: the test's
    // connections are made as root, so the nft rule's skuid matches them as it matches the kubelet).
    procDir = mkdtempSync(join(tmpdir(), 'ana-hostproc-'));
    mkdirSync(join(procDir, '1', 'ns'), { recursive: true });
    writeFileSync(join(procDir, '1', 'ns', 'net'), '');
    execFileSync('mount', ['--bind', node.path, join(procDir, '1', 'ns', 'net')]);
    bound = join(procDir, '1', 'ns', 'net');
    mkdirSync(join(procDir, '4242'));
    writeFileSync(join(procDir, '4242', 'comm'), 'kubelet\n');
    writeFileSync(join(procDir, '4242', 'cmdline'), '/usr/bin/kubelet\0--config=/var/lib/kubelet/config.yaml\0');
    writeFileSync(join(procDir, '4242', 'status'), 'Name:\tkubelet\nUid:\t0\t0\t0\t0\n');
  });

  afterEach(async () => {
    destroyTrafficClients();
    for (const s of servers.splice(0)) await s.close();
    for (const h of handles.splice(0)) h.close();
    if (bound) execFileSync('umount', [bound]);
    bound = '';
    rmSync(procDir, { recursive: true, force: true });
    for (const ns of [node, agentNs, pod]) deleteNetns(ns);
  });

  afterAll(() => {
    deleteAllNetns();
    expect(currentThreadNetns()).toEqual(jsThreadNetns);
  });

  /** The source address a listener in the pod sees for a connection made from the node netns. */
  async function probeSource(podHandle: NetnsHandle, token: string): Promise<string> {
    const server = await TrafficServer.listen(addon, podHandle, 'pod', { address: POD_IP, port: 8080 });
    servers.push(server);
    const nodeHandle = addon.openNetns(node.path);
    handles.push(nodeHandle);
    await exchangeFrom(addon, nodeHandle, { address: POD_IP, port: 8080, token });
    const seen = await server.waitFor(token);
    await server.close();
    servers.pop();
    return seen.remoteAddress;
  }

  it.each(['nftables', 'iptables'] as const)(
    '%s: host rules and sets land in <proc>/1/ns/net only; a probe from the node netns reaches the pod SNATed, others not',
    async (backend) => {
      const chosen = openHostNetns(addon, { procDir, allowSwitch: true, selfPath: agentNs.path });
      handles.push(chosen.handle);
      expect(chosen).toMatchObject({ switched: true });
      expect(chosen.problem).toBeUndefined();
      const host = new HostDataplane({ addon, hostNetns: chosen.handle, settings: defaultRuleSettings({ ipv6: true }), backend, procDir });
      await host.start();
      await host.podEnrolled('uid-web', [POD_IP]);

      expect(await host.verify()).toMatchObject({ inSync: true });
      if (backend === 'nftables') {
        expect(host.kubeletUid).toBe(0); // found in the proc dir
        expect(execIn(node.name, ['nft', 'list', 'ruleset'])).toContain(
          `meta skuid 0 ip daddr @istio-inpod-probes-v4 counter packets 0 bytes 0 snat ip to ${SNAT_IP}`,
        );
      } else {
        expect(execIn(node.name, ['iptables-save', '-t', 'nat'])).toContain(
          `-A ISTIO_POSTRT -p tcp -m owner --socket-exists -m set --match-set istio-inpod-probes-v4 dst -j SNAT --to-source ${SNAT_IP}`,
        );
        expect(execIn(node.name, ['ipset', 'list', 'istio-inpod-probes-v4'])).toContain(`${POD_IP} comment "uid-web"`);
      }
      expect(hostArtefacts(agentNs)).toBe('');
      expect(hostArtefacts(pod)).toBe('');

      const podHandle = addon.openNetns(pod.path);
      handles.push(podHandle);
      expect(await probeSource(podHandle, uniqueToken('probe'))).toBe(SNAT_IP);
      // Removed from the set: the same connection is no longer SNATed.
      await host.podRemoved('uid-web', [POD_IP]);
      expect(await probeSource(podHandle, uniqueToken('plain'))).toBe(NODE_IP);

      await host.cleanup();
      expect(hostArtefacts(node)).toBe('');
    },
  );

  it("NATIVE_NFTABLES=true on a node whose ip sets Istio's iptables backend left: iptables (detected in the node netns)", async () => {
    const opts = { backend: 'nftables' as const, ipv6: true, procDir, allowSwitchToHostNs: true, selfNetnsPath: agentNs.path };
    const log = pino({ level: 'silent' });
    expect(await chooseBackend(addon, opts, log)).toBe('nftables');
    execIn(node.name, ['ipset', 'create', 'istio-inpod-probes-v4', 'hash:ip', 'family', 'inet', 'comment']);
    expect(await chooseBackend(addon, opts, log)).toBe('iptables');
    // Only the node's sets count: the same set in the agent's own netns changes nothing.
    execIn(node.name, ['ipset', 'destroy', 'istio-inpod-probes-v4']);
    execIn(agentNs.name, ['ipset', 'create', 'istio-inpod-probes-v4', 'hash:ip', 'family', 'inet', 'comment']);
    expect(await chooseBackend(addon, opts, log)).toBe('nftables');
  });

  it('ALLOW_SWITCH_TO_HOST_NS=true and an unopenable <proc>/1/ns/net: a clear error naming the path and the fix', () => {
    const empty = mkdtempSync(join(tmpdir(), 'ana-noproc-'));
    try {
      expect(() => openHostNetns(addon, { procDir: empty, allowSwitch: true, selfPath: agentNs.path })).toThrow(
        new RegExp(`ALLOW_SWITCH_TO_HOST_NS is true but the host network namespace ${empty}/1/ns/net cannot be opened.*hostNetwork: true`),
      );
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
  });

  describe('the agent in Kubernetes mode', () => {
    let api: FakeKubeApi;
    let dir: string;
    let agent: Agent | undefined;
    const lines: string[] = [];

    beforeEach(async () => {
      dir = mkdtempSync(join(tmpdir(), 'ana-switch-'));
      api = new FakeKubeApi({ bookmarkIntervalMs: 200 });
      await api.start();
      lines.length = 0;
    });

    let ztunnel: FakeZtunnel | undefined;

    afterEach(async () => {
      ztunnel?.close();
      ztunnel = undefined;
      await agent?.stop();
      agent = undefined;
      await api.close();
      rmSync(dir, { recursive: true, force: true });
    });

    async function startAgent(allowSwitch: boolean, backend: 'nftables' | 'iptables' = 'iptables'): Promise<Agent> {
      const config = testAgentConfig(dir, {
        flags: ['--proc-dir', procDir, '--backend', backend],
        env: { ALLOW_SWITCH_TO_HOST_NS: String(allowSwitch) },
      });
      const log = pino({ level: 'info' }, { write: (line: string) => void lines.push(line) });
      const kc = loadKubeConfig({ kubeconfig: api.kubeconfigPath })!;
      agent = new Agent(config, {
        addon,
        log,
        makeMode: (deps) =>
          new KubernetesMode(deps, {
            kc,
            nodeName: 'node-1',
            systemNamespace: 'istio-system',
            daemonSetName: 'istio-cni-node',
            disableSafeUpgrade: true,
            selfNetnsPath: agentNs.path,
          }),
      });
      await agent.start();
      return agent;
    }

    const readyz = async (a: Agent): Promise<{ status: number; body: string }> => {
      const res = await fetch(`http://127.0.0.1:${a.healthPort}/readyz`);
      return { status: res.status, body: await res.text() };
    };

    it('switching allowed: ready, host rules in the node netns only', async () => {
      const a = await startAgent(true);
      expect(await readyz(a)).toEqual({ status: 200, body: 'ready\n' });
      expect(execIn(node.name, ['iptables-save', '-t', 'nat'])).toContain('-A POSTROUTING -j ISTIO_POSTRT');
      expect(execIn(node.name, ['ipset', 'list', '-n']).split('\n').filter(Boolean).sort()).toEqual([
        'istio-inpod-probes-v4',
        'istio-inpod-probes-v6',
      ]);
      expect(hostArtefacts(agentNs)).toBe('');
    });

    it.each(['iptables', 'nftables'] as const)(
      '%s: a pod enrolled over CNI ADD gets its IP in the node netns set; a kubelet-like probe from the node passes its in-pod rules, other node traffic is captured',
      async (backend) => {
        api.upsertNamespace({
          apiVersion: 'v1',
          kind: 'Namespace',
          metadata: { name: 'shop', labels: { 'istio.io/dataplane-mode': 'ambient' } },
        } as FakeObject);
        api.upsertPod({
          apiVersion: 'v1',
          kind: 'Pod',
          metadata: { name: 'web', namespace: 'shop', uid: 'uid-web', labels: {}, annotations: {} },
          spec: { nodeName: 'node-1', serviceAccountName: 'web', containers: [{ name: 'app', image: 'app' }] },
          status: { phase: 'Running' },
        } as FakeObject);
        const a = await startAgent(true, backend);
        ztunnel = await FakeZtunnel.connect(join(dir, 'z.sock'));
        await ztunnel.waitFor(() => ztunnel!.snapshotSent);
        const add = {
          Netns: pod.path,
          PodName: 'web',
          PodNamespace: 'shop',
          PodUID: 'uid-web',
          IPs: [{ Interface: 2, Address: { IP: POD_IP, Mask: '////AA==' }, Gateway: NODE_IP }],
        };
        expect(await postUnix(join(dir, 'run', 'pluginevent.sock'), '/cmdadd', add)).toEqual({ status: 200, body: '' });
        expect(ztunnel.running.has('uid-web')).toBe(true);
        if (backend === 'iptables')
          expect(execIn(node.name, ['ipset', 'list', 'istio-inpod-probes-v4'])).toContain(`${POD_IP} comment "uid-web"`);
        else
          expect(execIn(node.name, ['nft', 'list', 'set', 'inet', 'istio-ambient-nat', 'istio-inpod-probes-v4'])).toContain(
            `${POD_IP} comment "uid-web"`,
          );
        expect(hostArtefacts(agentNs)).toBe('');
        expect(await readyz(a)).toEqual({ status: 200, body: 'ready\n' });

        // The in-pod rules let the SNATed probe through to the application, with its source intact.
        const podHandle = addon.openNetns(pod.path);
        handles.push(podHandle);
        expect(await probeSource(podHandle, uniqueToken('probe'))).toBe(SNAT_IP);
        // Out of the set (as for a pod no longer enrolled), node traffic is redirected to ztunnel's
        // inbound port, where nothing listens here.
        if (backend === 'iptables') execIn(node.name, ['ipset', 'del', 'istio-inpod-probes-v4', POD_IP]);
        else execIn(node.name, ['nft', 'delete', 'element', 'inet', 'istio-ambient-nat', 'istio-inpod-probes-v4', `{ ${POD_IP} }`]);
        await expect(probeSource(podHandle, uniqueToken('captured'))).rejects.toMatchObject({ code: 'ECONNREFUSED' });
      },
    );

    it('switching not allowed and the node netns provably elsewhere: /readyz 503 naming the fix, one loud log line, nothing written', async () => {
      const a = await startAgent(false, 'nftables');
      const { status, body } = await readyz(a);
      expect(status).toBe(503);
      expect(body).toContain('host probe rules not applied');
      expect(body).toContain('set ALLOW_SWITCH_TO_HOST_NS=true');
      expect(body).toContain('hostNetwork: true');
      const loud = lines.filter((l) => l.includes('HOST PROBE RULES NOT APPLIED'));
      expect(loud).toHaveLength(1);
      expect(JSON.parse(loud[0]!)).toMatchObject({ level: 50 });
      await readyz(a); // asking again logs nothing new
      expect(lines.filter((l) => l.includes('HOST PROBE RULES NOT APPLIED'))).toHaveLength(1);
      expect(hostArtefacts(agentNs)).toBe('');
      expect(hostArtefacts(node)).toBe('');
    });
  });
});
