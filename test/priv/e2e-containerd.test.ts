// End to end with a real container runtime (root): Debian's containerd 1.6 with its CRI plugin and
// runc, driven over CRI like the kubelet, in the test's node netns, with bridge + host-local + our
// plugin chained (the demo's node: src/demo/environment.ts) and the agent standalone. Two
// containerd configurations, one start each: pod netns in /var/run/netns with a loopback plugin that
// always loses containerd's race (the agent must bring lo up itself), and
// `netns_mounts_under_state_dir = true` with the real loopback plugin.
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../../src/cli/main.js';
import { EchoApp } from '../../src/demo/demo-apps.js';
import { CNI_PLUGIN_DIR, demoPrerequisites, DemoEnvironment, type DemoPod } from '../../src/demo/environment.js';
import { buildPauseImage, containerdPrerequisites, ContainerdRuntime, type SandboxSpec } from '../../src/demo/containerd-runtime.js';
import { requirePrivilegedInCi } from '../helpers/netns.js';

requirePrivilegedInCi();
const skip = demoPrerequisites() ?? containerdPrerequisites();
if (skip && process.env['CI']) throw new Error(`containerd end-to-end test cannot run in CI: ${skip}`);

const LATE_LOOPBACK = new URL('../helpers/cni-late-loopback.mjs', import.meta.url).pathname;

function inNetns(path: string, argv: string[]): string {
  return execFileSync('nsenter', [`--net=${path}`, ...argv], { encoding: 'utf8' });
}

interface AgentLogLine {
  level: number;
  msg: string;
  uid?: string;
}

describe.skipIf(skip)(`containerd over CRI end to end${skip ? ` — skipped: ${skip}` : ''}`, () => {
  let dir: string;
  let image: string;
  let env: DemoEnvironment;
  let containerd: ContainerdRuntime | undefined;
  let podCount = 0;
  const stateDirB = (): string => join(dir, 'b');

  const spec = (name: string, namespace = 'demo'): SandboxSpec => ({
    name,
    namespace,
    uid: `00000000-c7d0-4000-8000-${String(++podCount).padStart(12, '0')}`,
  });
  const agentLog = (): AgentLogLine[] =>
    readFileSync(env.agentLog, 'utf8')
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as AgentLogLine);

  /** The plugins containerd finds in its one bin dir: ours (installed by the agent), bridge, host-local, loopback. */
  function installLoopback(kind: 'late' | 'real'): void {
    const target = join(env.binDir, 'loopback');
    rmSync(target, { force: true });
    if (kind === 'real') return symlinkSync(join(CNI_PLUGIN_DIR, 'loopback'), target);
    writeFileSync(target, `#!${process.execPath}\n${readFileSync(LATE_LOOPBACK, 'utf8')}`);
    chmodSync(target, 0o755);
  }

  async function startContainerd(name: string, netnsUnderStateDir: boolean): Promise<ContainerdRuntime> {
    const runtime = new ContainerdRuntime({
      dir: join(dir, name),
      nodeNetns: env.nodeNetnsPath,
      cniBinDir: env.binDir,
      cniConfDir: env.confDir,
      netnsUnderStateDir,
    });
    containerd = runtime;
    await runtime.start();
    runtime.importImage(image);
    return runtime;
  }

  async function stopContainerd(): Promise<void> {
    await containerd?.stop();
    containerd = undefined;
  }

  /** A sandbox as the demo's traffic helpers see a pod: its netns handle and an echo app in it. */
  async function asDemoPod(name: string, uid: string, ip: string, netnsPath: string): Promise<DemoPod> {
    const handle = env.addon.openNetns(netnsPath);
    const app = await EchoApp.start(env.addon, handle, { label: name });
    return { name, uid, ip, netnsName: '', netnsPath, handle, app };
  }

  beforeAll(async () => {
    dir = mkdtempSync('/tmp/ana-ctr-');
    image = buildPauseImage(join(dir, 'image'));
    env = new DemoEnvironment({
      subnet: 93,
      podNames: [],
      agentArgs: ['--netns-dirs', join(stateDirB(), 'state', 'io.containerd.grpc.v1.cri', 'netns'), '--log-level', 'debug'],
    });
    await env.setUp();
    for (const plugin of ['bridge', 'host-local']) symlinkSync(join(CNI_PLUGIN_DIR, plugin), join(env.binDir, plugin));
  }, 60_000);

  afterAll(async () => {
    await stopContainerd().catch(() => undefined);
    await env?.tearDown();
    if (dir) rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  describe('pod netns in /var/run/netns; the pod lo is still down when the agent gets the ADD', () => {
    const pods: DemoPod[] = [];
    const sandboxes = new Map<string, string>(); // uid -> sandbox id
    let runtime: ContainerdRuntime;

    beforeAll(async () => {
      installLoopback('late');
      runtime = await startContainerd('a', false);
    }, 60_000);

    afterAll(async () => {
      for (const pod of pods.splice(0)) {
        await pod.app.close();
        pod.handle.close();
      }
      await stopContainerd();
    }, 60_000);

    it('RunPodSandbox: the agent brings lo up, applies the rules and hands ztunnel the sandbox netns before the sandbox starts', async () => {
      for (const name of ['web', 'api']) {
        const pod = spec(name);
        const id = await runtime.runPodSandbox(pod);
        sandboxes.set(pod.uid, id);
        const info = await runtime.sandboxInfo(id);
        expect(info).toMatchObject({ state: 'SANDBOX_READY', netnsPath: expect.stringMatching(/^\/var\/run\/netns\/cni-[0-9a-f-]+$/) });
        // ztunnel got this very netns (inode and device), and bound its listeners in it (127.0.0.1:15053 needs lo up).
        const st = statSync(info.netnsPath);
        expect(env.standIn!.pods().get(pod.uid)).toMatchObject({
          name,
          namespace: 'demo',
          state: 'running',
          netns: { ino: st.ino, dev: st.dev },
        });
        expect(inNetns(info.netnsPath, ['ip', '-o', 'link', 'show', 'lo'])).toMatch(/<LOOPBACK,UP,LOWER_UP>/);
        expect(inNetns(info.netnsPath, ['nft', 'list', 'tables'])).toContain('table inet istio-ambient-nat');
        expect(inNetns(info.netnsPath, ['ip', '-6', 'route', 'show', 'table', '100'])).toMatch(/^local default dev lo /m);
        expect(inNetns(info.netnsPath, ['ip', 'rule', 'show'])).toMatch(/fwmark 0x111\/0xfff lookup 100/);
        pods.push(await asDemoPod(name, pod.uid, info.ip, info.netnsPath));
      }
      expect(pods.map((p) => p.ip)).toEqual([expect.stringMatching(/^10\.248\.93\./), expect.stringMatching(/^10\.248\.93\./)]);
    }, 30_000);

    it('traffic between the sandboxes goes through ztunnel (outbound 15001, inbound 15006, client IP kept)', async () => {
      const [web, api] = pods;
      const row = await env.connect(web!, api!);
      expect(row.outbound).toMatchObject({ listener: expect.stringContaining('15001'), originalDst: `${api!.ip}:8080` });
      expect(row.inbound).toMatchObject({ listener: expect.stringContaining('15006'), clientIp: web!.ip });
      expect(row.peerSeenByApp).toBe(web!.ip);
      expect(row.echoed).toBe(true);
    });

    it('an excluded namespace starts outside the mesh', async () => {
      const pod = spec('coredns', 'kube-system');
      const id = await runtime.runPodSandbox(pod);
      const info = await runtime.sandboxInfo(id);
      expect(env.standIn!.pods().has(pod.uid)).toBe(false);
      expect(inNetns(info.netnsPath, ['nft', 'list', 'tables'])).not.toContain('istio-ambient');
      await runtime.stopPodSandbox(id);
      await runtime.removePodSandbox(id);
    }, 30_000);

    it('StopPodSandbox takes the pod out (one ZDS del); RemovePodSandbox repeats DEL, which is quiet', async () => {
      const pod = pods.pop()!;
      await pod.app.close();
      pod.handle.close();
      const id = sandboxes.get(pod.uid)!;
      await runtime.stopPodSandbox(id);
      await env.standIn!.waitFor(() => !env.standIn!.pods().has(pod.uid), 5_000, 'del reached ztunnel');
      await runtime.removePodSandbox(id);
      const dels = (): number => env.standIn!.requests.filter((r) => r.kind === 'del' && r.uid === pod.uid).length;
      expect(dels()).toBe(1);
      const lines = (): AgentLogLine[] => agentLog().filter((l) => l.uid === pod.uid);
      // The agent answers the repeated DEL before containerd's RemovePodSandbox returns: its log has it.
      expect(
        lines()
          .filter((l) => l.msg === 'DEL for a pod that is not enrolled; nothing to do')
          .map((l) => l.level),
      ).toEqual([20]);
      expect(lines().filter((l) => l.msg === 'pod removed')).toHaveLength(1);
      expect(dels()).toBe(1);
    }, 30_000);
  });

  describe('netns_mounts_under_state_dir = true (real loopback plugin)', () => {
    let runtime: ContainerdRuntime;

    beforeAll(async () => {
      installLoopback('real');
      runtime = await startContainerd('b', true);
    }, 60_000);

    afterAll(async () => {
      await stopContainerd();
    }, 60_000);

    it('enrolls a sandbox whose netns containerd mounted under its state dir (accepted through --netns-dirs), and removes it', async () => {
      const pod = spec('state-dir');
      const id = await runtime.runPodSandbox(pod);
      const info = await runtime.sandboxInfo(id);
      expect(info.netnsPath).toMatch(new RegExp(`^${runtime.stateNetnsDir}/cni-[0-9a-f-]+$`));
      const st = statSync(info.netnsPath);
      expect(env.standIn!.pods().get(pod.uid)).toMatchObject({ state: 'running', netns: { ino: st.ino, dev: st.dev } });
      expect(inNetns(info.netnsPath, ['nft', 'list', 'tables'])).toContain('table inet istio-ambient-nat');
      await runtime.stopPodSandbox(id);
      await runtime.removePodSandbox(id);
      expect(env.standIn!.pods().has(pod.uid)).toBe(false);
      expect(env.standIn!.requests.filter((r) => r.kind === 'del' && r.uid === pod.uid)).toHaveLength(1);
    }, 30_000);
  });

  it('`ambient-node-agent demo --runtime containerd` runs the whole demo with containerd making the pods', async () => {
    let output = '';
    const status = await main(['demo', '--runtime', 'containerd'], { out: (t) => void (output += t), err: (t) => void (output += t) });
    expect(output).toContain('containerd (CRI) in the node namespace');
    expect(output).toContain('every connection and DNS query went through the ztunnel listeners');
    expect(status, output).toBe(0);
  }, 60_000);
});
