// Everything the demo (and its end-to-end test) runs on one Linux box, without Kubernetes: a
// throw-away node namespace where the real bridge + host-local plugins build the pod network, the
// agent as its own process (standalone, installing and chaining our plugin), a ztunnel stand-in
// on the agent's ZDS socket, and pods created the way a container runtime creates them.
// Nothing touches the machine's own network: the bridge and veths live in the node namespace.
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { createWriteStream, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NativeNetAddon, type NetnsHandle } from '../addon/net-addon.js';
import { projectRoot } from '../project-root.js';
import { CniRuntime, type CniPod } from './cni-runtime.js';
import type { ContainerdRuntime } from './containerd-runtime.js';
import { dnsQuery, EchoApp, tcpExchange, DEMO_APP_PORT } from './demo-apps.js';
import { ZtunnelStandIn, type StandInEvent } from './ztunnel/zds-client.js';

export const CNI_PLUGIN_DIR = '/usr/lib/cni';
const NEEDED_PLUGINS = ['bridge', 'host-local'];
/** Any address off the pod network: only the DNS capture rule can make it answer. */
export const CLUSTER_DNS = '10.96.0.10';

export interface DemoPod {
  name: string;
  uid: string;
  ip: string;
  netnsName: string;
  netnsPath: string;
  handle: NetnsHandle;
  /** How the pod was made: CNI commands run by the demo itself, or a containerd sandbox. */
  cni?: CniPod;
  sandboxId?: string;
  app: EchoApp;
}

/** Who creates the pods: the demo's own CNI driver, or a real containerd over CRI. */
export type DemoRuntime = 'cni' | 'containerd';

export interface ConnectionRow {
  from: string;
  to: string;
  /** Outbound capture in the client pod: the stand-in's 15001 saw this original destination. */
  outbound?: StandInEvent;
  /** Inbound capture in the server pod: the stand-in's 15006 saw this, with the client IP. */
  inbound?: StandInEvent;
  /** The address the server application saw as its peer. */
  peerSeenByApp: string;
  echoed: boolean;
}

export interface DnsRow {
  pod: string;
  name: string;
  answer: string;
  event?: StandInEvent;
}

export interface DemoOptions {
  podNames?: string[];
  /** Third octet of the 10.248.X.0/24 pod subnet (so parallel runs do not collide). */
  subnet?: number;
  log?: (line: string) => void;
  /** Extra Node.js flags for the agent process (the node benchmark profiles with --cpu-prof). */
  agentNodeArgs?: string[];
  /**
   * The Node.js binary that runs the agent and the variables the image gives it (the node
   * benchmark runs the image's Node with the image's NODE_OPTIONS, MALLOC_* variables and compile
   * cache); default: this process's Node, no variables.
   */
  agentRuntime?: { node: string; env: Record<string, string> };
  /** Extra `run` flags for the agent (after the demo's own, so they win). */
  agentArgs?: string[];
  runtime?: DemoRuntime;
  /**
   * 'stand-in' (default): the demo's ztunnel stand-in connects to the agent. 'external': nobody
   * does; the caller connects its own ZDS peer to zdsSocket (the node benchmark's native peer).
   */
  ztunnel?: 'stand-in' | 'external';
  /**
   * Mount a tmpfs on the run dir (the node benchmark): on a node, Istio's chart mounts the host's
   * /var/run/istio-cni there, and /var/run is a tmpfs on every systemd host, while the demo's
   * work dir lives under the temp dir, which may be a disk (a per-pod state write costs a
   * journaled create and rename there, about 150 us more).
   */
  runDirOnTmpfs?: boolean;
}

function ip(args: string[]): string {
  return execFileSync('ip', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** Why the demo cannot run here, or undefined. */
export async function demoPrerequisitesFor(runtime: DemoRuntime): Promise<string | undefined> {
  const problem = demoPrerequisites();
  if (problem || runtime === 'cni') return problem;
  try {
    return (await import('./containerd-runtime.js')).containerdPrerequisites();
  } catch (err) {
    return `the containerd runtime needs the dev dependencies (@grpc/grpc-js; npm ci in a checkout): ${(err as Error).message}`;
  }
}

/** Why the demo (CNI runtime) cannot run here, or undefined. */
export function demoPrerequisites(): string | undefined {
  if (process.getuid?.() !== 0) return 'the demo needs root (it creates network namespaces)';
  const missing = NEEDED_PLUGINS.filter((p) => !existsSync(join(CNI_PLUGIN_DIR, p)));
  if (missing.length > 0)
    return `missing CNI plugins ${missing.join(', ')} in ${CNI_PLUGIN_DIR}: apt-get install containernetworking-plugins`;
  const root = projectRoot();
  for (const built of ['build/Release/istio-cni', 'build/Release/ambient_native.node', 'dist/src/cli/main.js']) {
    if (!existsSync(join(root, built))) return `${built} is missing: npm run build`;
  }
  return undefined;
}

let environments = 0;

export class DemoEnvironment {
  readonly addon = new NativeNetAddon();
  readonly pods: DemoPod[] = [];
  readonly workDir = mkdtempSync(join(tmpdir(), 'ana-demo-'));
  readonly runDir = join(this.workDir, 'run');
  readonly confDir = join(this.workDir, 'net.d');
  readonly binDir = join(this.workDir, 'bin');
  readonly zdsSocket = join(this.workDir, 'ztunnel', 'ztunnel.sock');
  readonly primaryConfig = join(this.workDir, 'net.d', '10-demo.conflist');
  readonly agentLog = join(this.workDir, 'agent.log');
  /** Unique per environment: two in one process (a test beside the demo) must not collide. */
  readonly #prefix = `anademo${process.pid}${environments++ > 0 ? `x${environments - 1}` : ''}`;
  readonly #subnet: string;
  readonly #podNames: string[];
  readonly #log: (line: string) => void;
  readonly #agentNodeArgs: string[];
  readonly #agentRuntime: { node: string; env: Record<string, string> };
  readonly #agentArgs: string[];
  readonly #runtimeKind: DemoRuntime;
  readonly #runDirOnTmpfs: boolean;
  #runDirMounted = false;
  #containerd: ContainerdRuntime | undefined;
  readonly #ztunnel: 'stand-in' | 'external';
  readonly #namespaces: string[] = [];
  #node: NetnsHandle | undefined;
  #agent: ChildProcess | undefined;
  #healthPort = 0;
  standIn: ZtunnelStandIn | undefined;
  #runtime: CniRuntime | undefined;

  constructor(options: DemoOptions = {}) {
    this.#podNames = options.podNames ?? ['web', 'api', 'db'];
    this.#subnet = `10.248.${options.subnet ?? 77}`;
    this.#log = options.log ?? (() => {});
    this.#agentNodeArgs = options.agentNodeArgs ?? [];
    this.#agentRuntime = options.agentRuntime ?? { node: process.execPath, env: {} };
    this.#ztunnel = options.ztunnel ?? 'stand-in';
    this.#agentArgs = options.agentArgs ?? [];
    this.#runtimeKind = options.runtime ?? 'cni';
    this.#runDirOnTmpfs = options.runDirOnTmpfs ?? false;
  }

  /** The node network namespace's file (a container runtime for the pods runs in it). */
  get nodeNetnsPath(): string {
    return `/var/run/netns/${this.#prefix}-node`;
  }

  /** The running agent process (startAgent), if any. */
  get agentPid(): number | undefined {
    return this.#agent?.pid;
  }

  get healthPort(): number {
    return this.#healthPort;
  }

  /** Node namespace, CNI config, agent, ztunnel stand-in: everything but the pods. */
  async setUp(): Promise<void> {
    const problem = await demoPrerequisitesFor(this.#runtimeKind);
    if (problem) throw new Error(problem);
    this.#log(`work dir ${this.workDir}`);
    this.#node = this.addon.openNetns(this.#createNamespace(`${this.#prefix}-node`));
    if (this.#runDirOnTmpfs) this.#mountRunDir();
    this.#writePrimaryConfig();
    await this.startAgent();
    if (this.#ztunnel === 'external') return;
    this.standIn = new ZtunnelStandIn({ socketPath: this.zdsSocket, addon: this.addon, log: (l) => this.#log(`ztunnel: ${l}`) }).start();
    await this.standIn.waitFor(() => this.standIn!.ready, 10_000, 'ztunnel stand-in connected and synced');
    this.#log('ztunnel stand-in connected to the agent (ZDS snapshot received)');
    if (this.#runtimeKind === 'containerd') await this.#startContainerd();
  }

  /** containerd in the node netns, reading the chained config; its one bin dir gets the plugins. */
  async #startContainerd(): Promise<void> {
    const { buildPauseImage, ContainerdRuntime } = await import('./containerd-runtime.js');
    for (const plugin of [...NEEDED_PLUGINS, 'loopback']) {
      const link = join(this.binDir, plugin);
      if (!existsSync(link)) symlinkSync(join(CNI_PLUGIN_DIR, plugin), link);
    }
    const dir = join(this.workDir, 'containerd');
    const image = buildPauseImage(join(dir, 'image'));
    this.#containerd = new ContainerdRuntime({
      dir,
      nodeNetns: this.nodeNetnsPath,
      cniBinDir: this.binDir,
      cniConfDir: this.confDir,
      netnsUnderStateDir: false,
    });
    await this.#containerd.start();
    this.#containerd.importImage(image);
    this.#log(`containerd running in the node namespace (CRI socket ${this.#containerd.socket}), pause image imported`);
  }

  /** The node's primary network: a bridge with host-local IPAM kept in the work dir. */
  #writePrimaryConfig(): void {
    mkdirSync(this.confDir, { recursive: true });
    const conflist = {
      cniVersion: '1.0.0',
      name: 'demo-net',
      plugins: [
        {
          type: 'bridge',
          bridge: `${this.#prefix}br`.slice(-15),
          isGateway: true,
          isDefaultGateway: true,
          ipMasq: false,
          ipam: {
            type: 'host-local',
            ranges: [[{ subnet: `${this.#subnet}.0/24`, gateway: `${this.#subnet}.1` }]],
            dataDir: join(this.workDir, 'ipam'),
          },
        },
      ],
    };
    writeFileSync(this.primaryConfig, `${JSON.stringify(conflist, null, 2)}\n`);
  }

  /** Starts `ambient-node-agent run --kube-mode none` as its own process and waits for /readyz. */
  async startAgent(): Promise<void> {
    this.#healthPort = await freePort();
    const main = join(projectRoot(), 'dist', 'src', 'cli', 'main.js');
    const args = [
      ...this.#agentNodeArgs,
      main,
      'run',
      '--kube-mode',
      'none',
      '--run-dir',
      this.runDir,
      '--cni-bin-dir',
      this.binDir,
      '--cni-conf-dir',
      this.confDir,
      '--zds-socket',
      this.zdsSocket,
      '--netns-root',
      '',
      '--proc-dir',
      '/proc',
      '--health-port',
      String(this.#healthPort),
      '--metrics-port',
      '0',
      '--exclude-namespaces',
      'kube-system',
      '--log-level',
      'info',
      ...this.#agentArgs,
    ];
    const logFile = createWriteStream(this.agentLog, { flags: 'a' });
    const agent = spawn(this.#agentRuntime.node, args, {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...this.#agentRuntime.env, PATH: process.env['PATH'] ?? '/usr/sbin:/usr/bin:/sbin:/bin' },
    });
    agent.stdout?.pipe(logFile);
    agent.stderr?.pipe(logFile);
    this.#agent = agent;
    await this.#waitReady(agent);
    this.#log(`agent running (pid ${agent.pid}); plugin installed and chained into ${this.primaryConfig}`);
  }

  async #waitReady(agent: ChildProcess): Promise<void> {
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline) {
      if (agent.exitCode !== null) throw new Error(`the agent exited with ${agent.exitCode}; see ${this.agentLog}`);
      const ok = await fetch(`http://127.0.0.1:${this.#healthPort}/readyz`).then(
        (r) => r.ok,
        () => false,
      );
      if (ok) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`the agent did not become ready within 20 s; see ${this.agentLog}`);
  }

  /** Stops the agent: SIGTERM (graceful) or SIGKILL (a crash). */
  async stopAgent(signal: 'SIGTERM' | 'SIGKILL' = 'SIGTERM'): Promise<void> {
    const agent = this.#agent;
    this.#agent = undefined;
    if (!agent || agent.exitCode !== null || agent.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => agent.once('exit', () => resolve()));
    agent.kill(signal);
    const timer = setTimeout(() => agent.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  }

  /** The CNI config as the runtime now reads it: the primary config with istio-cni chained last. */
  chainedConfig(): { plugins: Array<{ type: string }> } {
    return JSON.parse(readFileSync(this.primaryConfig, 'utf8')) as { plugins: Array<{ type: string }> };
  }

  #cni(): CniRuntime {
    this.#runtime ??= new CniRuntime({
      addon: this.addon,
      nodeNetns: this.#node!,
      pluginDirs: [this.binDir, CNI_PLUGIN_DIR],
      conflist: this.chainedConfig(),
      log: (l) => this.#log(`cni: ${l}`),
    });
    return this.#runtime;
  }

  /** Creates a pod the way a runtime does: a netns, then the chained CNI ADD (ours included). */
  async createPod(name: string, namespace = 'demo'): Promise<DemoPod> {
    if (this.#containerd) return this.#createSandbox(this.#containerd, name, namespace);
    const netnsPath = this.#createNamespace(`${this.#prefix}-${name}`);
    const uid = `00000000-demo-4000-8000-${String(this.pods.length + 1).padStart(12, '0')}`;
    const cni: CniPod = {
      containerId: `${this.#prefix}${name}`,
      netnsPath,
      args: { K8S_POD_NAME: name, K8S_POD_NAMESPACE: namespace, K8S_POD_INFRA_CONTAINER_ID: `${this.#prefix}${name}`, K8S_POD_UID: uid },
    };
    const result = await this.#cni().add(cni);
    const podIp = result.ips?.[0]?.address.split('/')[0] ?? '';
    const handle = this.addon.openNetns(netnsPath);
    const app = await EchoApp.start(this.addon, handle, { label: name });
    const pod: DemoPod = { name, uid, ip: podIp, netnsName: `${this.#prefix}-${name}`, netnsPath, handle, cni, app };
    this.pods.push(pod);
    this.standIn?.setDnsRecord(`${name}.demo`, podIp);
    return pod;
  }

  /** RunPodSandbox: containerd makes the netns and runs the chain; then an app in the sandbox netns. */
  async #createSandbox(containerd: ContainerdRuntime, name: string, namespace: string): Promise<DemoPod> {
    const uid = `00000000-demo-4000-8000-${String(this.pods.length + 1).padStart(12, '0')}`;
    const sandboxId = await containerd.runPodSandbox({ name, namespace, uid });
    const info = await containerd.sandboxInfo(sandboxId);
    const handle = this.addon.openNetns(info.netnsPath);
    const app = await EchoApp.start(this.addon, handle, { label: name });
    const pod: DemoPod = { name, uid, ip: info.ip, netnsName: '', netnsPath: info.netnsPath, handle, sandboxId, app };
    this.pods.push(pod);
    this.standIn?.setDnsRecord(`${name}.demo`, info.ip);
    return pod;
  }

  async createPods(onPod?: (pod: DemoPod) => void): Promise<DemoPod[]> {
    for (const name of this.#podNames) onPod?.(await this.createPod(name));
    return this.pods;
  }

  /** Each pod talks to the next one on :8080; the stand-in's events show the path taken. */
  async connectAll(onRow?: (row: ConnectionRow) => void): Promise<ConnectionRow[]> {
    const rows: ConnectionRow[] = [];
    for (const [i, from] of this.pods.entries()) {
      const to = this.pods[(i + 1) % this.pods.length]!;
      rows.push(await this.connect(from, to));
      onRow?.(rows.at(-1)!);
    }
    return rows;
  }

  async connect(from: DemoPod, to: DemoPod): Promise<ConnectionRow> {
    const before = this.standIn?.events.length ?? 0;
    const payload = `hello ${to.name} from ${from.name}\n`;
    const exchange = await tcpExchange(this.addon, from.handle, { address: to.ip, port: DEMO_APP_PORT, payload });
    const events = this.standIn?.events.slice(before) ?? [];
    const target = `${to.ip}:${DEMO_APP_PORT}`;
    return {
      from: from.name,
      to: to.name,
      outbound: events.find((e) => e.kind === 'outbound' && e.pod === from.name && e.originalDst === target),
      inbound: events.find((e) => e.kind === 'inbound' && e.pod === to.name && e.originalDst === target),
      peerSeenByApp: exchange.peerSeen,
      echoed: exchange.echoed === payload,
    };
  }

  /** Each pod resolves the next pod's name through the cluster DNS address (captured to 15053). */
  async resolveAll(onRow?: (row: DnsRow) => void): Promise<DnsRow[]> {
    const rows: DnsRow[] = [];
    for (const [i, pod] of this.pods.entries()) {
      const name = `${this.pods[(i + 1) % this.pods.length]!.name}.demo`;
      const before = this.standIn?.events.length ?? 0;
      const response = await dnsQuery(this.addon, pod.handle, { server: CLUSTER_DNS, name, transport: 'udp' });
      const event = this.standIn?.events.slice(before).find((e) => e.kind === 'dns' && e.pod === pod.name && e.name === name);
      rows.push({ pod: pod.name, name, answer: response.answers[0]?.data ?? 'NXDOMAIN', ...(event ? { event } : {}) });
      onRow?.(rows.at(-1)!);
    }
    return rows;
  }

  /** CNI DEL for one pod (our plugin tells the agent; the agent tells ztunnel). */
  async deletePod(pod: DemoPod): Promise<void> {
    await pod.app.close();
    if (pod.sandboxId && this.#containerd) {
      // As the kubelet: StopPodSandbox (CNI DEL), then RemovePodSandbox (DEL again, a no-op).
      pod.handle.close();
      await this.#containerd.stopPodSandbox(pod.sandboxId);
      await this.#containerd.removePodSandbox(pod.sandboxId);
    } else if (pod.cni) {
      await this.#cni().del(pod.cni);
      pod.handle.close();
      this.#deleteNamespace(pod.netnsName);
    }
    this.pods.splice(this.pods.indexOf(pod), 1);
  }

  /** Undoes everything; safe to call twice and after a partial set-up. */
  async tearDown(): Promise<void> {
    for (const pod of [...this.pods])
      await this.deletePod(pod).catch((err: unknown) => this.#log(`cleanup ${pod.name}: ${(err as Error).message}`));
    await this.#containerd?.stop().catch((err: unknown) => this.#log(`cleanup containerd: ${(err as Error).message}`));
    this.#containerd = undefined;
    await this.standIn?.stop().catch(() => undefined);
    this.standIn = undefined;
    await this.stopAgent('SIGTERM').catch(() => undefined);
    this.#node?.close();
    this.#node = undefined;
    for (const name of [...this.#namespaces]) this.#deleteNamespace(name);
    this.#unmountRunDir();
    if (!process.env['DEMO_KEEP_WORKDIR']) rmSync(this.workDir, { recursive: true, force: true });
  }

  #mountRunDir(): void {
    mkdirSync(this.runDir, { recursive: true });
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64m,mode=0755', 'ana-demo-run', this.runDir], { stdio: 'ignore' });
    this.#runDirMounted = true;
  }

  #unmountRunDir(): void {
    if (!this.#runDirMounted) return;
    try {
      execFileSync('umount', [this.runDir], { stdio: 'ignore' });
      this.#runDirMounted = false;
    } catch (err) {
      this.#log(`cleanup: umount ${this.runDir}: ${(err as Error).message}`);
    }
  }

  #createNamespace(name: string): string {
    this.#namespaces.push(name);
    ip(['netns', 'add', name]);
    ip(['-n', name, 'link', 'set', 'lo', 'up']);
    return `/var/run/netns/${name}`;
  }

  #deleteNamespace(name: string): void {
    const i = this.#namespaces.indexOf(name);
    if (i >= 0) this.#namespaces.splice(i, 1);
    try {
      ip(['netns', 'del', name]);
    } catch {
      // already gone
    }
  }
}
