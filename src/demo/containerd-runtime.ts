// A real containerd (Debian's 1.6, its CRI plugin, runc) for `demo --runtime containerd` and the
// end-to-end test, driven over CRI like the kubelet: its own root, state and socket under a temp
// dir, started inside the node netns (nsenter --net only: the pod netns bind mounts must stay
// visible in our mount namespace), a pause image built from test/fixtures/cri/pause.c and
// imported with `ctr`. The CRI client (@grpc/grpc-js) is a dev dependency: this module is loaded
// only in that mode, from a checkout (scripts/demo.sh), never by the agent.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

import { projectRoot } from '../project-root.js';

const CRI_FIXTURES = join(projectRoot(), 'test', 'fixtures', 'cri');
const CRI_PROTO = join(CRI_FIXTURES, 'api.proto');
const PAUSE_SOURCE = join(CRI_FIXTURES, 'pause.c');
export const PAUSE_IMAGE = 'localhost/ana-demo-pause:1';
const RPC_DEADLINE_MS = 30_000;
/** What the tools get: a PATH, nothing of ours (no LD_PRELOAD of a sanitizer run, no NODE_OPTIONS). */
const TOOL_ENV = { PATH: process.env['PATH'] ?? '/usr/sbin:/usr/bin:/sbin:/bin' };

/** Why containerd cannot be run here, or undefined. */
export function containerdPrerequisites(): string | undefined {
  if (!existsSync(CRI_PROTO) || !existsSync(PAUSE_SOURCE)) return `${CRI_FIXTURES} is missing (a checkout of the repository is needed)`;
  for (const tool of [
    '/usr/bin/containerd',
    '/usr/bin/ctr',
    '/usr/bin/containerd-shim-runc-v2',
    '/usr/sbin/runc',
    '/usr/bin/nsenter',
    '/usr/bin/gcc',
    '/usr/bin/tar',
  ]) {
    if (!existsSync(tool)) return `${tool} is missing (apt-get install containerd runc gcc)`;
  }
  return undefined;
}

/** Compiles the pause program statically and writes a docker-archive tar of a one-layer image. */
export function buildPauseImage(dir: string): string {
  const layerDir = join(dir, 'layer');
  mkdirSync(layerDir, { recursive: true });
  execFileSync('gcc', ['-static', '-Os', '-o', join(layerDir, 'pause'), PAUSE_SOURCE], { env: TOOL_ENV });
  const imageDir = join(dir, 'image');
  mkdirSync(imageDir, { recursive: true });
  const layer = join(imageDir, 'layer.tar');
  execFileSync('tar', ['--numeric-owner', '--owner=0', '--group=0', '--mtime=@0', '-C', layerDir, '-cf', layer, 'pause'], {
    env: TOOL_ENV,
  });
  const diffId = `sha256:${createHash('sha256').update(readFileSync(layer)).digest('hex')}`;
  const architecture = process.arch === 'x64' ? 'amd64' : process.arch;
  const config = { architecture, os: 'linux', config: { Entrypoint: ['/pause'] }, rootfs: { type: 'layers', diff_ids: [diffId] } };
  writeFileSync(join(imageDir, 'config.json'), JSON.stringify(config));
  writeFileSync(
    join(imageDir, 'manifest.json'),
    JSON.stringify([{ Config: 'config.json', RepoTags: [PAUSE_IMAGE], Layers: ['layer.tar'] }]),
  );
  const archive = join(dir, 'pause-image.tar');
  execFileSync('tar', ['-C', imageDir, '-cf', archive, 'manifest.json', 'config.json', 'layer.tar'], { env: TOOL_ENV });
  return archive;
}

export interface ContainerdOptions {
  /** Everything containerd writes goes below this directory. */
  dir: string;
  /** The node netns file containerd (and so the CNI plugins it runs) lives in. */
  nodeNetns: string;
  cniBinDir: string;
  cniConfDir: string;
  /** containerd's `netns_mounts_under_state_dir`. */
  netnsUnderStateDir: boolean;
}

export interface SandboxSpec {
  name: string;
  namespace: string;
  uid: string;
}

export interface SandboxInfo {
  ip: string;
  /** The netns path containerd gave the CNI chain (from the sandbox's runtime spec). */
  netnsPath: string;
  state: string;
}

type Callback = (err: grpc.ServiceError | null, res: unknown) => void;
type RuntimeClient = grpc.Client & Record<string, (req: unknown, options: grpc.CallOptions, cb: Callback) => void>;

function runtimeServiceClient(socket: string): RuntimeClient {
  const definition = protoLoader.loadSync(CRI_PROTO, { longs: String, enums: String, defaults: true, oneofs: true });
  const loaded = grpc.loadPackageDefinition(definition) as unknown as {
    runtime: { v1: { RuntimeService: grpc.ServiceClientConstructor } };
  };
  return new loaded.runtime.v1.RuntimeService(`unix://${socket}`, grpc.credentials.createInsecure()) as unknown as RuntimeClient;
}

export class ContainerdRuntime {
  readonly root: string;
  readonly state: string;
  readonly socket: string;
  readonly log: string;
  /** Where containerd mounts pod netns files when netnsUnderStateDir is set. */
  readonly stateNetnsDir: string;
  #process: ChildProcess | undefined;
  #client: RuntimeClient | undefined;
  readonly #sandboxes = new Set<string>();

  constructor(private readonly options: ContainerdOptions) {
    this.root = join(options.dir, 'root');
    this.state = join(options.dir, 'state');
    this.socket = join(options.dir, 'containerd.sock');
    this.log = join(options.dir, 'containerd.log');
    this.stateNetnsDir = join(this.state, 'io.containerd.grpc.v1.cri', 'netns');
  }

  #config(): string {
    const cri = 'plugins."io.containerd.grpc.v1.cri"';
    return [
      'version = 2',
      `root = ${JSON.stringify(this.root)}`,
      `state = ${JSON.stringify(this.state)}`,
      // Snapshotters and services nothing here uses stay off (no probing of the machine).
      'disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]',
      '[grpc]',
      `  address = ${JSON.stringify(this.socket)}`,
      '[ttrpc]',
      `  address = ${JSON.stringify(`${this.socket}.ttrpc`)}`,
      '[plugins."io.containerd.internal.v1.opt"]',
      `  path = ${JSON.stringify(join(this.options.dir, 'opt'))}`,
      `[${cri}]`,
      `  sandbox_image = ${JSON.stringify(PAUSE_IMAGE)}`,
      // runc cannot raise oom_score_adj here: root lacks CAP_SYS_RESOURCE in this machine's container.
      '  restrict_oom_score_adj = true',
      // The pause sandbox needs no AppArmor profile, and loading containerd's default one would
      // need apparmor_parser on machines with AppArmor on (Debian's default).
      '  disable_apparmor = true',
      `  netns_mounts_under_state_dir = ${this.options.netnsUnderStateDir}`,
      '  stream_server_address = "127.0.0.1"',
      '  stream_server_port = "0"',
      `[${cri}.containerd]`,
      '  snapshotter = "overlayfs"',
      '  default_runtime_name = "runc"',
      `[${cri}.containerd.runtimes.runc]`,
      '  runtime_type = "io.containerd.runc.v2"',
      `[${cri}.cni]`,
      `  bin_dir = ${JSON.stringify(this.options.cniBinDir)}`,
      `  conf_dir = ${JSON.stringify(this.options.cniConfDir)}`,
      '  max_conf_num = 1',
      '',
    ].join('\n');
  }

  async start(): Promise<void> {
    mkdirSync(this.options.dir, { recursive: true });
    const configPath = join(this.options.dir, 'config.toml');
    writeFileSync(configPath, this.#config());
    const out = openSync(this.log, 'a');
    this.#process = spawn('nsenter', [`--net=${this.options.nodeNetns}`, 'containerd', '--config', configPath, '--log-level', 'warn'], {
      stdio: ['ignore', out, out],
      env: TOOL_ENV,
    });
    closeSync(out); // the child has its own copy
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline) {
      if (this.#process.exitCode !== null) throw new Error(`containerd exited with ${this.#process.exitCode}: ${this.logTail()}`);
      if (existsSync(this.socket)) {
        this.#client ??= runtimeServiceClient(this.socket);
        const ok = await this.#call('Version', {}, 2_000).then(
          () => true,
          () => false,
        );
        if (ok) return;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`containerd did not serve CRI within 20 s: ${this.logTail()}`);
  }

  logTail(): string {
    return existsSync(this.log) ? readFileSync(this.log, 'utf8').split('\n').slice(-15).join('\n') : '(no log)';
  }

  importImage(archive: string): void {
    execFileSync('ctr', ['--address', this.socket, '-n', 'k8s.io', 'images', 'import', archive], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: TOOL_ENV,
    });
  }

  #call(method: string, request: unknown, timeoutMs = RPC_DEADLINE_MS): Promise<Record<string, unknown>> {
    const client = this.#client;
    if (!client) return Promise.reject(new Error('containerd is not started'));
    return new Promise((resolve, reject) => {
      client[method]!.call(client, request, { deadline: Date.now() + timeoutMs }, (err, res) =>
        err ? reject(err) : resolve(res as Record<string, unknown>),
      );
    });
  }

  /** RunPodSandbox; resolves with the sandbox id once the CNI chain (ours included) succeeded. */
  async runPodSandbox(pod: SandboxSpec): Promise<string> {
    const config = {
      metadata: { name: pod.name, namespace: pod.namespace, uid: pod.uid, attempt: 0 },
      hostname: pod.name,
      linux: { securityContext: { namespaceOptions: { network: 'POD', pid: 'CONTAINER', ipc: 'POD' } } },
    };
    const res = await this.#call('RunPodSandbox', { config });
    const id = res['podSandboxId'] as string;
    this.#sandboxes.add(id);
    return id;
  }

  async sandboxInfo(id: string): Promise<SandboxInfo> {
    const res = await this.#call('PodSandboxStatus', { podSandboxId: id, verbose: true });
    const status = res['status'] as { state: string; network?: { ip?: string } };
    const info = JSON.parse((res['info'] as Record<string, string>)['info'] ?? '{}') as {
      runtimeSpec?: { linux?: { namespaces?: Array<{ type: string; path?: string }> } };
    };
    const netnsPath = info.runtimeSpec?.linux?.namespaces?.find((n) => n.type === 'network')?.path ?? '';
    return { ip: status.network?.ip ?? '', netnsPath, state: status.state };
  }

  async stopPodSandbox(id: string): Promise<void> {
    await this.#call('StopPodSandbox', { podSandboxId: id });
  }

  async removePodSandbox(id: string): Promise<void> {
    await this.#call('RemovePodSandbox', { podSandboxId: id });
    this.#sandboxes.delete(id);
  }

  /** Removes every sandbox still there (their shims exit with them), then stops containerd. */
  async stop(): Promise<void> {
    if (this.#client) {
      const listed = await this.#call('ListPodSandbox', {}).catch(() => ({ items: [] }));
      const ids = new Set([...this.#sandboxes, ...((listed['items'] as Array<{ id: string }> | undefined) ?? []).map((s) => s.id)]);
      for (const id of ids) {
        await this.stopPodSandbox(id).catch(() => undefined);
        await this.removePodSandbox(id).catch(() => undefined);
      }
      this.#client.close();
      this.#client = undefined;
    }
    const proc = this.#process;
    this.#process = undefined;
    if (proc && proc.exitCode === null && proc.signalCode === null) {
      const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
      proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    }
    this.#unmountLeftovers();
  }

  /** Mounts containerd left below its dir (a crash mid-test): lazily unmounted, deepest first. */
  #unmountLeftovers(): void {
    const prefix = `${this.options.dir}/`;
    const mounts = readFileSync('/proc/self/mountinfo', 'utf8')
      .split('\n')
      .map((line) => line.split(' ')[4] ?? '')
      .filter((target) => target.startsWith(prefix))
      .sort((a, b) => b.length - a.length);
    for (const target of mounts) {
      try {
        execFileSync('umount', ['-l', target], { stdio: 'ignore', env: TOOL_ENV });
      } catch {
        // already gone
      }
    }
  }
}
