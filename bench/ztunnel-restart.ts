// Bench phase "ztunnel-restart" (issue 17): N pods being created while ztunnel restarts. The
// same N concurrent chained ADDs run twice: once with ztunnel healthy (the reference), once with
// the ztunnel stand-in stopped right before they start and a new one connecting BENCH_ZTUNNEL_GAP_MS
// after the first of them reached the agent (a rollout or crash-restart); N is BENCH_ZTUNNEL_RESTART_PODS (default 30). Measured: failed ADDs (target 0), the ADD latency of both
// runs (what the restart added), and what the agent reports (its wait histogram, the gap line).
// Runs alone with BENCH_PHASES=ztunnel-restart.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DemoEnvironment } from '../src/demo/environment.js';
import { ZtunnelStandIn } from '../src/demo/ztunnel-standin.js';
import { stateFileName, STATE_DIR } from '../src/pods/state-store.js';
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

export interface ZtunnelRestartResult {
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
    const line = text.split('\n').find((l) => l.startsWith(`ambient_node_agent_ztunnel_wait_seconds_${series}{`) && l.includes(`result="${result}"`));
    return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : 0;
  };
  return {
    enrolled: { count: value('count', 'enrolled'), sum: value('sum', 'enrolled') },
    failed: { count: value('count', 'failed'), sum: value('sum', 'failed') },
  };
}

async function prepare(pods: BenchPods, n: number): Promise<BenchPod[]> {
  const out: BenchPod[] = [];
  for (let i = 0; i < n; i++) out.push(await pods.prepare());
  return out;
}

function outcome(out: { wallMs: number; results: Array<{ ms: number } | { error: string }> }) {
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

export async function ztunnelRestart(env: DemoEnvironment, pods: BenchPods, metricsPort: number | undefined, n = readPods()): Promise<ZtunnelRestartResult> {
  if (!env.standIn) throw new Error('no ztunnel stand-in');
  const gapMs = readGapMs();
  const healthy = outcome(await pods.addConcurrently(await prepare(pods, n)));
  await pods.removeAll();

  const batch = await prepare(pods, n);
  const before = metricsPort !== undefined ? await scrapeWaits(metricsPort) : undefined;
  await env.standIn.stop(); // ztunnel's pod is gone: its connection closes
  env.standIn = undefined;
  const adding = pods.addConcurrently(batch);
  await firstArrival(env, batch, adding);
  await new Promise((r) => setTimeout(r, gapMs));
  const standIn = new ZtunnelStandIn({ socketPath: env.zdsSocket, addon: env.addon }).start();
  env.standIn = standIn;
  const restart = outcome(await adding);
  await standIn.waitFor(() => standIn.ready, 10_000, 'the new stand-in synced');
  const after = metricsPort !== undefined ? await scrapeWaits(metricsPort) : undefined;
  await pods.removeAll();

  const count = before && after ? after.enrolled.count - before.enrolled.count + (after.failed.count - before.failed.count) : NaN;
  const sum = before && after ? after.enrolled.sum - before.enrolled.sum + (after.failed.sum - before.failed.sum) : NaN;
  const result: ZtunnelRestartResult = {
    pods: n,
    gapMs,
    healthy: { wallMs: healthy.wallMs, perPod: summarize(healthy.perPod), failed: healthy.failed },
    restart: { wallMs: restart.wallMs, perPod: restart.perPod.length > 0 ? summarize(restart.perPod) : undefined, failed: restart.failed, firstError: restart.firstError },
    waited: { count, meanMs: count > 0 ? (sum / count) * 1000 : NaN, failed: before && after ? after.failed.count - before.failed.count : NaN },
    gapLine: lastGapLine(env),
  };
  process.stderr.write(`  ztunnel restart: ${n} ADDs, ${restart.failed} failed; ${result.gapLine ?? 'no gap line'}\n`);
  return result;
}

/** The report's rows for this phase. */
export function ztunnelRestartRows(z: ZtunnelRestartResult | undefined, f: (x: number | undefined, d?: number) => string): string[] {
  if (!z) return [];
  const added = z.restart.perPod ? z.restart.perPod.p50 - z.healthy.perPod.p50 : undefined;
  const addedMax = z.restart.perPod ? z.restart.perPod.max - z.healthy.perPod.max : undefined;
  return [
    `| ztunnel restart with ${z.pods} pods being created (stand-in stopped, back after ${z.gapMs} ms): failed ADDs (target 0) | ${z.restart.failed}/${z.pods}${z.restart.firstError ? ` (first: ${z.restart.firstError.slice(0, 120)})` : ''} |`,
    `| ztunnel restart: pod ADD p50 / max (healthy ztunnel: ${f(z.healthy.perPod.p50, 1)} / ${f(z.healthy.perPod.max, 1)}) | ${f(z.restart.perPod?.p50, 1)} / ${f(z.restart.perPod?.max, 1)} ms |`,
    `| ztunnel restart: added latency p50 / max | ${f(added, 1)} / ${f(addedMax, 1)} ms |`,
    `| ztunnel restart: ADDs that waited for ztunnel (agent histogram), mean wait | ${Number.isFinite(z.waited.count) ? z.waited.count : 'n/a'}, ${f(z.waited.meanMs, 1)} ms |`,
    `| ztunnel restart: the agent's gap line | ${z.gapLine ?? 'n/a'} |`,
  ];
}
