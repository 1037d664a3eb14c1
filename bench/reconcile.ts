// Live reconciliation benchmark (root): detection-to-repair latency and the idle cost per pod.
// BENCH_PODS pods (default 100) in real namespaces with real rules are watched by the reconciler
// (default 30 s sweep). Latency: each of BENCH_FLUSHES `nft flush ruleset` runs (spread over the
// pods, one at a time, at least 300 ms apart so no backoff applies, plus a random part of the
// poll period so they land at every phase of the poll) is timed from the moment the flushing
// process exited to the moment the repair finished (the reconciler's repair callback). Idle:
// the process's CPU (utime + stime, /proc/self/stat) over BENCH_IDLE_SECONDS with all pods
// watched, per pod, and the watch fds per pod. nf_tables changes are found by asking each pod's
// netns for its ruleset generation every NFT_POLL_MS (the agent's default), so a flush waits for
// the next ask: detection is bounded by the poll, the cost is the asks.
import { execFile, execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus, release } from 'node:os';
import { promisify } from 'node:util';
import { NativeNetAddon } from '../src/addon/net-addon.js';
import { NFT_POLL_MS } from '../src/addon/netns-watch.js';
import { reconcileRegisteredPods } from '../src/reconcile/pod-targets.js';
import { Reconciler } from '../src/reconcile/reconciler.js';
import { StampedRules } from '../src/reconcile/stamped-rules.js';
import { ROUTE_TABLE_INBOUND } from '../src/rules/constants.js';
import { NftablesInpodRules } from '../src/rules/nftables-manager.js';
import { defaultRuleSettings, NO_OVERRIDES } from '../src/rules/settings.js';
import { mapLimit } from '../src/util/map-limit.js';
import { PodRegistry } from '../src/zds/registry.js';
import { writeResult } from './support.js';

const run = promisify(execFile);
const PODS = Number(process.env['BENCH_PODS'] ?? 100);
const FLUSHES = Number(process.env['BENCH_FLUSHES'] ?? 60);
const IDLE_S = Number(process.env['BENCH_IDLE_SECONDS'] ?? 40);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function cpuMs(): number {
  const stat = readFileSync('/proc/self/stat', 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) * 10;
}

const pct = (sorted: number[], p: number): number => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;

async function main(): Promise<void> {
  const names = Array.from({ length: PODS }, (_, i) => `anb${process.pid}-${i}`);
  try {
    for (const n of names) {
      execFileSync('ip', ['netns', 'add', n]);
      execFileSync('ip', ['-n', n, 'link', 'set', 'lo', 'up']);
    }
    const addon = new NativeNetAddon();
    addon.warmUp();
    const rules = new StampedRules(new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: false })));
    const registry = new PodRegistry({ podAdded: async () => undefined, podDeleted: async () => undefined });
    const handles = names.map((n) => addon.openNetns(`/var/run/netns/${n}`));
    await mapLimit(handles, 4, (h) => rules.apply(h, NO_OVERRIDES));
    const repairedAt = new Map<string, number>();
    let checks = 0;
    const reconciler = new Reconciler({
      addon,
      routeTable: ROUTE_TABLE_INBOUND,
      intervalMs: 30_000,
      metrics: { repairs: () => undefined, check: () => void checks++ },
    });
    reconcileRegisteredPods(reconciler, registry, rules, {
      onOutcome: (uid, outcome) => {
        if (outcome.status === 'repaired') repairedAt.set(uid, performance.now());
      },
    });
    reconciler.start();
    handles.forEach((h, i) => registry.adopt({ uid: `p${i}`, name: `p${i}`, namespace: 'bench', serviceAccount: 'default' }, h));
    while (checks < PODS) await sleep(50);

    const cpu0 = cpuMs();
    const t0 = Date.now();
    await sleep(IDLE_S * 1000);
    const idleShare = (cpuMs() - cpu0) / (Date.now() - t0);

    const latencies: number[] = [];
    for (let i = 0; i < FLUSHES; i++) {
      const uid = `p${i % PODS}`;
      repairedAt.delete(uid);
      await run('ip', ['netns', 'exec', names[i % PODS]!, 'nft', 'flush', 'ruleset']);
      const flushed = performance.now();
      while (!repairedAt.has(uid) && performance.now() - flushed < 5_000) await sleep(1);
      latencies.push((repairedAt.get(uid) ?? NaN) - flushed);
      // 300 ms apart (no backoff applies) plus a random part of the poll period, so the flushes
      // land at every phase of the poll instead of a fixed one after its last ask.
      await sleep(300 + Math.random() * NFT_POLL_MS);
    }
    latencies.sort((a, b) => a - b);
    const fdsPerPod = reconciler.watchFds() / PODS;
    reconciler.stop();
    registry.close();
    const table = [
      '| live reconciliation | value |',
      '|---|---|',
      `| detection to repair after \`nft flush ruleset\` in a pod (${FLUSHES} flushes over ${PODS} watched pods, generation asked every ${NFT_POLL_MS} ms) | p50 ${pct(latencies, 50).toFixed(1)} ms, p99 ${pct(latencies, 99).toFixed(1)} ms |`,
      `| idle cost, ${PODS} watched pods, ${IDLE_S} s, 30 s sweep, nftables generation asked every ${NFT_POLL_MS} ms | ${(idleShare * 100).toFixed(3)}% of one core (${((idleShare * 1e6) / PODS).toFixed(2)} µs CPU per pod per second), ${fdsPerPod} watch fds per pod |`,
      '',
      `reconcile_p50_ms=${pct(latencies, 50).toFixed(2)} reconcile_p99_ms=${pct(latencies, 99).toFixed(2)} idle_core_pct=${(idleShare * 100).toFixed(3)}`,
    ];
    console.log(table.join('\n'));
    writeReconcileResult(table);
  } finally {
    for (const n of names) {
      try {
        execFileSync('ip', ['netns', 'del', n]);
      } catch {
        // already gone
      }
    }
  }
}

/** bench/results keeps the last run with the defaults (a run with other sizes is not "the" result). */
function writeReconcileResult(table: string[]): void {
  const custom = ['BENCH_PODS', 'BENCH_FLUSHES', 'BENCH_IDLE_SECONDS'].filter((k) => process.env[k] !== undefined);
  if (custom.length > 0) return void console.log(`(${custom.join(', ')} set: bench/results not updated)`);
  const header = [
    '# ambient-node-agent live reconciliation benchmark',
    '',
    `host: kernel ${release()}, ${cpus().length} CPUs, node ${process.version}; ${new Date().toISOString()}`,
    '',
    `\`npm run bench:reconcile\` with its defaults: ${PODS} pods in real namespaces with the agent's rules, watched by the live reconciler with the agent's nftables generation poll (${NFT_POLL_MS} ms); first ${IDLE_S} s with every pod watched and nothing changing (the process's utime + stime), then ${FLUSHES} \`nft flush ruleset\` runs, one pod at a time, each at a random phase of the poll, timed from the flushing process's exit to the end of the repair.`,
    '',
  ];
  writeResult('reconcile-latest.md', `${[...header, ...table].join('\n')}\n`);
}

await main();
