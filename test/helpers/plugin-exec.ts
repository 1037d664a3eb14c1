// Runs the built istio-cni plugin binary the way a container runtime does: argv only (no
// shell), CNI_* in the environment, the network config as JSON on stdin.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pluginEntry } from '../../src/cni-install/plugin-config.js';
import { projectRoot } from '../../src/project-root.js';

/** AMBIENT_CNI_PLUGIN selects another build (npm run test:asan: the sanitizer build in build-asan/). */
export const PLUGIN_BINARY = process.env['AMBIENT_CNI_PLUGIN']
  ? resolve(process.env['AMBIENT_CNI_PLUGIN'])
  : join(projectRoot(import.meta.url), 'build', 'Release', 'istio-cni');
/** Runtime options of a sanitizer build (no effect on the normal static binary), passed on when set. */
const SANITIZER_ENV = ['ASAN_OPTIONS', 'UBSAN_OPTIONS', 'LSAN_OPTIONS'] as const;

/** The binary path, or a clear failure telling how to build it. */
export function requirePluginBinary(): string {
  if (!existsSync(PLUGIN_BINARY)) {
    throw new Error(`istio-cni plugin binary not built: ${PLUGIN_BINARY} is missing; run \`npm run build\` (or \`npx node-gyp rebuild\`)`);
  }
  return PLUGIN_BINARY;
}

export interface PodArgs {
  name?: string;
  namespace?: string;
  uid?: string;
  infraContainerId?: string;
}

/** CNI_ARGS as kubelet/containerd send them. */
export function cniArgs(pod: PodArgs, extra: string[] = ['IgnoreUnknown=1']): string {
  const pairs = [...extra];
  if (pod.namespace !== undefined) pairs.push(`K8S_POD_NAMESPACE=${pod.namespace}`);
  if (pod.name !== undefined) pairs.push(`K8S_POD_NAME=${pod.name}`);
  if (pod.infraContainerId !== undefined) pairs.push(`K8S_POD_INFRA_CONTAINER_ID=${pod.infraContainerId}`);
  if (pod.uid !== undefined) pairs.push(`K8S_POD_UID=${pod.uid}`);
  return pairs.join(';');
}

export interface PluginRun {
  status: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  elapsedMs: number;
}

/**
 * Spawns the plugin with exactly `env` (plus PATH and any sanitizer options), never the test's
 * own environment, so no stray CNI_* variable leaks in. `stdin` objects are JSON-encoded; strings
 * are sent verbatim.
 */
export function runPlugin(env: Record<string, string | undefined>, stdin: unknown): Promise<PluginRun> {
  const binary = requirePluginBinary();
  const childEnv: Record<string, string> = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
  for (const k of SANITIZER_ENV) if (process.env[k] !== undefined) childEnv[k] = process.env[k]!;
  for (const [k, v] of Object.entries(env)) if (v !== undefined) childEnv[k] = v;
  const input = typeof stdin === 'string' ? stdin : JSON.stringify(stdin);
  return new Promise((resolve, reject) => {
    const start = process.hrtime.bigint();
    const child = spawn(binary, [], { env: childEnv, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.on('error', reject);
    child.on('close', (status, signal) =>
      resolve({ status, signal, stdout, stderr, elapsedMs: Number(process.hrtime.bigint() - start) / 1e6 }),
    );
    // The plugin may exit before reading stdin (VERSION): ignore EPIPE then.
    child.stdin.on('error', () => {});
    child.stdin.end(input);
  });
}

/** stdout parsed as the single JSON document the plugin must print. */
export function stdoutJson(run: PluginRun): Record<string, unknown> {
  const text = run.stdout.trim();
  if (text.includes('\n')) throw new Error(`expected one JSON line on stdout, got:\n${run.stdout}`);
  return JSON.parse(text) as Record<string, unknown>;
}

/**
 * What our installer writes for the plugin (pluginEntry, Istio's cniconfig.go) with an ambient
 * enablement selector, as the single conf a runtime hands the plugin.
 */
export function netconf(runDir: string, overrides: Record<string, unknown> = {}): Record<string, unknown> {
  const entry = pluginEntry({
    runDir,
    excludeNamespaces: ['kube-system'],
    ambientEnabled: true,
    podNamespace: 'istio-system',
    logLevel: 'info',
    enablementSelectors: [{ podSelector: { matchLabels: { 'istio.io/dataplane-mode': 'ambient' } } }],
    nativeNftables: true,
    enableAmbientDetectionRetry: false,
  });
  return { cniVersion: '1.0.0', ...entry, ...overrides };
}
