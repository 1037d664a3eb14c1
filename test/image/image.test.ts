// Smoke test of the built image (`npm run test:image`, root, podman): the container starts the way
// Istio's chart (manifests/charts/istio-cni at 86c9f01f, ambient enabled, every value at its
// default) starts istio-cni-node: command install-cni with the chart's args, the chart's
// ConfigMap and env, the five capabilities and nothing else, its pod network (no hostNetwork:
// here a network namespace of its own with only lo), and the chart's mounts as temporary dirs
// (/host/proc a fake proc dir whose 1/ns/net is a throw-away "node" netns). Against a fake
// ztunnel on the mounted ZDS socket it must install the plugin into the mounted bin dir, chain it
// into the mounted CNI config as Istio's installer would, answer /readyz, serve nothing else on
// the network, and stop cleanly on SIGTERM (exit 0, the CNI config entry kept for the next agent).
//
// AMBIENT_IMAGE names the image (default localhost/ambient-node-agent:dev); CONTAINERS_CONF and
// the rest of podman's environment pass through.
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeZtunnel } from '../helpers/fake-ztunnel.js';
import { istioChartEnv } from '../helpers/istio-chart-env.js';

const IMAGE = process.env['AMBIENT_IMAGE'] || 'localhost/ambient-node-agent:dev';
const run = promisify(execFile);

async function podman(args: string[], timeoutMs = 60_000): Promise<string> {
  try {
    return (await run('podman', args, { timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024 })).stdout;
  } catch (err) {
    const e = err as Error & { stderr?: string };
    throw new Error(`podman ${args.slice(0, 3).join(' ')} ...: ${e.stderr?.trim() || e.message}`, { cause: err });
  }
}

/** Runs a JavaScript snippet with the image's Node inside the running container. */
const inContainer = (name: string, script: string): Promise<string> => podman(['exec', name, 'node', '-e', script]);
const httpGet = (name: string, port: number, path: string): Promise<string> =>
  inContainer(
    name,
    `fetch('http://127.0.0.1:${port}${path}').then(async (r) => console.log(r.status + ' ' + (await r.text()).trim().split('\\n')[0]), (e) => console.log('0 ' + e.message))`,
  ).then((s) => s.trim());

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

// The chart's default values with ambient on (test/helpers/istio-chart-env.ts).
const CHART_ENV = istioChartEnv({ POD_NAME: 'istio-cni-node-smoke' });

const PRIMARY = {
  cniVersion: '1.0.0',
  name: 'k8s-pod-network',
  plugins: [
    { type: 'bridge', bridge: 'cni0', ipam: { type: 'host-local', subnet: '10.88.0.0/16' } },
    { type: 'portmap', capabilities: { portMappings: true } },
  ],
};

describe(`the image ${IMAGE}`, () => {
  const id = randomBytes(3).toString('hex');
  const name = `ana-image-${id}`;
  const nodeNetns = `ana-image-${id}`;
  let dir: string;
  const path = (p: string): string => join(dir, p);
  let started = false;

  beforeAll(async () => {
    if (process.getuid?.() !== 0) throw new Error('npm run test:image needs root (rootful podman, a network namespace, a bind mount)');
    await podman(['image', 'exists', IMAGE]).catch(() => {
      throw new Error(`image ${IMAGE} not found: build it first (README, "The image"), or set AMBIENT_IMAGE`);
    });
    dir = mkdtempSync(join(tmpdir(), 'ana-image-'));
    for (const d of ['opt-cni-bin', 'net.d', 'run-istio-cni', 'netns', 'ztunnel', 'proc/1/ns']) mkdirSync(path(d), { recursive: true });
    writeFileSync(path('net.d/10-bridge.conflist'), `${JSON.stringify(PRIMARY, null, 2)}\n`, { mode: 0o644 });
    // The "node" network namespace the fake proc dir points at (ALLOW_SWITCH_TO_HOST_NS).
    await run('ip', ['netns', 'add', nodeNetns]);
    closeSync(openSync(path('proc/1/ns/net'), 'w'));
    await run('mount', ['--bind', `/var/run/netns/${nodeNetns}`, path('proc/1/ns/net')]);
  });

  afterAll(async () => {
    if (started) await podman(['rm', '-f', '-t', '0', name]).catch(() => undefined);
    if (dir) {
      await run('umount', [path('proc/1/ns/net')]).catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    }
    await run('ip', ['netns', 'del', nodeNetns]).catch(() => undefined);
  });

  it("has Istio's layout, Node 24, and no npm, yarn, corepack or Node headers", async () => {
    const script = `
      const fs = require('fs');
      const exists = (p) => { try { fs.lstatSync(p); return true; } catch { return false; } };
      const onPath = (b) => process.env.PATH.split(':').filter((d) => exists(d + '/' + b));
      console.log(JSON.stringify({
        node: process.version,
        nodeOptions: process.env.NODE_OPTIONS,
        malloc: [process.env.MALLOC_ARENA_MAX, process.env.MALLOC_TRIM_THRESHOLD_, process.env.MALLOC_MMAP_THRESHOLD_],
        installCni: fs.realpathSync('/usr/local/bin/install-cni'),
        plugin: (fs.statSync('/opt/cni/bin/istio-cni').mode & 0o777).toString(8),
        tools: ['npm', 'npx', 'corepack', 'yarn', 'yarnpkg'].flatMap(onPath),
        leftovers: ['/usr/local/lib/node_modules', '/usr/local/include/node', ...fs.readdirSync('/opt').map((d) => '/opt/' + d).filter((p) => /yarn/.test(p))].filter(exists),
      }));`;
    const out = JSON.parse(await podman(['run', '--rm', '--network', 'none', '--entrypoint', 'node', IMAGE, '-e', script])) as Record<
      string,
      unknown
    >;
    expect(out).toEqual({
      node: expect.stringMatching(/^v24\./),
      nodeOptions: '--max-semi-space-size=4',
      malloc: ['2', '131072', '131072'],
      installCni: '/app/dist/src/cli/main.js',
      plugin: '755',
      tools: [],
      leftovers: [],
    });
    expect((await podman(['image', 'inspect', '--format', '{{len .RootFS.Layers}}', IMAGE])).trim()).toBe('1');
    const help = await podman(['run', '--rm', '--network', 'none', IMAGE, 'install-cni', '--help']);
    for (const word of ['--log_output_level', '--log_as_json', ...Object.keys(CHART_ENV)]) expect(help).toContain(word);
  });

  it("ships V8's code for the agent's modules: a start compiles none of them", async () => {
    const { stderr } = await run(
      'podman',
      ['run', '--rm', '--network', 'none', '-e', 'NODE_DEBUG_NATIVE=COMPILE_CACHE', IMAGE, 'install-cni', '--help'],
      {
        timeout: 60_000,
        maxBuffer: 64 * 1024 * 1024,
      },
    );
    // Node's own report per module: "V8 code cache for ESM file:///app/... was accepted, ..."
    const verdicts = [...stderr.matchAll(/V8 code cache for \S+ (file:\/\/\/app\/\S+) (.+)$/gm)].map((m) => `${m[1]} ${m[2]}`);
    expect(verdicts.length).toBeGreaterThan(3);
    expect(verdicts.filter((v) => !v.includes(' was accepted'))).toEqual([]);
    expect(verdicts.some((v) => v.startsWith('file:///app/dist/src/cli/install-cni-command.js '))).toBe(true);
  });

  it("starts as Istio's chart starts it, installs and chains the plugin, serves ztunnel, is ready, and stops cleanly", async () => {
    const mounts = [
      ['opt-cni-bin', '/host/opt/cni/bin'],
      ['proc', '/host/proc', 'ro'],
      ['net.d', '/host/etc/cni/net.d'],
      ['run-istio-cni', '/var/run/istio-cni'],
      ['netns', '/host/var/run/netns', 'rslave'], // mountPropagation: HostToContainer
      ['ztunnel', '/var/run/ztunnel'],
    ].flatMap(([from, to, opt]) => ['-v', `${path(from!)}:${to}${opt ? `:${opt}` : ''}`]);
    const env = Object.entries(CHART_ENV).flatMap(([k, v]) => ['-e', `${k}=${v}`]);
    await podman([
      'run',
      '-d',
      '--name',
      name,
      '--network',
      'none',
      '--user',
      '0:0',
      '--cap-drop',
      'ALL',
      '--cap-add',
      'NET_ADMIN,NET_RAW,SYS_PTRACE,SYS_ADMIN,DAC_OVERRIDE',
      ...mounts,
      ...env,
      '--entrypoint',
      '["install-cni"]',
      IMAGE,
      '--log_output_level=info',
    ]);
    started = true;

    // Ready: the plugin is installed and chained, ZDS listens (no ztunnel needed, as Istio).
    expect(await until('/readyz 200', async () => ((await httpGet(name, 8000, '/readyz')).startsWith('200') ? true : undefined))).toBe(
      true,
    );
    expect(await httpGet(name, 8000, '/healthz')).toBe('200 ok');
    expect(await httpGet(name, 15014, '/metrics')).toMatch(/^200 /);
    for (const p of ['/debug/pods', '/metrics']) expect(await httpGet(name, 8000, p)).toMatch(/^404 /);
    expect(await httpGet(name, 15014, '/readyz')).toMatch(/^404 /);

    // The plugin, byte for byte the image's, in the mounted bin dir.
    const digest = (await podman(['exec', name, 'sha256sum', '/opt/cni/bin/istio-cni'])).split(' ')[0];
    expect(
      createHash('sha256')
        .update(readFileSync(path('opt-cni-bin/istio-cni')))
        .digest('hex'),
    ).toBe(digest);
    expect(statSync(path('opt-cni-bin/istio-cni')).mode & 0o111).not.toBe(0);

    // Chained last into the mounted primary config, as Istio's installer writes the entry.
    const conf = JSON.parse(readFileSync(path('net.d/10-bridge.conflist'), 'utf8')) as { plugins: Array<Record<string, unknown>> };
    expect(conf.plugins.map((p) => p['type'])).toEqual(['bridge', 'portmap', 'istio-cni']);
    expect(conf.plugins[2]).toEqual({
      ambient_enabled: true,
      cni_agent_run_dir: '/var/run/istio-cni',
      dns: {},
      enable_ambient_detection_retry: false,
      enablement_selectors: [
        { namespaceSelector: {}, podSelector: { matchLabels: { 'istio.io/dataplane-mode': 'ambient' } } },
        {
          namespaceSelector: { matchLabels: { 'istio.io/dataplane-mode': 'ambient' } },
          podSelector: { matchExpressions: [{ key: 'istio.io/dataplane-mode', operator: 'NotIn', values: ['none'] }] },
        },
      ],
      exclude_namespaces: ['kube-system'],
      ipam: {},
      name: 'istio-cni',
      native_nftables: false,
      plugin_log_level: 'info',
      pod_namespace: 'istio-system',
      type: 'istio-cni',
    });

    // ztunnel connects over the mounted socket and gets its (empty) snapshot.
    const ztunnel = await FakeZtunnel.connect(path('ztunnel/ztunnel.sock'));
    await ztunnel.waitFor(() => ztunnel.snapshotSent);
    ztunnel.close();

    // The root-only sockets in the mounted run dir, and the debug endpoint only there.
    for (const s of ['pluginevent.sock', 'log.sock', 'debug.sock'])
      expect((statSync(path(`run-istio-cni/${s}`)).mode & 0o777).toString(8), s).toBe('600');
    expect(JSON.parse(await podman(['exec', name, 'ambient-node-agent', 'pods', '--json']))).toMatchObject({
      mode: 'standalone',
      ready: true,
      pods: [],
    });

    // SIGTERM (the kubelet's stop): exit 0 within the grace period, the config entry kept.
    await podman(['stop', '-t', '15', name]);
    expect((await podman(['inspect', '--format', '{{.State.ExitCode}}', name])).trim()).toBe('0');
    expect(readFileSync(path('net.d/10-bridge.conflist'), 'utf8')).toContain('"type": "istio-cni"');

    // Istio's console log lines (no --log_as_json), nothing at warn or above.
    const logs = (await run('podman', ['logs', name], { maxBuffer: 64 * 1024 * 1024 })).stdout.trim().split('\n');
    expect(logs.length).toBeGreaterThan(3);
    for (const line of logs)
      expect(line).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z\t(debug|info)\t(cni-agent|cni-plugin|default)\t/);
    expect(logs.some((l) => /\tdefault\tstopping/.test(l))).toBe(true);
  });
});
