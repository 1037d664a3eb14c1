// Node-level benchmark (issue 7): real chained CNI ADDs (bridge + host-local + our istio-cni
// plugin -> agent -> ztunnel stand-in ack after binding its listeners) in a throw-away node netns.
// 1. onboarding: BENCH_PODS pods one after another (total ADD, and the agent's share from its
//    ambient_node_agent_pod_onboarding_seconds histogram, scraped between pods);
// 2. burst: 110 concurrent ADDs; 3. restart: SIGKILL the agent with 110 pods, time until the
//    stand-in has the full snapshot again and /readyz is 200; 4. footprint: agent RSS / fds;
// 4b. ztunnel-restart: N pods being created while ztunnel restarts (bench/ztunnel-restart.ts);
// 5. baseline: Istio's exec mechanisms (nsenter iptables-restore + ip execs, nft -f) on fresh
//    namespaces in the same run; 6. output: markdown + SVG CDF under bench/results/.
// Usage: BENCH_PODS=200 node dist/bench/node.js   (root)
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { constants as osConstants, cpus, release } from 'node:os';
import { join } from 'node:path';

import { routingApplySteps } from '../src/rules/routing.js';
import { IptablesInpodRules } from '../src/rules/iptables-manager.js';
import { NftablesInpodRules } from '../src/rules/nftables-manager.js';
import { defaultRuleSettings, NO_OVERRIDES } from '../src/rules/settings.js';
import { DemoEnvironment, demoPrerequisites } from '../src/demo/environment.js';
import { INPOD_TPROXY_MARK, INPOD_TPROXY_MASK, IP_RULE_PRIORITY, ROUTE_TABLE_INBOUND } from '../src/rules/constants.js';
import { projectRoot } from '../src/project-root.js';
import {
  BenchPods,
  cdfSvg,
  deltaMs,
  footprint,
  histogramQuantileMs,
  listeningPorts,
  scrapeOnboarding,
  type BenchPod,
  type Footprint,
  type HistogramState,
} from './node-support.js';
import { type BenchNetns, elapsedMs, execTool, NetnsPool, summarize, timeMs, useAddonSpawner, type Summary } from './support.js';
import { ztunnelRestartPhase, ztunnelRestartRows, type ZtunnelRestartResult } from './ztunnel-restart.js';

const DEFAULT_PODS = 200;
const ROUND_MAX = 200; // the demo's /24 has ~250 addresses
const BURST = 110;
const TARGETS = { agentP50Ms: 2, ratio: 10, burstS: 1, restartS: 0.5, rssMb: 90 };

function readPods(): number {
  const raw = process.env['BENCH_PODS'];
  const pods = raw === undefined ? DEFAULT_PODS : Number(raw);
  if (!Number.isInteger(pods) || pods < 1) throw new Error(`BENCH_PODS must be a positive integer, got ${JSON.stringify(raw)}`);
  return pods;
}

/** BENCH_PHASES=onboarding,burst,restart,ztunnel-restart,baseline runs only those (profiling); results are then not written. */
function readPhases(): Set<string> | undefined {
  const raw = process.env['BENCH_PHASES'];
  return raw ? new Set(raw.split(',').map((p) => p.trim())) : undefined;
}

/** BENCH_AGENT_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof" profiles the agent process. */
function readAgentNodeArgs(): string[] {
  return (process.env['BENCH_AGENT_NODE_ARGS'] ?? '').split(/\s+/).filter((a) => a !== '');
}

const f = (x: number | undefined, d = 3): string => (x === undefined || !Number.isFinite(x) ? 'n/a' : x.toFixed(d));

interface BurstResult {
  wallMs: number;
  slowestMs: number;
  perPod: number[];
  agentP50Ms: number;
  agentP99Ms: number;
  agentMeanMs: number;
  standInPods: number;
}

interface Results {
  pods: number;
  total: number[];
  agent: number[];
  zds: number[];
  agentPid?: number;
  metricsPort?: number;
  /** The full chain (bridge + host-local + istio-cni), and the istio-cni entry alone. */
  burst?: BurstResult;
  burstOurs?: BurstResult;
  restart?: { readyMs: number; connectedMs: number; snapshotMs: number; totalMs: number; startAgentMs: number; pods: number };
  idle?: Footprint;
  with110?: Footprint;
  afterRestart?: Footprint;
  ztunnelRestart?: ZtunnelRestartResult[];
  pluginBytes?: number;
  baseline: { iptExec: number[]; nftExec: number[]; inProcess: number[] };
  notes: string[];
}

// ---- phases --------------------------------------------------------------------------------

async function onboarding(r: Results, pods: BenchPods, metricsPort: number | undefined): Promise<void> {
  let done = 0;
  while (done < r.pods) {
    const round = Math.min(ROUND_MAX, r.pods - done);
    const created: BenchPod[] = [];
    let before: HistogramState | undefined = metricsPort !== undefined ? await scrapeOnboarding(metricsPort) : undefined;
    for (let i = 0; i < round; i++) {
      const pod = await pods.prepare();
      created.push(pod);
      r.total.push(await pods.add(pod));
      if (metricsPort !== undefined && before !== undefined) {
        const after = await scrapeOnboarding(metricsPort);
        const ms = deltaMs(before, after);
        if (ms !== undefined) r.agent.push(ms);
        before = after;
      }
    }
    done += round;
    process.stderr.write(`  onboarding: ${done}/${r.pods} pods added; deleting the round\n`);
    for (const pod of created) await pods.remove(pod);
  }
}

async function burst(env: DemoEnvironment, pods: BenchPods, metricsPort: number | undefined, only: 'chain' | 'istio-cni'): Promise<BurstResult> {
  const prepared: BenchPod[] = [];
  for (let i = 0; i < BURST; i++) prepared.push(await pods.prepare());
  const runningBefore = runningBenchPods(env);
  const before = metricsPort !== undefined ? await scrapeOnboarding(metricsPort) : undefined;
  const out = await pods.addConcurrently(prepared, only);
  const wallMs = out.wallMs;
  const perPod = out.results.flatMap((x) => ('ms' in x ? [x.ms] : []));
  const failed = out.results.flatMap((x) => ('error' in x ? [x.error] : []));
  if (failed.length > 0) {
    throw new Error(`${failed.length}/${BURST} concurrent ADDs failed after ${wallMs.toFixed(0)} ms (${perPod.length} ok); first: ${failed[0]}`);
  }
  const after = metricsPort !== undefined ? await scrapeOnboarding(metricsPort) : undefined;
  const agentP50Ms = before && after ? histogramQuantileMs(before, after, 0.5) : NaN;
  const agentP99Ms = before && after ? histogramQuantileMs(before, after, 0.99) : NaN;
  const agentMeanMs = before && after ? ((after.sum - before.sum) / Math.max(after.count - before.count, 1)) * 1000 : NaN;
  const standInPods = runningBenchPods(env) - runningBefore;
  process.stderr.write(`  burst (${only}): ${BURST} ADDs in ${wallMs.toFixed(1)} ms; stand-in runs ${standInPods} more bench pods\n`);
  return { wallMs, slowestMs: Math.max(...perPod), perPod, agentP50Ms, agentP99Ms, agentMeanMs, standInPods };
}

function runningBenchPods(env: DemoEnvironment): number {
  return [...(env.standIn?.pods().values() ?? [])].filter((p) => p.state === 'running' && p.namespace === 'bench').length;
}

async function readyz(port: number): Promise<boolean> {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), 200);
  try {
    return (await fetch(`http://127.0.0.1:${port}/readyz`, { signal: ctl.signal })).ok;
  } catch {
    return false;
  } finally {
    clearTimeout(timer);
  }
}

async function restart(r: Results, env: DemoEnvironment): Promise<void> {
  const standIn = env.standIn;
  if (!standIn) throw new Error('no ztunnel stand-in');
  const expected = [...standIn.pods().values()].filter((p) => p.namespace === 'bench').length;
  await env.stopAgent('SIGKILL');
  const oldConn = standIn.connectionCount;
  const start = process.hrtime.bigint();
  let startAgentMs = NaN;
  const started = env.startAgent().then(() => {
    startAgentMs = elapsedMs(start);
  });
  let readyMs = NaN;
  let connectedMs = NaN;
  let snapshotMs = NaN;
  const deadline = Date.now() + 30_000;
  const snapshotDone = (): boolean =>
    standIn.connectionCount > oldConn && standIn.ready && [...standIn.pods().values()].filter((p) => p.namespace === 'bench' && p.state === 'running').length >= expected;
  while (Date.now() < deadline && (Number.isNaN(readyMs) || Number.isNaN(snapshotMs))) {
    if (Number.isNaN(connectedMs) && standIn.connectionCount > oldConn) connectedMs = elapsedMs(start);
    if (Number.isNaN(snapshotMs) && snapshotDone()) snapshotMs = elapsedMs(start);
    if (Number.isNaN(readyMs) && env.healthPort !== 0 && (await readyz(env.healthPort))) readyMs = elapsedMs(start);
    await new Promise((res) => setTimeout(res, 5));
  }
  await started;
  r.restart = { readyMs, connectedMs, snapshotMs, totalMs: Math.max(readyMs, snapshotMs), startAgentMs, pods: expected };
  process.stderr.write(`  restart: /readyz after ${f(readyMs, 1)} ms, snapshot of ${expected} pods after ${f(snapshotMs, 1)} ms\n`);
}

// ---- Istio's exec baseline (as bench/rules.ts) ----------------------------------------------

function nsenter(ns: BenchNetns, argv: string[]): string[] {
  return ['nsenter', `--net=${ns.path}`, ...argv];
}

function routingExecs(ns: BenchNetns): string[][] {
  const mark = `0x${INPOD_TPROXY_MARK.toString(16)}/0x${INPOD_TPROXY_MASK.toString(16)}`;
  const table = String(ROUTE_TABLE_INBOUND);
  return [
    nsenter(ns, ['ip', '-4', 'route', 'replace', 'local', '0.0.0.0/0', 'dev', 'lo', 'table', table]),
    nsenter(ns, ['ip', '-4', 'rule', 'add', 'fwmark', mark, 'pref', String(IP_RULE_PRIORITY), 'lookup', table]),
  ];
}

async function baseline(r: Results, env: DemoEnvironment, pool: NetnsPool, n: number): Promise<void> {
  const settings = defaultRuleSettings({ ipv6: false, dnsCapture: true });
  const nftRules = new NftablesInpodRules(env.addon, settings);
  const iptRules = new IptablesInpodRules(env.addon, settings);
  const script = nftRules.script(NO_OVERRIDES);
  const restore = iptRules.restoreInputs(NO_OVERRIDES).v4;
  await nftRules.warmUp();
  const fresh = async (work: (ns: BenchNetns) => Promise<void>): Promise<number> => {
    const ns = await pool.create();
    try {
      return await timeMs(() => work(ns));
    } finally {
      await pool.destroy(ns);
    }
  };
  const iptExec = async (ns: BenchNetns): Promise<void> => {
    for (const argv of routingExecs(ns)) await execTool(argv);
    await execTool(nsenter(ns, ['iptables-restore', '--noflush']), restore);
  };
  const nftExec = async (ns: BenchNetns): Promise<void> => {
    const handle = env.addon.openNetns(ns.path);
    try {
      await env.addon.run(handle, routingApplySteps(false)); // Istio does routing via netlink
      await execTool(nsenter(ns, ['nft', '-f', '-']), script);
    } finally {
      handle.close();
    }
  };
  const inProcess = async (ns: BenchNetns): Promise<void> => {
    const handle = env.addon.openNetns(ns.path);
    try {
      await nftRules.apply(handle, NO_OVERRIDES);
    } finally {
      handle.close();
    }
  };
  // one untimed pass each (warm caches, prove the tools run)
  await fresh(iptExec);
  await fresh(nftExec);
  await fresh(inProcess);
  for (let i = 0; i < n; i++) {
    const order = [0, 1, 2].map((k) => (k + i) % 3);
    for (const k of order) {
      if (k === 0) r.baseline.iptExec.push(await fresh(iptExec));
      else if (k === 1) r.baseline.nftExec.push(await fresh(nftExec));
      else r.baseline.inProcess.push(await fresh(inProcess));
    }
  }
  process.stderr.write(`  baseline: ${n} samples per mechanism\n`);
}

// ---- report --------------------------------------------------------------------------------

function row(label: string, s: Summary | undefined): string {
  if (!s || s.n === 0) return `| ${label} | 0 | n/a | n/a | n/a | n/a |`;
  return `| ${label} | ${s.n} | ${f(s.p50)} | ${f(s.p90)} | ${f(s.p99)} | ${f(s.max)} |`;
}

function tool(argv: string[]): string {
  try {
    return execFileSync(argv[0] ?? '', argv.slice(1), { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim().split('\n')[0] ?? '';
  } catch {
    return `${argv[0]}: unavailable`;
  }
}

const met = (ok: boolean | undefined): string => (ok === undefined ? 'n/a' : ok ? 'met' : 'MISSED');

function report(r: Results): { markdown: string; last: string[] } {
  const total = summarize(r.total);
  const agent = r.agent.length > 0 ? summarize(r.agent) : undefined;
  const ipt = r.baseline.iptExec.length > 0 ? summarize(r.baseline.iptExec) : undefined;
  const nft = r.baseline.nftExec.length > 0 ? summarize(r.baseline.nftExec) : undefined;
  const inproc = r.baseline.inProcess.length > 0 ? summarize(r.baseline.inProcess) : undefined;
  const ours = agent?.p50 ?? inproc?.p50;
  const oursLabel = agent ? 'agent share p50 (histogram)' : 'in-process rule install p50 (agent share unavailable)';
  const ratioIpt = ours !== undefined && ipt ? ipt.p50 / ours : undefined;
  const ratioNft = ours !== undefined && nft ? nft.p50 / ours : undefined;
  const burstS = r.burst ? r.burst.wallMs / 1000 : undefined;
  const burstOursS = r.burstOurs ? r.burstOurs.wallMs / 1000 : undefined;
  const restartS = r.restart && Number.isFinite(r.restart.totalMs) ? r.restart.totalMs / 1000 : undefined;
  const rss110 = r.with110?.rssMb;
  const lines = [
    `# ambient-node-agent node benchmark`,
    ``,
    `host: kernel ${release()}, ${cpus().length} CPUs, node ${process.version}, ${tool(['iptables', '--version'])}, ${tool(['nft', '--version'])}; ${new Date().toISOString()}`,
    ``,
    `## Per-pod onboarding (${r.pods} pods, one after another, rounds of <= ${ROUND_MAX})`,
    ``,
    `| what | n | p50 ms | p90 ms | p99 ms | max ms |`,
    `|---|---:|---:|---:|---:|---:|`,
    row('chained CNI ADD, end to end (bridge + host-local + istio-cni + agent + ZDS ack)', total),
    row('agent share (ambient_node_agent_pod_onboarding_seconds, _sum delta per pod)', agent),
    row('  of which ZDS send -> stand-in ack (enroller log zdsMs)', r.zds.length > 0 ? summarize(r.zds) : undefined),
    row('Istio exec: 2x nsenter ip + nsenter iptables-restore (fresh netns)', ipt),
    row('Istio exec: nsenter nft -f (routing via netlink, fresh netns)', nft),
    row('in-process rule install only (nft + route + rule, no ZDS; bench process)', inproc),
    ``,
    `ratio (Istio exec p50 / ${oursLabel}): iptables-restore+ip execs ${f(ratioIpt, 1)}x, nft -f ${f(ratioNft, 1)}x`,
    ``,
    `## Burst, restart, footprint`,
    ``,
    `| what | value |`,
    `|---|---:|`,
    ...burstRows('burst (full chain)', r.burst),
    ...burstRows('burst (istio-cni entry alone)', r.burstOurs),
    `| restart (SIGKILL, ${r.restart?.pods ?? '?'} pods): spawn -> /readyz 200 | ${f(r.restart?.readyMs, 1)} ms |`,
    `| restart: spawn -> stand-in reconnected | ${f(r.restart?.connectedMs, 1)} ms |`,
    `| restart: spawn -> stand-in has the full snapshot (ready, all pods running) | ${f(r.restart?.snapshotMs, 1)} ms |`,
    `| restart: stand-in reconnected -> full snapshot | ${r.restart ? f(r.restart.snapshotMs - r.restart.connectedMs, 1) : 'n/a'} ms |`,
    `| restart: \`startAgent()\` returned (its own 100 ms /readyz poll) | ${f(r.restart?.startAgentMs, 1)} ms |`,
    ...ztunnelRestartRows(r.ztunnelRestart, f),
    `| agent RSS / fds idle (no pods) | ${f(r.idle?.rssMb, 1)} MB / ${r.idle?.fds ?? 'n/a'} |`,
    `| agent RSS / fds with ${BURST} pods | ${f(r.with110?.rssMb, 1)} MB / ${r.with110?.fds ?? 'n/a'} |`,
    `| agent RSS / fds after restart with ${BURST} pods | ${f(r.afterRestart?.rssMb, 1)} MB / ${r.afterRestart?.fds ?? 'n/a'} |`,
    `| plugin binary (build/Release/istio-cni) | ${r.pluginBytes !== undefined ? `${(r.pluginBytes / 2 ** 20).toFixed(2)} MiB` : 'n/a'} |`,
    ``,
    `## Targets`,
    ``,
    `| target | measured | |`,
    `|---|---:|---|`,
    `| agent p50 <= ${TARGETS.agentP50Ms} ms | ${f(agent?.p50)} ms | ${met(agent ? agent.p50 <= TARGETS.agentP50Ms : undefined)} |`,
    `| >= ${TARGETS.ratio}x vs Istio exec (iptables-restore) | ${f(ratioIpt, 1)}x | ${met(ratioIpt !== undefined ? ratioIpt >= TARGETS.ratio : undefined)} |`,
    `| burst ${BURST} <= ${TARGETS.burstS} s | ${f(burstS)} s | ${met(burstS !== undefined ? burstS <= TARGETS.burstS : undefined)} |`,
    `| (burst ${BURST}, istio-cni entry alone <= ${TARGETS.burstS} s) | ${f(burstOursS)} s | ${met(burstOursS !== undefined ? burstOursS <= TARGETS.burstS : undefined)} |`,
    `| restart <= ${TARGETS.restartS} s | ${f(restartS)} s | ${met(restartS !== undefined ? restartS <= TARGETS.restartS : undefined)} |`,
    `| RSS <= ${TARGETS.rssMb} MB (110 pods) | ${f(rss110, 1)} MB | ${met(rss110 !== undefined ? rss110 <= TARGETS.rssMb : undefined)} |`,
    ``,
    `## Method`,
    ``,
    `- each pod: \`ip netns add\` + lo up (untimed), then the timed CNI runtime ADD exactly as DemoEnvironment.createPod runs it (same CniRuntime, node netns, plugin dirs, chained conflist), without the demo's echo app; every plugin exec'd through the addon's exec step in the node netns`,
    `- the ZDS ack comes from the demo's ztunnel stand-in, which enters the pod netns and binds its listeners before acking`,
    `- agent share: /metrics scraped before and after each sequential ADD; the histogram's _sum delta is that one ADD as the plugin-event server timed it (netns, rules, state file, ZDS ack)`,
    `- restart: \`stopAgent('SIGKILL')\`, then \`startAgent()\`; polled every 5 ms; "total" = max(/readyz, full snapshot); the stand-in reconnects with backoff (20 ms doubling, max 1 s), like ztunnel`,
    `- burst: the ${BURST} ADDs run concurrently from a separate runtime process (bench/node-cni-driver.ts: same CniRuntime, own addon thread pool), because the stand-in in this process needs the addon's thread pool to ack while each in-flight plugin exec holds a thread (in-process that deadlocks until the 5 s ZDS timeout); wall time measured in the driver from the first ADD until the last returned; "full chain" runs bridge + host-local + istio-cni per pod, "istio-cni entry alone" runs only our entry of the same conflist with the prevResult bridge + host-local would have passed (the part of the chain this project owns)`,
    `- ztunnel restart (bench/ztunnel-restart.ts): ${r.ztunnelRestart?.[0]?.pods ?? 'N'} concurrent ADDs (full chain, then the istio-cni entry alone) with a healthy stand-in, then the same with the stand-in stopped just before they start and a new one started BENCH_ZTUNNEL_GAP_MS (default 1000) after the first of them reached the agent; added latency = restart run minus healthy run (p50 and max per-pod ADD, as the runtime sees it); the full chain runs from the driver process (4 plugin execs at a time), so ADDs still queued there when the new stand-in is up do not wait; the istio-cni entry alone is exec'd for all pods at once from this process (it touches no netns), so all of them wait`,
    `- baseline: fresh namespace per sample, Istio's exec mechanisms posix_spawn'd from an addon thread (bench/support.ts execTool), interleaved with the in-process row; the baseline has no ZDS step, ours does`,
    ...r.notes.map((n) => `- ${n}`),
  ];
  const last = [
    `agent_p50_ms=${agent ? agent.p50.toFixed(3) : 'n/a'}`,
    `ratio_vs_istio_exec=${ratioIpt !== undefined ? ratioIpt.toFixed(1) : 'n/a'}`,
    `burst110_s=${burstS !== undefined ? burstS.toFixed(3) : 'n/a'}`,
    `restart110_s=${restartS !== undefined ? restartS.toFixed(3) : 'n/a'}`,
    `rss110_mb=${rss110 !== undefined ? rss110.toFixed(1) : 'n/a'}`,
    `ztunnel_restart_failed_adds=${r.ztunnelRestart ? r.ztunnelRestart.map((z) => `${z.restart.failed}/${z.pods}`).join(',') : 'n/a'}`,
  ];
  return { markdown: lines.join('\n'), last };
}

function burstRows(label: string, b: BurstResult | undefined): string[] {
  const pods = b ? summarize(b.perPod) : undefined;
  return [
    `| ${label}: ${BURST} concurrent ADDs, until all returned | ${f(b?.wallMs, 1)} ms |`,
    `| ${label}: slowest pod ADD; pod ADD p50 / p99 | ${f(b?.slowestMs, 1)}; ${f(pods?.p50, 1)} / ${f(pods?.p99, 1)} ms |`,
    `| ${label}: agent share p50 / p99 (histogram buckets, interpolated) / mean | ${b ? `${f(b.agentP50Ms, 2)} / ${f(b.agentP99Ms, 2)} / ${f(b.agentMeanMs, 2)}` : 'n/a'} ms |`,
    `| ${label}: pods newly running in the stand-in | ${b?.standInPods ?? 'n/a'} |`,
  ];
}

function writeOutputs(r: Results, markdown: string): void {
  const dir = join(projectRoot(), 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'node-latest.md'), `${markdown}\n`);
  const svg = cdfSvg(`Per-pod onboarding CDF: ours vs Istio exec (${r.pods} pods)`, [
    { label: 'ours: chained CNI ADD end to end', color: '#1f77b4', samples: r.total },
    { label: 'ours: agent share (incl. ZDS ack)', color: '#2ca02c', samples: r.agent },
    { label: 'Istio exec: 2x ip + iptables-restore', color: '#d62728', samples: r.baseline.iptExec },
    { label: 'Istio exec: nft -f', color: '#ff7f0e', samples: r.baseline.nftExec },
  ]);
  writeFileSync(join(dir, 'onboarding-cdf.svg'), svg);
}

// ---- main ----------------------------------------------------------------------------------

async function main(): Promise<void> {
  const problem = demoPrerequisites();
  if (problem) throw new Error(problem);
  const r: Results = { pods: readPods(), total: [], agent: [], zds: [], baseline: { iptExec: [], nftExec: [], inProcess: [] }, notes: [] };
  const only = readPhases();
  const wanted = (name: string): boolean => only === undefined || only.has(name);
  const env = new DemoEnvironment({ subnet: 177, agentNodeArgs: readAgentNodeArgs() });
  const pool = new NetnsPool();
  let pods: BenchPods | undefined;
  let cleaning: Promise<void> | undefined;
  const cleanup = (): Promise<void> =>
    (cleaning ??= (async () => {
      await pods?.removeAll().catch(() => undefined);
      pods?.destroyNamespacesSync();
      pods?.close();
      pool.destroyAll();
      await env.tearDown().catch(() => undefined);
    })());
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(signal, () => {
      process.stderr.write(`${signal}: cleaning up\n`);
      const timer = setTimeout(() => process.exit(128 + osConstants.signals[signal]), 20_000);
      void cleanup().finally(() => {
        clearTimeout(timer);
        process.exit(128 + osConstants.signals[signal]);
      });
    });
  }
  process.on('exit', () => {
    pods?.destroyNamespacesSync();
    pool.destroyAll();
  });
  try {
    await env.setUp();
    useAddonSpawner(env.addon);
    pods = new BenchPods(env);
    r.pluginBytes = statSync(join(projectRoot(), 'build', 'Release', 'istio-cni')).size;
    const pid = env.agentPid;
    if (pid === undefined) r.notes.push('agent pid not found: no footprint');
    let metricsPort: number | undefined;
    if (pid !== undefined) {
      r.agentPid = pid;
      for (const port of listeningPorts(pid).filter((p) => p !== env.healthPort)) {
        if (await scrapeOnboarding(port).then(() => true, () => false)) {
          metricsPort = port;
          break;
        }
      }
      if (metricsPort === undefined) r.notes.push('agent metrics port not found: agent share n/a');
      await new Promise((res) => setTimeout(res, 500));
      r.idle = footprint(pid);
    }
    r.metricsPort = metricsPort;
    process.stderr.write(`agent pid ${pid ?? '?'}, metrics port ${metricsPort ?? '?'}, health port ${env.healthPort}\n`);

    const phase = async (name: string, work: () => Promise<void>, group = name): Promise<boolean> => {
      if (!wanted(group)) return false;
      try {
        await work();
        return true;
      } catch (err) {
        const msg = (err as Error).message.split('\n')[0] ?? '';
        r.notes.push(`${name} FAILED: ${msg}`);
        process.stderr.write(`  ${name} failed: ${msg}\n`);
        return false;
      }
    };
    const bp = pods;
    await phase('onboarding', () => onboarding(r, bp, metricsPort));
    await phase('agent log', async () => {
      // The enroller's 'pod enrolled' line per pod carries zdsMs (send -> ztunnel ack).
      for (const line of readFileSync(env.agentLog, 'utf8').split('\n')) {
        if (!line.includes('"pod enrolled"')) continue;
        const rec = JSON.parse(line) as { pod?: string; zdsMs?: number };
        const k = Number(/^bench\/p(\d+)$/.exec(rec.pod ?? '')?.[1] ?? NaN);
        if (k <= r.pods && typeof rec.zdsMs === 'number') r.zds.push(rec.zdsMs);
      }
    }, 'onboarding');
    await phase('burst (istio-cni only)', async () => {
      r.burstOurs = await burst(env, bp, metricsPort, 'istio-cni');
      await bp.removeAll();
    }, 'burst');
    if (await phase('burst', async () => void (r.burst = await burst(env, bp, metricsPort, 'chain')))) {
      if (!wanted('restart')) r.notes.push('restart skipped (BENCH_PHASES)');
      if (pid !== undefined) r.with110 = footprint(pid);
      await phase('restart', () => restart(r, env));
      const newPid = env.agentPid;
      if (newPid !== undefined) r.afterRestart = footprint(newPid);
    }
    await bp.removeAll();
    await phase('ztunnel-restart', async () => void (r.ztunnelRestart = await ztunnelRestartPhase(env, bp, metricsPort)));
    await phase('baseline', () => baseline(r, env, pool, Math.min(r.pods, 200)));
    if (only) r.notes.push(`partial run: BENCH_PHASES=${[...only].join(',')}; bench/results not updated`);
    if (r.pods < DEFAULT_PODS) r.notes.push(`smoke run: BENCH_PODS=${r.pods} (the issue asks for ${DEFAULT_PODS})`);
    r.notes.push(`leftover bench namespaces before tearDown: ${pool.leftovers().length}`);
  } finally {
    await cleanup();
  }
  const { markdown, last } = report(r);
  if (!only) writeOutputs(r, markdown);
  console.log(markdown);
  console.log('');
  console.log(last.join('\n'));
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? (err.stack ?? err.message) : err);
  process.exitCode = 1;
});
