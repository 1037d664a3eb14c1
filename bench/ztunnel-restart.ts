// Bench phase "ztunnel-restart" (issue 17): N pods being created while ztunnel restarts. The
// same N concurrent chained ADDs run twice: once with ztunnel healthy (the reference), once with
// the ztunnel stand-in stopped right before they start and a new one connecting BENCH_ZTUNNEL_GAP_MS
// after the first of them reached the agent (a rollout or crash-restart); N is BENCH_ZTUNNEL_RESTART_PODS (default 30). Measured: failed ADDs (target 0), the ADD latency of both
// runs (what the restart added), and what the agent reports (its wait histogram, the gap line).
// Runs alone with BENCH_PHASES=ztunnel-restart.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { CNI_PLUGIN_DIR, type DemoEnvironment } from '../src/demo/environment.js';
import { stateFileName, STATE_DIR } from '../src/standalone/state-store.js';
import type { BenchPod, BenchPods } from './node-support.js';
import { summarize, type Summary } from './support.js';

const DEFAULT_PODS = 30;
const DEFAULT_GAP_MS = 1000;

function readPods(): number {
  const raw = process.env['BENCH_ZTUNNEL_RESTART_PODS'];
  const n = raw === undefined ? DEFAULT_PODS : Number(raw);
  if (!Number.isInteger(n) || n < 1 || n > 200) throw new Error(`BENCH_ZTUNNEL_RESTART_PODS must be 1-200, got ${JSON.stringify(raw)}`);
  return n;
}

export type ChainPart = 'chain' | 'istio-cni';

export interface ZtunnelRestartResult {
  /**
   * The full chain (the runtime process runs every ADD at once, a netns thread per plugin exec),
   * or our plugin alone, exec'd directly for every pod at once (it touches no netns).
   */
  only: ChainPart;
  pods: number;
  gapMs: number;
  healthy: { wallMs: number; perPod: Summary; failed: number };
  restart: { wallMs: number; perPod: Summary | undefined; failed: number; firstError: string | undefined };
  /** The agent's ambient_node_agent_ztunnel_wait_seconds over the restart run. */
  waited: { count: number; meanMs: number; failed: number };
  /** The agent's "ztunnel gone for N ms, M pods waited, ..." line. */
  gapLine: string | undefined;
}

function readGapMs(): number {
  const raw = process.env['BENCH_ZTUNNEL_GAP_MS'];
  const ms = raw === undefined ? DEFAULT_GAP_MS : Number(raw);
  if (!Number.isFinite(ms) || ms < 0) throw new Error(`BENCH_ZTUNNEL_GAP_MS must be a number of ms, got ${JSON.stringify(raw)}`);
  return ms;
}

interface WaitCounters {
  enrolled: { count: number; sum: number };
  failed: { count: number; sum: number };
}

async function scrapeWaits(port: number): Promise<WaitCounters> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const value = (series: string, result: string): number => {
    const line = text
      .split('\n')
      .find((l) => l.startsWith(`ambient_node_agent_ztunnel_wait_seconds_${series}{`) && l.includes(`result="${result}"`));
    return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : 0;
  };
  return {
    enrolled: { count: value('count', 'enrolled'), sum: value('sum', 'enrolled') },
    failed: { count: value('count', 'failed'), sum: value('sum', 'failed') },
  };
}

type AddRun = { wallMs: number; results: Array<{ ms: number } | { error: string }> };

/** Our plugin's ADD for every pod at once, as the last entry of the chain with bridge's result. */
async function ourPluginAdds(env: DemoEnvironment, batch: BenchPod[]): Promise<AddRun> {
  const list = env.chainedConfig() as unknown as { cniVersion: string; name: string; plugins: Array<Record<string, unknown>> };
  const entry = list.plugins.find((p) => p['type'] === 'istio-cni');
  if (!entry) throw new Error('istio-cni is not chained');
  const start = process.hrtime.bigint();
  const results = await Promise.all(
    batch.map(async (pod, i) => {
      pod.added = true;
      const t = process.hrtime.bigint();
      const prevResult = {
        cniVersion: '1.0.0',
        interfaces: [{ name: 'eth0', sandbox: pod.cni.netnsPath }],
        ips: [{ address: `10.252.0.${i + 2}/16`, interface: 0 }],
      };
      const conf = JSON.stringify({ ...entry, cniVersion: list.cniVersion, name: list.name, prevResult });
      const error = await execPlugin(env, pod, conf);
      return error === undefined ? { ms: Number(process.hrtime.bigint() - t) / 1e6 } : { error };
    }),
  );
  return { wallMs: Number(process.hrtime.bigint() - start) / 1e6, results };
}

/** Resolves with the plugin's error (its stdout) or undefined on success. */
function execPlugin(env: DemoEnvironment, pod: BenchPod, conf: string): Promise<string | undefined> {
  const cniArgs = ['IgnoreUnknown=1', ...Object.entries(pod.cni.args).map(([k, v]) => `${k}=${v}`)].join(';');
  const childEnv = {
    PATH: '/usr/sbin:/usr/bin:/sbin:/bin',
    CNI_COMMAND: 'ADD',
    CNI_CONTAINERID: pod.cni.containerId,
    CNI_NETNS: pod.cni.netnsPath,
    CNI_IFNAME: 'eth0',
    CNI_ARGS: cniArgs,
    CNI_PATH: `${env.binDir}:${CNI_PLUGIN_DIR}`,
  };
  return new Promise((resolve, reject) => {
    const child = spawn(join(env.binDir, 'istio-cni'), [], { env: childEnv, stdio: ['pipe', 'pipe', 'ignore'] });
    let stdout = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.once('error', reject);
    child.once('close', (code) => resolve(code === 0 ? undefined : stdout.trim() || `exit ${code}`));
    child.stdin.end(conf);
  });
}

function adds(env: DemoEnvironment, pods: BenchPods, batch: BenchPod[], only: ChainPart): Promise<AddRun> {
  return only === 'chain' ? pods.addConcurrently(batch) : ourPluginAdds(env, batch);
}

async function prepare(pods: BenchPods, n: number): Promise<BenchPod[]> {
  const out: BenchPod[] = [];
  for (let i = 0; i < n; i++) out.push(await pods.prepare());
  return out;
}

function outcome(out: AddRun) {
  const perPod = out.results.flatMap((x) => ('ms' in x ? [x.ms] : []));
  const errors = out.results.flatMap((x) => ('error' in x ? [x.error] : []));
  return { wallMs: out.wallMs, perPod, failed: errors.length, firstError: errors[0] };
}

/**
 * Resolves once the agent has the first ADD of `batch` (its state file is written in the tick it
 * starts waiting for ztunnel), so the gap covers ADDs in the agent whatever the runtime's start-up
 * costs; or when the ADDs are over (they all failed early).
 */
async function firstArrival(env: DemoEnvironment, batch: BenchPod[], adding: Promise<unknown>): Promise<void> {
  const files = batch.map((p) => join(env.runDir, STATE_DIR, stateFileName(p.cni.args['K8S_POD_UID'] ?? '')));
  let over = false;
  void adding.finally(() => (over = true)).catch(() => undefined);
  while (!over && !files.some((f) => existsSync(f))) await new Promise((r) => setTimeout(r, 5));
}

function lastGapLine(env: DemoEnvironment): string | undefined {
  return readFileSync(env.agentLog, 'utf8')
    .split('\n')
    .filter((l) => l.includes('"ztunnel gone for'))
    .map((l) => (JSON.parse(l) as { msg: string }).msg)
    .at(-1);
}

/** Both variants: the full chain (what a runtime sees), then the istio-cni entry alone. */
/** The ztunnel the bench restarts (the node bench's native ZDS peer). */
export interface RestartableZtunnel {
  /** Stops the running one: its connection closes, as when ztunnel's pod goes away. */
  stop(): Promise<void>;
  /** Starts a new one; resolves once it has connected and its snapshot is in. */
  start(): Promise<void>;
}

export async function ztunnelRestartPhase(
  env: DemoEnvironment,
  pods: BenchPods,
  metricsPort: number | undefined,
  ztunnel: RestartableZtunnel,
): Promise<ZtunnelRestartResult[]> {
  const n = readPods();
  return [
    await ztunnelRestart(env, pods, metricsPort, ztunnel, n, 'chain'),
    await ztunnelRestart(env, pods, metricsPort, ztunnel, n, 'istio-cni'),
  ];
}

async function ztunnelRestart(
  env: DemoEnvironment,
  pods: BenchPods,
  metricsPort: number | undefined,
  ztunnel: RestartableZtunnel,
  n: number,
  only: ChainPart,
): Promise<ZtunnelRestartResult> {
  const gapMs = readGapMs();
  const healthy = outcome(await adds(env, pods, await prepare(pods, n), only));
  await pods.removeAll();

  const batch = await prepare(pods, n);
  let before: Awaited<ReturnType<typeof scrapeWaits>> | undefined;
  let after: typeof before;
  let restart: ReturnType<typeof outcome>;
  try {
    before = metricsPort !== undefined ? await scrapeWaits(metricsPort) : undefined;
    await ztunnel.stop(); // ztunnel's pod is gone: its connection closes
    const adding = adds(env, pods, batch, only);
    await firstArrival(env, batch, adding);
    await new Promise((r) => setTimeout(r, gapMs));
    const back = ztunnel.start();
    restart = outcome(await adding);
    await back;
    after = metricsPort !== undefined ? await scrapeWaits(metricsPort) : undefined;
  } finally {
    await pods.removeAll(); // a failed run must not leave its pods' namespaces behind
  }

  const count = before && after ? after.enrolled.count - before.enrolled.count + (after.failed.count - before.failed.count) : NaN;
  const sum = before && after ? after.enrolled.sum - before.enrolled.sum + (after.failed.sum - before.failed.sum) : NaN;
  const result: ZtunnelRestartResult = {
    only,
    pods: n,
    gapMs,
    healthy: { wallMs: healthy.wallMs, perPod: summarize(healthy.perPod), failed: healthy.failed },
    restart: {
      wallMs: restart.wallMs,
      perPod: restart.perPod.length > 0 ? summarize(restart.perPod) : undefined,
      failed: restart.failed,
      firstError: restart.firstError,
    },
    waited: {
      count,
      meanMs: count > 0 ? (sum / count) * 1000 : NaN,
      failed: before && after ? after.failed.count - before.failed.count : NaN,
    },
    gapLine: lastGapLine(env),
  };
  process.stderr.write(`  ztunnel restart (${only}): ${n} ADDs, ${restart.failed} failed; ${result.gapLine ?? 'no gap line'}\n`);
  return result;
}

/** The report's rows for this phase. */
export function ztunnelRestartRows(
  results: readonly ZtunnelRestartResult[] | undefined,
  f: (x: number | undefined, d?: number) => string,
): string[] {
  return (results ?? []).flatMap((z) => rowsOf(z, f));
}

function rowsOf(z: ZtunnelRestartResult, f: (x: number | undefined, d?: number) => string): string[] {
  const label = z.only === 'chain' ? 'ztunnel restart (full chain, all at once)' : 'ztunnel restart (istio-cni entry alone, all at once)';
  const added = z.restart.perPod ? z.restart.perPod.p50 - z.healthy.perPod.p50 : undefined;
  const addedMax = z.restart.perPod ? z.restart.perPod.max - z.healthy.perPod.max : undefined;
  return [
    `| ${label} with ${z.pods} pods being created (ztunnel stopped, back ${z.gapMs} ms after the first ADD reached the agent): failed ADDs (target 0) | ${z.restart.failed}/${z.pods}${z.restart.firstError ? ` (first: ${z.restart.firstError.slice(0, 120)})` : ''} |`,
    `| ${label}: pod ADD p50 / max (healthy ztunnel: ${f(z.healthy.perPod.p50, 1)} / ${f(z.healthy.perPod.max, 1)}) | ${f(z.restart.perPod?.p50, 1)} / ${f(z.restart.perPod?.max, 1)} ms |`,
    `| ${label}: added latency p50 / max | ${f(added, 1)} / ${f(addedMax, 1)} ms |`,
    `| ${label}: ADDs that waited for ztunnel (agent histogram), mean wait | ${Number.isFinite(z.waited.count) ? z.waited.count : 'n/a'}, ${f(z.waited.meanMs, 1)} ms |`,
    `| ${label}: the agent's gap line | ${z.gapLine ?? 'n/a'} |`,
  ];
}
