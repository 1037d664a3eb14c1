// Per-pod rule-install latency: the addon's in-process path (open netns + the prebuilt nf_tables
// batch + the routing in one rtnetlink sendmsg, one netns visit) against what Istio's node agent
// really runs per pod (bench/istio-sequences.ts: the iptables and the knftables sequences), and
// the single-exec rows of earlier runs, each timed in its own fresh namespace (all of a round's
// created before its first sample), interleaved round-robin; with IPv6 on (Istio's chart
// default) and off.
// Usage: BENCH_PODS=200 [BENCH_IPV6=1|0] node dist/bench/rules.js   (root; creates namespaces only)
import { execFileSync } from 'node:child_process';
import { constants as osConstants, cpus, release } from 'node:os';

import { NativeNetAddon, type NetnsIdentity } from '../src/addon/net-addon.js';
import { currentThreadNetns, fdCount } from '../test/helpers/netns-files.js';
import {
  DEFAULT_HOST_PROBE_SNAT_IPV4,
  INPOD_TPROXY_MARK,
  INPOD_TPROXY_MASK,
  IPT_CHAIN_OUTPUT,
  IPT_CHAIN_PREROUTING,
  NFT_TABLE_MANGLE,
  NFT_TABLE_NAT,
  NFT_TABLE_RAW,
  ROUTE_TABLE_INBOUND,
} from '../src/rules/constants.js';
import { IptablesInpodRules } from '../src/rules/iptables-manager.js';
import { NftablesInpodRules } from '../src/rules/nftables-manager.js';
import { routingApplySteps } from '../src/rules/routing.js';
import { LISTENER_ROWS, measureListenerTax } from './listener-tax.js';
import { describeIstioSequence, runIstioSequence, type IstioBackend, type IstioInputs } from './istio-sequences.js';
import { defaultRuleSettings, NO_OVERRIDES } from '../src/rules/settings.js';
import { readIstioGolden } from '../test/fixtures/istio-golden.js';
import {
  type BenchNetns,
  elapsedMs,
  execIn,
  execTool,
  useAddonSpawner,
  formatTable,
  inRoundOfNamespaces,
  ip,
  NetnsPool,
  summarize,
  summaryRow,
  timeMs,
  writeResult,
} from './support.js';

const MIN_PODS = 200;
const TARGETS = { rulesP50Ms: 0.6, ratioIptables: 15, ratioNftables: 10 };

interface Config {
  pods: number;
  /** The IPv6 settings to measure, in order; the last one's lines come last. */
  ipv6: boolean[];
}

interface Ctx {
  addon: NativeNetAddon;
  nftRules: NftablesInpodRules;
  iptRules: IptablesInpodRules;
  script: string;
  restore: { v4: string; v6?: string };
  ipv6: boolean;
  istio: IstioInputs;
  batch: Uint8Array;
}

type Sample = [label: string, ms: number];

/** One thing done per fresh namespace; `check` says how to prove it installed the rules. */
interface Slot {
  run(ctx: Ctx, ns: BenchNetns): Promise<Sample[]>;
  check: 'nft' | 'iptables';
}

const L = {
  inProcess: 'ours: in-process (nft batch + routing, one netns visit)',
  istioIpt: "Istio's iptables sequence (chart default)",
  istioNft: "Istio's knftables sequence (NATIVE_NFTABLES)",
  iptRestore: 'single exec: nsenter iptables-restore (+ routing via netlink)',
  nftExec: 'single exec: nsenter nft -f (+ routing via netlink)',
  iptBackend: 'project iptables backend (save + restore)',
  openClose: 'openNetns + close',
  hop: 'addon.run([]) (thread hop + setns)',
  batchOnly: 'addon.run([nftBatch]) (prebuilt batch, one sendmsg)',
  nftOnly: 'addon.run([nft]) (libnftables text, the fallback)',
  routeOnly: 'addon.run([routing]) (one rtnetlink sendmsg)',
  batchUser: '  nftBatch: user CPU (all threads, process.cpuUsage)',
  batchSys: '  nftBatch: kernel CPU (all threads, process.cpuUsage)',
  textUser: '  nft text: user CPU (parse + evaluate in libnftables)',
  textSys: '  nft text: kernel CPU',
  routeUser: '  routing: user CPU',
  routeSys: '  routing: kernel CPU',
} as const;

const MAIN_ROWS = [L.inProcess, L.istioIpt, L.istioNft, L.iptRestore, L.nftExec, L.iptBackend];
const DETAIL_ROWS = [
  L.openClose,
  L.hop,
  L.batchOnly,
  L.batchUser,
  L.batchSys,
  L.nftOnly,
  L.textUser,
  L.textSys,
  L.routeOnly,
  L.routeUser,
  L.routeSys,
];

/** Wall time and the process's user/kernel CPU time of one awaited call (the JS thread only waits meanwhile). */
async function cpuTimed(work: () => Promise<unknown>): Promise<{ ms: number; userMs: number; sysMs: number }> {
  const before = process.cpuUsage();
  const ms = await timeMs(work);
  const used = process.cpuUsage(before);
  return { ms, userMs: used.user / 1000, sysMs: used.system / 1000 };
}

function readConfig(): Config {
  const raw = process.env['BENCH_PODS'];
  const pods = raw === undefined ? MIN_PODS : Number(raw);
  if (!Number.isInteger(pods) || pods < 1) throw new Error(`BENCH_PODS must be a positive integer, got ${JSON.stringify(raw)}`);
  const only = process.env['BENCH_IPV6'];
  return { pods, ipv6: only === undefined ? [false, true] : [only === '1'] };
}

// ---- the mechanisms -------------------------------------------------------------------------

function nsenter(ns: BenchNetns, argv: string[]): string[] {
  return ['nsenter', `--net=${ns.path}`, ...argv];
}

/** What the agent does per pod: open the netns, one apply (nft + route + rule), close. */
async function inProcess(ctx: Ctx, ns: BenchNetns): Promise<void> {
  const handle = ctx.addon.openNetns(ns.path);
  try {
    await ctx.nftRules.apply(handle, NO_OVERRIDES);
  } finally {
    handle.close();
  }
}

/**
 * Istio does the ip rule/route through netlink in-process and only execs the rule tool, so the
 * fair comparison does the routing through the addon too: the difference is then the exec alone.
 */
async function withAddonRouting(ctx: Ctx, ns: BenchNetns, execRules: () => Promise<void>): Promise<void> {
  const handle = ctx.addon.openNetns(ns.path);
  try {
    await ctx.addon.run(handle, routingApplySteps(ctx.ipv6));
    await execRules();
  } finally {
    handle.close();
  }
}

async function execRestore(ctx: Ctx, ns: BenchNetns): Promise<void> {
  await execTool(nsenter(ns, ['iptables-restore', '--noflush']), ctx.restore.v4);
  if (ctx.restore.v6 !== undefined) await execTool(nsenter(ns, ['ip6tables-restore', '--noflush']), ctx.restore.v6);
}

async function istio(ctx: Ctx, ns: BenchNetns, backend: IstioBackend): Promise<void> {
  const handle = ctx.addon.openNetns(ns.path);
  try {
    await runIstioSequence(ctx.addon, handle, backend, ctx.istio);
  } finally {
    handle.close();
  }
}

/** The project's own iptables fallback: iptables-save state check + routing + restore, spawned in the netns. */
async function iptablesBackend(ctx: Ctx, ns: BenchNetns): Promise<void> {
  const handle = ctx.addon.openNetns(ns.path);
  try {
    await ctx.iptRules.apply(handle, NO_OVERRIDES);
  } finally {
    handle.close();
  }
}

function timed(label: string, check: Slot['check'], work: (ctx: Ctx, ns: BenchNetns) => Promise<void>): Slot {
  return { check, run: async (ctx, ns) => [[label, await timeMs(() => work(ctx, ns))]] };
}

/** The in-process apply split into its parts (separate addon.run calls, so each pays a hop). */
async function breakdown(ctx: Ctx, ns: BenchNetns): Promise<Sample[]> {
  const openClose = await timeMs(() => ctx.addon.openNetns(ns.path).close());
  const handle = ctx.addon.openNetns(ns.path);
  try {
    const hop = await timeMs(() => ctx.addon.run(handle, []));
    const batch = await cpuTimed(() => ctx.addon.run(handle, [{ op: 'nftBatch', batch: ctx.batch, script: ctx.script }]));
    const routing = await cpuTimed(() => ctx.addon.run(handle, routingApplySteps(ctx.ipv6)));
    return [
      [L.openClose, openClose],
      [L.hop, hop],
      [L.batchOnly, batch.ms],
      [L.batchUser, batch.userMs],
      [L.batchSys, batch.sysMs],
      [L.routeOnly, routing.ms],
      [L.routeUser, routing.userMs],
      [L.routeSys, routing.sysMs],
    ];
  } finally {
    handle.close();
  }
}

/** The libnftables text path alone (the fallback), in a namespace of its own. */
async function textOnly(ctx: Ctx, ns: BenchNetns): Promise<Sample[]> {
  const handle = ctx.addon.openNetns(ns.path);
  try {
    const nft = await cpuTimed(() => ctx.addon.run(handle, [{ op: 'nft', script: ctx.script }]));
    await ctx.addon.run(handle, routingApplySteps(ctx.ipv6));
    return [
      [L.nftOnly, nft.ms],
      [L.textUser, nft.userMs],
      [L.textSys, nft.sysMs],
    ];
  } finally {
    handle.close();
  }
}

const SLOTS: Slot[] = [
  timed(L.inProcess, 'nft', inProcess),
  timed(L.istioIpt, 'iptables', (ctx, ns) => istio(ctx, ns, 'iptables')),
  timed(L.istioNft, 'nft', (ctx, ns) => istio(ctx, ns, 'nftables')),
  timed(L.iptRestore, 'iptables', (ctx, ns) => withAddonRouting(ctx, ns, () => execRestore(ctx, ns))),
  timed(L.nftExec, 'nft', (ctx, ns) => withAddonRouting(ctx, ns, () => execTool(nsenter(ns, ['nft', '-f', '-']), ctx.script))),
  timed(L.iptBackend, 'iptables', iptablesBackend),
  { check: 'nft', run: breakdown },
  { check: 'nft', run: textOnly },
];

// ---- proof that a mechanism really installed the rules -----------------------------------

/** Rule lines of an `nft list ruleset` listing (everything but table/chain headers and braces). */
function nftRuleLines(listing: string): number {
  return listing
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && l !== '}' && !/^(table|chain|type) /.test(l)).length;
}

function countMatches(text: string, re: RegExp): number {
  return text.split('\n').filter((l) => re.test(l)).length;
}

function assertNftInstalled(ctx: Ctx, ns: BenchNetns): void {
  const listing = execIn(ns, ['nft', 'list', 'ruleset']);
  const missing = [NFT_TABLE_NAT, NFT_TABLE_MANGLE, NFT_TABLE_RAW].filter((t) => !listing.includes(`table inet ${t}`));
  const want = countMatches(ctx.script, /^add rule /);
  const have = nftRuleLines(listing);
  if (missing.length > 0 || have !== want) {
    throw new Error(`nft rules not installed in ${ns.name}: missing tables [${missing.join(', ')}], ${have}/${want} rules`);
  }
}

function assertIptablesInstalled(ctx: Ctx, ns: BenchNetns): void {
  const pairs: Array<[string, string | undefined]> = [
    ['iptables-save', ctx.restore.v4],
    ['ip6tables-save', ctx.restore.v6],
  ];
  for (const [save, input] of pairs) {
    if (input === undefined) continue;
    const listing = execIn(ns, [save]);
    const want = countMatches(input, /^-[AI] /);
    const have = countMatches(listing, /^-A /);
    const chains = [IPT_CHAIN_OUTPUT, IPT_CHAIN_PREROUTING].every((c) => listing.includes(`:${c} `));
    if (!chains || have !== want) throw new Error(`${save} in ${ns.name}: ISTIO chains ${chains}, ${have}/${want} rules`);
  }
}

function assertRoutingInstalled(ctx: Ctx, ns: BenchNetns): void {
  const rule = `fwmark 0x${INPOD_TPROXY_MARK.toString(16)}/0x${INPOD_TPROXY_MASK.toString(16)} lookup ${ROUTE_TABLE_INBOUND}`;
  for (const family of ctx.ipv6 ? ['-4', '-6'] : ['-4']) {
    const rules = ip([family, '-n', ns.name, 'rule', 'show']);
    const routes = ip([family, '-n', ns.name, 'route', 'show', 'table', String(ROUTE_TABLE_INBOUND)]);
    if (!rules.includes(rule) || !routes.includes('local default dev lo')) {
      throw new Error(`routing not installed in ${ns.name} (${family}):\n${rules}${routes}`);
    }
  }
}

function assertInstalled(ctx: Ctx, ns: BenchNetns, check: Slot['check']): void {
  if (check === 'nft') assertNftInstalled(ctx, ns);
  else assertIptablesInstalled(ctx, ns);
  assertRoutingInstalled(ctx, ns);
}

// ---- running -----------------------------------------------------------------------------

/** Runs every slot once and checks the result, so no row can be timing a no-op. Returns first samples. */
async function verifySlots(ctx: Ctx, pool: NetnsPool): Promise<Map<string, number>> {
  const first = new Map<string, number>();
  await inRoundOfNamespaces(pool, SLOTS.length, async (namespaces) => {
    for (const [j, slot] of SLOTS.entries()) {
      const ns = namespaces[j]!;
      for (const [label, ms] of await slot.run(ctx, ns)) first.set(label, ms);
      assertInstalled(ctx, ns, slot.check);
    }
  });
  return first;
}

/** Each iteration runs every slot once, starting at a rotating slot, so load drift hits all alike. */
async function runRounds(ctx: Ctx, pool: NetnsPool, pods: number): Promise<Map<string, number[]>> {
  const samples = new Map<string, number[]>();
  for (let i = 0; i < pods; i++) {
    const k = i % SLOTS.length;
    const order = [...SLOTS.slice(k), ...SLOTS.slice(0, k)];
    await inRoundOfNamespaces(pool, order.length, async (namespaces) => {
      for (const [j, slot] of order.entries()) {
        for (const [label, ms] of await slot.run(ctx, namespaces[j]!)) {
          const list = samples.get(label) ?? [];
          list.push(ms);
          samples.set(label, list);
        }
      }
    });
    if ((i + 1) % 50 === 0 || i + 1 === pods) process.stderr.write(`  ${i + 1}/${pods} iterations\n`);
  }
  return samples;
}

interface Resources {
  rssMb: number;
  fds: number;
  threadsAlive: number;
  jobsRun: number;
  pending: number;
}

function resources(addon: NativeNetAddon): Resources {
  const s = addon.stats();
  return {
    rssMb: process.memoryUsage().rss / 2 ** 20,
    fds: fdCount(),
    threadsAlive: s.threadsAlive,
    jobsRun: s.jobsRun,
    pending: s.pending,
  };
}

// ---- report ------------------------------------------------------------------------------

function toolVersion(argv: string[]): string {
  try {
    return execFileSync(argv[0] ?? '', argv.slice(1), { encoding: 'utf8' }).trim();
  } catch {
    return `${argv[0]}: unavailable`;
  }
}

/** Whether the rule text is byte-identical to Istio's golden (only the IPv4 default case). */
function goldenNote(ctx: Ctx): string {
  if (ctx.ipv6) return 'IPv6 ruleset: not compared with a golden (the _ipv6 goldens use a test SNAT address)';
  const read = (dir: string): string | undefined => {
    try {
      return readIstioGolden(`${dir}/default.golden`);
    } catch {
      return undefined;
    }
  };
  const nft = read('nftables');
  const ipt = read('iptables');
  if (nft === undefined || ipt === undefined) return 'Istio golden files not found: rule text not compared';
  const nftSame = nft === ctx.script;
  // The iptables golden starts with the stub's record of Istio's iptables-save/ip6tables-save state check.
  const iptSame = ipt.replace(/^iptables-save\nip6tables-save\n/, '') + '\n' === ctx.restore.v4;
  return `rule text vs Istio default.golden: nft ${nftSame ? 'identical' : 'DIFFERENT'}, iptables-restore ${iptSame ? 'identical' : 'DIFFERENT'}`;
}

function tableFor(labels: readonly string[], samples: Map<string, number[]>, digits: number): string {
  const rows = labels.map((label) => summaryRow(label, summarize(samples.get(label) ?? []), digits));
  return formatTable(['mechanism', 'n', 'p50 ms', 'p90 ms', 'p99 ms', 'mean ms'], rows);
}

function p50(samples: Map<string, number[]>, label: string): number {
  return summarize(samples.get(label) ?? []).p50;
}

interface Ratios {
  oursMs: number;
  iptables: number;
  nftables: number;
}

function ratios(samples: Map<string, number[]>): Ratios {
  const oursMs = p50(samples, L.inProcess);
  return { oursMs, iptables: p50(samples, L.istioIpt) / oursMs, nftables: p50(samples, L.istioNft) / oursMs };
}

function ratioNotes(samples: Map<string, number[]>, r: Ratios): string[] {
  const single = [L.iptRestore, L.nftExec, L.iptBackend].map((l) => `${l}: ${(p50(samples, l) / r.oursMs).toFixed(1)}x`);
  return [`p50 ratios vs ours: ${L.istioIpt}: ${r.iptables.toFixed(1)}x; ${L.istioNft}: ${r.nftables.toFixed(1)}x; ${single.join('; ')}`];
}

function resourceNotes(start: Resources, before: Resources, after: Resources, home: NetnsIdentity): string[] {
  const now = currentThreadNetns();
  return [
    `RSS: ${start.rssMb.toFixed(1)} MB at start, ${before.rssMb.toFixed(1)} MB before the timed loop, ${after.rssMb.toFixed(1)} MB after`,
    `open fds: ${before.fds} before the timed loop, ${after.fds} after (${before.fds === after.fds ? 'equal, no leak' : 'LEAK'})`,
    `addon executor: ${after.threadsAlive} threads alive, ${after.jobsRun - before.jobsRun} jobs in the loop, ${after.pending} pending`,
    `JS thread netns unchanged: ${now.ino === home.ino && now.dev === home.dev ? 'yes' : 'NO'}`,
  ];
}

function methodNotes(cfg: Config, pool: NetnsPool): string[] {
  return [
    `each sample: its own fresh netns (ip netns add + lo up, untimed), one mechanism (timed, process.hrtime.bigint); a round's namespaces are all created before its first sample and deleted after its last (ip netns del, untimed), so no sample runs right after the setup processes or right after a namespace's delete (whose teardown the kernel finishes asynchronously)`,
    `every child process (untimed setup and the exec rows) is posix_spawn'd (clone with CLONE_VM|CLONE_VFORK, as Go/Istio spawns) from an addon thread in the host netns; Node's fork-based child_process would leave this process copy-on-write and bill the in-process rows for the page faults`,
    `mechanisms interleaved round-robin per iteration with a rotating start; ${cfg.pods} iterations; namespaces ${pool.prefix}*`,
    `Istio's sequences (bench/istio-sequences.ts): one addon job in the pod netns, every process posix_spawn'd from the worker thread that setns()ed in (as Istio spawns from its netns-locked OS thread; no nsenter), the routing one netlink request per change from that thread`,
    `single-exec rows (kept from earlier runs, not what Istio runs): one \`nsenter --net=<path>\` exec of the rule tool plus the routing via netlink in-process; "${L.iptBackend}" = IptablesInpodRules.apply (this project's iptables backend)`,
    `every mechanism ran once before timing and was checked with nft list ruleset / iptables-save / ip rule / ip route (rule counts match the input)`,
  ];
}

function header(ipv6: boolean): string[] {
  const mode = ipv6 ? 'IPv6 on (AMBIENT_IPV6=true, the chart default)' : 'IPv6 off';
  return [
    `ambient-node-agent rule-install benchmark (per pod, fresh namespace per sample)`,
    `host: kernel ${release()}, ${cpus().length} CPUs, node ${process.version}, ${toolVersion(['iptables', '--version'])}, ${toolVersion(['nft', '--version'])}`,
    `ruleset: Istio defaults, ${mode}, DNS capture on, no pod overrides, SNAT ${DEFAULT_HOST_PROBE_SNAT_IPV4}`,
  ];
}

// ---- main --------------------------------------------------------------------------------

function installCleanup(pool: NetnsPool): void {
  process.on('exit', () => pool.destroyAll());
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(signal, () => {
      pool.destroyAll();
      process.exit(128 + osConstants.signals[signal]);
    });
  }
}

async function makeCtx(addon: NativeNetAddon, ipv6: boolean): Promise<Ctx> {
  const settings = defaultRuleSettings({ ipv6, dnsCapture: true });
  const nftRules = new NftablesInpodRules(addon, settings);
  const iptRules = new IptablesInpodRules(addon, settings);
  const script = nftRules.script(NO_OVERRIDES);
  const restore = iptRules.restoreInputs(NO_OVERRIDES);
  const istio = { ipv6, nftScript: script, restoreV4: restore.v4, ...(restore.v6 !== undefined ? { restoreV6: restore.v6 } : {}) };
  const batch = await nftRules.prepare(NO_OVERRIDES);
  return { addon, nftRules, iptRules, script, restore, ipv6, istio, batch };
}

interface Measurement {
  samples: Map<string, number[]>;
  listenerTax: Map<string, number[]>;
  warmUpMs: number;
  firstInProcessMs: number;
  start: Resources;
  before: Resources;
  after: Resources;
  home: NetnsIdentity;
}

async function measure(cfg: Config, ctx: Ctx, pool: NetnsPool): Promise<Measurement> {
  const home = currentThreadNetns();
  const start = resources(ctx.addon);
  const warmStart = process.hrtime.bigint();
  await ctx.nftRules.warmUp(); // libnftables' one-time init, paid here and not by the first pod
  const warmUpMs = elapsedMs(warmStart);
  const first = await verifySlots(ctx, pool);
  const before = resources(ctx.addon);
  const samples = await runRounds(ctx, pool, cfg.pods);
  const after = resources(ctx.addon);
  const listenerTax = await measureListenerTax(ctx.addon, pool, { op: 'nftBatch', batch: ctx.batch, script: ctx.script });
  return { samples, listenerTax, warmUpMs, firstInProcessMs: first.get(L.inProcess) ?? NaN, start, before, after, home };
}

function report(cfg: Config, ctx: Ctx, pool: NetnsPool, m: Measurement): { lines: string[]; ratios: Ratios } {
  const r = ratios(m.samples);
  const maxInProcess = summarize(m.samples.get(L.inProcess) ?? []).max;
  const notes = [
    ...ratioNotes(m.samples, r),
    `nftRules.warmUp() took ${m.warmUpMs.toFixed(2)} ms (compiles the batch); first in-process apply after it (verification pass, untimed) ${m.firstInProcessMs.toFixed(3)} ms; max in the loop ${maxInProcess.toFixed(3)} ms; batch fallbacks to the text: ${ctx.nftRules.batchFallbacks}`,
    ...methodNotes(cfg, pool),
    ...resourceNotes(m.start, m.before, m.after, m.home),
    ...(cfg.pods < MIN_PODS ? [`smoke run: BENCH_PODS=${cfg.pods} is below the ${MIN_PODS} the issue asks for`] : []),
  ];
  const warnings =
    m.before.fds !== m.after.fds ? [`WARNING: fd count changed across the timed loop (${m.before.fds} -> ${m.after.fds})`] : [];
  const lines = [
    ...header(ctx.ipv6),
    goldenNote(ctx),
    '',
    tableFor(MAIN_ROWS, m.samples, 3),
    '',
    'in-process parts (same run, own namespaces):',
    tableFor(DETAIL_ROWS, m.samples, 3),
    '',
    'an nf_tables listener anywhere on the node (after the loop; alternating blocks, fresh namespaces; bench/listener-tax.ts):',
    tableFor(Object.values(LISTENER_ROWS), m.listenerTax, 3),
    '',
    `${L.istioIpt}, per pod, as the bench runs it:`,
    ...describeIstioSequence('iptables', ctx.istio, false).map((l) => `  ${l}`),
    `${L.istioNft}, per pod, as the bench runs it:`,
    ...describeIstioSequence('nftables', ctx.istio, false).map((l) => `  ${l}`),
    '',
    'notes:',
    ...notes.map((n) => `- ${n}`),
    ...warnings,
  ];
  return { lines, ratios: r };
}

function targetLines(results: Array<{ ipv6: boolean; ratios: Ratios }>): string[] {
  const lines: string[] = [];
  for (const { ipv6, ratios: r } of results) {
    const tag = ipv6 ? 'IPv6 on' : 'IPv6 off';
    lines.push(
      `${tag}: ours p50 ${r.oursMs.toFixed(3)} ms (target <= ${TARGETS.rulesP50Ms} with IPv6 on), Istio iptables ${r.iptables.toFixed(1)}x (target >= ${TARGETS.ratioIptables}), Istio knftables ${r.nftables.toFixed(1)}x (target >= ${TARGETS.ratioNftables})`,
    );
  }
  // The lines come from the IPv6-on run (the chart default) when there is one.
  const main = results.find((x) => x.ipv6) ?? results[results.length - 1]!;
  const note = main.ipv6 ? '' : ' (IPv6 off: BENCH_IPV6=0)';
  lines.push(
    `rules_p50_ms=${main.ratios.oursMs.toFixed(3)}${note}`,
    `rules_ratio_vs_istio_iptables=${main.ratios.iptables.toFixed(1)}`,
    `rules_ratio_vs_istio_nftables=${main.ratios.nftables.toFixed(1)}`,
  );
  return lines;
}

async function main(): Promise<void> {
  const cfg = readConfig();
  const pool = new NetnsPool();
  installCleanup(pool);
  const results: Array<{ ipv6: boolean; ratios: Ratios }> = [];
  try {
    const addon = new NativeNetAddon();
    useAddonSpawner(addon);
    const printed: string[] = [];
    for (const ipv6 of cfg.ipv6) {
      const ctx = await makeCtx(addon, ipv6);
      const measurement = await measure(cfg, ctx, pool);
      const { lines, ratios: r } = report(cfg, ctx, pool, measurement);
      printed.push(...lines, '');
      console.log(lines.join('\n'));
      console.log('');
      results.push({ ipv6, ratios: r });
    }
    printed.push(`leftover namespaces ${pool.prefix}* before exit: ${pool.leftovers().length}`, ...targetLines(results));
    console.log(printed.slice(printed.length - targetLines(results).length - 1).join('\n')); // the rules_* lines stay last
    writeRulesResult(results, printed);
  } finally {
    pool.destroyAll();
  }
}

/** Kept for bench:node, which repeats every target line at the very end of `npm run bench`. */
function writeRulesResult(results: Array<{ ipv6: boolean; ratios: Ratios }>, printed: string[]): void {
  if (process.env['BENCH_PODS'] === undefined) writeResult('rules-latest.txt', `${printed.join('\n')}\n`);
  writeResult(
    'rules-latest.json',
    `${JSON.stringify({ at: new Date().toISOString(), lines: targetLines(results).filter((l) => /^[a-z0-9_]+=/.test(l)) }, null, 2)}\n`,
  );
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? (err.stack ?? err.message) : err);
  process.exitCode = 1;
});
