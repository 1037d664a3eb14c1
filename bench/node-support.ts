// Helpers for the node benchmark (bench/node.ts): pods created with exactly the CNI runtime ADD
// the demo does (DemoEnvironment.createPod minus the echo app), the agent's process (pid, RSS,
// fds, metrics port found from its listening sockets) and its Prometheus histogram.
// Every external command is an argv array (no shell anywhere).
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import type { RawExecutorStats, StepTimeTotal } from '../src/addon/binding.js';
import type { NetnsHandle } from '../src/addon/net-addon.js';
import { CniRuntime, type CniPod, type CniResult } from '../src/demo/cni-runtime.js';
import { CNI_PLUGIN_DIR, type DemoEnvironment } from '../src/demo/environment.js';
import type { DriverInput, DriverOutput } from './node-cni-driver.js';
import { execTool, ip } from './support.js';
import { procTcpSockets, TCP_LISTEN } from '../src/util/proc-tcp.js';

export interface BenchPod {
  name: string;
  netnsName: string;
  cni: CniPod;
  added: boolean;
}

/** What bridge + host-local return for a pod (istio-cni reads the IPs from it). */
function fakeBridgeResult(i: number): CniResult {
  return {
    cniVersion: '1.0.0',
    interfaces: [{ name: 'eth0', sandbox: 'netns' }],
    ips: [{ address: `10.251.${Math.floor(i / 250)}.${(i % 250) + 2}/16`, interface: 0, gateway: '10.251.0.1' }],
  };
}

/**
 * The demo's CNI step without its echo app: a fresh netns (untimed), then the chained ADD
 * (bridge + host-local + istio-cni -> agent -> ztunnel stand-in ack) through a CniRuntime built
 * like DemoEnvironment's own (same node netns, plugin dirs and chained conflist).
 */
export class BenchPods {
  readonly prefix = `anabench${process.pid}`;
  readonly live = new Map<string, BenchPod>();
  readonly #runtime: CniRuntime;
  readonly #node: NetnsHandle;
  readonly #nodePath: string;
  readonly #pluginDirs: string[];
  readonly #conflist: object;
  #next = 0;

  constructor(env: DemoEnvironment) {
    this.#nodePath = env.nodeNetnsPath;
    this.#node = env.addon.openNetns(this.#nodePath);
    this.#pluginDirs = [env.binDir, CNI_PLUGIN_DIR];
    this.#conflist = env.chainedConfig();
    this.#runtime = new CniRuntime({ addon: env.addon, nodeNetns: this.#node, pluginDirs: this.#pluginDirs, conflist: this.#conflist });
  }

  /**
   * Concurrent ADDs from a separate runtime process (bench/node-cni-driver.ts): see there why
   * not from this process. Every pod counts as added afterwards (DEL is idempotent).
   */
  async addConcurrently(pods: BenchPod[], only: 'chain' | 'istio-cni' = 'chain'): Promise<DriverOutput> {
    const input: DriverInput = {
      nodeNetns: this.#nodePath,
      pluginDirs: this.#pluginDirs,
      conflist: this.#conflist,
      pods: pods.map((p) => p.cni),
    };
    if (only === 'istio-cni') {
      // Our entry of the chain alone, with the result bridge + host-local would have passed on.
      const list = this.#conflist as { plugins: Array<{ type: string }> };
      input.conflist = { ...list, plugins: list.plugins.filter((p) => p.type === 'istio-cni') };
      input.earlierResults = pods.map((_, i) => fakeBridgeResult(i));
    }
    const script = join(dirname(fileURLToPath(import.meta.url)), 'node-cni-driver.js');
    // A thread per plugin exec (it holds one until the plugin exits): every ADD of the burst at once.
    const threads = String(Math.min(256, pods.length + 4));
    const child = spawn(process.execPath, [script], {
      stdio: ['pipe', 'pipe', 'pipe'],
      env: { ...process.env, ANA_NETNS_THREADS: threads },
    });
    for (const pod of pods) pod.added = true;
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const exited = new Promise<number | null>((resolve, reject) => {
      child.once('error', reject);
      child.once('close', (code) => resolve(code));
    });
    child.stdin.end(JSON.stringify(input));
    const code = await exited;
    if (code !== 0) throw new Error(`CNI driver exited with ${code}: ${stderr.trim()}`);
    return JSON.parse(stdout) as DriverOutput;
  }

  /** Untimed: the netns a runtime would create before calling CNI. */
  async prepare(): Promise<BenchPod> {
    const n = ++this.#next;
    const name = `p${n}`;
    const netnsName = `${this.prefix}-${name}`;
    const pod: BenchPod = {
      name,
      netnsName,
      added: false,
      cni: {
        containerId: `${this.prefix}${name}`,
        netnsPath: `/var/run/netns/${netnsName}`,
        args: {
          K8S_POD_NAME: name,
          K8S_POD_NAMESPACE: 'bench',
          K8S_POD_INFRA_CONTAINER_ID: `${this.prefix}${name}`,
          K8S_POD_UID: `00000000-bnch-4000-8000-${String(n).padStart(12, '0')}`,
        },
      },
    };
    this.live.set(name, pod);
    await execTool(['ip', 'netns', 'add', netnsName]);
    await execTool(['ip', '-n', netnsName, 'link', 'set', 'lo', 'up']);
    return pod;
  }

  /** The timed part: the runtime's chained CNI ADD. Returns its duration in ms. */
  async add(pod: BenchPod): Promise<number> {
    const start = process.hrtime.bigint();
    await this.#runtime.add(pod.cni);
    const ms = Number(process.hrtime.bigint() - start) / 1e6;
    pod.added = true;
    return ms;
  }

  /** CNI DEL (releases the IP, tells the agent) and the netns. */
  async remove(pod: BenchPod): Promise<void> {
    try {
      if (pod.added) await this.#runtime.del(pod.cni);
    } finally {
      pod.added = false;
      this.live.delete(pod.name);
      await execTool(['ip', 'netns', 'del', pod.netnsName]).catch(() => undefined);
    }
  }

  async removeAll(): Promise<void> {
    for (const pod of [...this.live.values()]) await this.remove(pod).catch(() => undefined);
  }

  /** Best effort, synchronous (signal/exit handlers). */
  destroyNamespacesSync(): void {
    for (const pod of [...this.live.values()]) {
      this.live.delete(pod.name);
      try {
        ip(['netns', 'del', pod.netnsName]);
      } catch {
        // gone
      }
    }
  }

  close(): void {
    this.#node.close();
  }
}

// ---- the agent process ----------------------------------------------------------------------

export interface Footprint {
  rssMb: number;
  fds: number;
}

export function footprint(pid: number): Footprint {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = Number(/^VmRSS:\s+(\d+)\s+kB/m.exec(status)?.[1] ?? NaN);
  return { rssMb: kb / 1024, fds: readdirSync(`/proc/${pid}/fd`).length };
}

/** TCP ports the process listens on (its socket inodes matched against /proc/<pid>/net/tcp{,6}). */
export function listeningPorts(pid: number): number[] {
  const inodes = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m?.[1]) inodes.add(m[1]);
    } catch {
      // closed meanwhile
    }
  }
  const ports = new Set<number>();
  for (const sock of procTcpSockets(pid)) if (sock.state === TCP_LISTEN && inodes.has(sock.inode)) ports.add(sock.localPort);
  return [...ports].filter((p) => Number.isInteger(p)).sort((a, b) => a - b);
}

export interface HistogramState {
  count: number;
  sum: number;
  buckets: Array<[le: number, count: number]>;
  /** The netns threads' totals of the same scrape (src/ops/metrics.ts netnsThreads), in the addon's own shape. */
  threads: ThreadTotals;
  /** The event loop's own CPU while pod events were in flight, seconds (src/ops/busy-loop-cpu.ts); absent from an agent without that metric. */
  loopCpu?: number;
}

/** What the agent exports of its addon's executorStats(), and what the bench reads of its own. */
export type ThreadTotals = Pick<RawExecutorStats, 'jobsRun' | 'queueWaitSeconds' | 'resultsDelivered' | 'resultWaitSeconds' | 'steps'>;

const noThreads = (): ThreadTotals => ({ jobsRun: 0, queueWaitSeconds: 0, resultsDelivered: 0, resultWaitSeconds: 0, steps: {} });

type TotalField = keyof Omit<ThreadTotals, 'steps'>;
type StepField = keyof StepTimeTotal;

/** Each netns-thread metric of the agent and the field it carries. */
const THREAD_METRICS: Record<string, TotalField | { step: StepField }> = {
  ambient_node_agent_netns_jobs_total: 'jobsRun',
  ambient_node_agent_netns_job_queue_wait_seconds_total: 'queueWaitSeconds',
  ambient_node_agent_netns_results_total: 'resultsDelivered',
  ambient_node_agent_netns_result_wait_seconds_total: 'resultWaitSeconds',
  ambient_node_agent_netns_steps_total: { step: 'count' },
  ambient_node_agent_netns_step_cpu_seconds_total: { step: 'cpuSeconds' },
  ambient_node_agent_netns_step_wall_seconds_total: { step: 'wallSeconds' },
};

function addThreadLine(totals: ThreadTotals, line: string): void {
  const field = THREAD_METRICS[line.slice(0, line.search(/[{ ]/))];
  if (field === undefined) return;
  const value = Number(line.slice(line.lastIndexOf(' ') + 1));
  if (typeof field === 'string') return void (totals[field] = value);
  const step = /step="([^"]+)"/.exec(line)?.[1];
  if (step === undefined) return;
  (totals.steps[step] ??= { count: 0, cpuSeconds: 0, wallSeconds: 0 })[field.step] = value;
}

/**
 * A thread's scheduler totals (/proc/<pid>/task/<tid>/schedstat, ns): time on a CPU and time
 * runnable but waiting for one. Read from outside, so the agent measures nothing itself.
 */
export function threadSchedstat(pid: number, tid = pid): { runMs: number; waitMs: number } {
  const [run = '0', wait = '0'] = readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').trim().split(/\s+/);
  return { runMs: Number(run) / 1e6, waitMs: Number(wait) / 1e6 };
}

/** The netns steps whose thread CPU the report shows: the three of an apply visit. */
export const TIMED_STEPS = ['setLinkUp', 'nftBatch', 'routing'] as const;
export type TimedStep = (typeof TIMED_STEPS)[number];

/**
 * Per-pod samples (ms) of each timed step's thread CPU and wall time, and of the pod's hops to
 * and from the netns threads (summed over its jobs and results).
 */
export type StepSamples = Record<TimedStep, { cpu: number[]; wall: number[] }> & Record<'queue' | 'result', number[]>;

export const emptyStepSamples = (): StepSamples =>
  ({ ...Object.fromEntries(TIMED_STEPS.map((op) => [op, { cpu: [], wall: [] }])), queue: [], result: [] }) as unknown as StepSamples;

/** Adds what each timed step and both hops cost between two readings of the totals (one pod's worth). */
export function addStepSamples(into: StepSamples, before: ThreadTotals, after: ThreadTotals): void {
  for (const op of TIMED_STEPS) {
    const a = after.steps[op];
    const b = before.steps[op] ?? { count: 0, cpuSeconds: 0, wallSeconds: 0 };
    if (!a || a.count === b.count) continue;
    const n = a.count - b.count;
    into[op].cpu.push(((a.cpuSeconds - b.cpuSeconds) * 1000) / n);
    into[op].wall.push(((a.wallSeconds - b.wallSeconds) * 1000) / n);
  }
  if (after.jobsRun > before.jobsRun) into.queue.push((after.queueWaitSeconds - before.queueWaitSeconds) * 1000);
  if (after.resultsDelivered > before.resultsDelivered) into.result.push((after.resultWaitSeconds - before.resultWaitSeconds) * 1000);
}

const METRIC = 'ambient_node_agent_pod_onboarding_seconds';
const LOOP_CPU = 'ambient_node_agent_pod_events_loop_cpu_seconds_total';

/** Adds the event loop's CPU (ms) between two scrapes with one sequential ADD between them. */
export function addLoopCpuSample(into: number[], before: HistogramState, after: HistogramState): void {
  if (after.loopCpu === undefined || before.loopCpu === undefined) return;
  into.push((after.loopCpu - before.loopCpu) * 1000);
}

/** The `result="ok"` series of the onboarding histogram. */
export async function scrapeOnboarding(port: number): Promise<HistogramState> {
  const res = await fetch(`http://127.0.0.1:${port}/metrics`);
  if (!res.ok) throw new Error(`/metrics: HTTP ${res.status}`);
  const text = await res.text();
  const state: HistogramState = { count: 0, sum: 0, buckets: [], threads: noThreads() };
  for (const line of text.split('\n')) {
    if (line.startsWith('ambient_node_agent_netns_')) addThreadLine(state.threads, line);
    if (line.startsWith(`${LOOP_CPU} `)) state.loopCpu = Number(line.slice(LOOP_CPU.length + 1));
    if (!line.startsWith(METRIC) || !line.includes('result="ok"')) continue;
    const value = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (line.startsWith(`${METRIC}_sum`)) state.sum = value;
    else if (line.startsWith(`${METRIC}_count`)) state.count = value;
    else if (line.startsWith(`${METRIC}_bucket`)) {
      const le = /le="([^"]+)"/.exec(line)?.[1];
      if (le !== undefined) state.buckets.push([le === '+Inf' ? Infinity : Number(le), value]);
    }
  }
  return state;
}

/** Agent-side ms per pod (sequential: one ADD between two scrapes) from the histogram's _sum delta. */
export function deltaMs(before: HistogramState, after: HistogramState): number | undefined {
  if (after.count - before.count !== 1) return undefined;
  return (after.sum - before.sum) * 1000;
}

/** Bucket-interpolated quantile (as Prometheus' histogram_quantile) of the delta of two scrapes, in ms. */
export function histogramQuantileMs(before: HistogramState, after: HistogramState, q: number): number {
  const deltas = after.buckets.map(([le, c]) => [le, c - (before.buckets.find(([l]) => l === le)?.[1] ?? 0)] as [number, number]);
  const total = deltas.at(-1)?.[1] ?? 0;
  if (total === 0) return NaN;
  const rank = q * total;
  let prevLe = 0;
  let prevCount = 0;
  for (const [le, c] of deltas) {
    if (c >= rank) {
      if (le === Infinity) return prevLe * 1000;
      return (prevLe + ((le - prevLe) * (rank - prevCount)) / Math.max(c - prevCount, 1e-9)) * 1000;
    }
    prevLe = le;
    prevCount = c;
  }
  return NaN;
}

// ---- SVG CDF ----------------------------------------------------------------------------------

export interface CdfSeries {
  label: string;
  color: string;
  samples: readonly number[];
}

function esc(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

/** A CDF per series on a log10 x axis (ms), hand-written SVG. */
export function cdfSvg(title: string, series: readonly CdfSeries[]): string {
  const W = 760;
  const H = 440;
  const L = 60;
  const R = 20;
  const T = 40;
  const B = 130;
  const all = series.flatMap((s) => s.samples).filter((x) => x > 0 && Number.isFinite(x));
  const lo = Math.floor(Math.log10(Math.min(...all, 1)));
  const hi = Math.ceil(Math.log10(Math.max(...all, 10)));
  const x = (ms: number): number => L + ((Math.log10(Math.max(ms, 10 ** lo)) - lo) / (hi - lo)) * (W - L - R);
  const y = (f: number): number => T + (1 - f) * (H - T - B);
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${W / 2}" y="22" text-anchor="middle" font-size="14">${esc(title)}</text>`,
  ];
  for (let d = lo; d <= hi; d++) {
    const gx = x(10 ** d).toFixed(1);
    out.push(`<line x1="${gx}" y1="${T}" x2="${gx}" y2="${H - B}" stroke="#ddd"/>`);
    out.push(`<text x="${gx}" y="${H - B + 16}" text-anchor="middle">${10 ** d >= 1 ? String(10 ** d) : (10 ** d).toFixed(-d)}</text>`);
  }
  for (const f of [0, 0.25, 0.5, 0.75, 0.9, 0.99, 1]) {
    const gy = y(f).toFixed(1);
    out.push(`<line x1="${L}" y1="${gy}" x2="${W - R}" y2="${gy}" stroke="#eee"/>`);
    out.push(`<text x="${L - 6}" y="${gy}" text-anchor="end" dominant-baseline="middle">${f}</text>`);
  }
  out.push(`<rect x="${L}" y="${T}" width="${W - L - R}" height="${H - T - B}" fill="none" stroke="#333"/>`);
  out.push(`<text x="${(L + W - R) / 2}" y="${H - B + 34}" text-anchor="middle">latency per pod, ms (log scale)</text>`);
  out.push(
    `<text x="16" y="${(T + H - B) / 2}" text-anchor="middle" transform="rotate(-90 16 ${(T + H - B) / 2})">fraction of pods</text>`,
  );
  series.forEach((s, i) => {
    const sorted = [...s.samples].filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
    if (sorted.length > 0) {
      const pts: string[] = [`${x(sorted[0] ?? 1).toFixed(1)},${y(0).toFixed(1)}`];
      sorted.forEach((v, k) => {
        pts.push(`${x(v).toFixed(1)},${y(k / sorted.length).toFixed(1)}`, `${x(v).toFixed(1)},${y((k + 1) / sorted.length).toFixed(1)}`);
      });
      out.push(`<polyline fill="none" stroke="${s.color}" stroke-width="2" points="${pts.join(' ')}"/>`);
    }
    const ly = H - B + 52 + i * 16;
    out.push(`<line x1="${L}" y1="${ly}" x2="${L + 24}" y2="${ly}" stroke="${s.color}" stroke-width="2"/>`);
    out.push(`<text x="${L + 30}" y="${ly}" dominant-baseline="middle">${esc(`${s.label} (n=${sorted.length})`)}</text>`);
  });
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}
