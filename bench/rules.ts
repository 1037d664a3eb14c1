// Per-pod rule-install latency: the addon's in-process path (open netns + one libnftables
// transaction + netlink route/rule) against Istio's mechanisms (exec'd iptables-restore and
// `nft -f`), each timed in its own fresh namespace, interleaved round-robin in one run.
// Usage: BENCH_PODS=200 [BENCH_IPV6=1] node dist/bench/rules.js   (root; creates namespaces only)
import { execFileSync } from 'node:child_process';
import { constants as osConstants, cpus, release } from 'node:os';

import { NativeNetAddon, type NetnsIdentity } from '../src/addon/net-addon.js';
import { currentThreadNetns, fdCount } from '../test/helpers/netns-files.js';
import {
  DEFAULT_HOST_PROBE_SNAT_IPV4,
  INPOD_TPROXY_MARK,
  INPOD_TPROXY_MASK,
  IP_RULE_PRIORITY,
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
import { defaultRuleSettings, NO_OVERRIDES } from '../src/rules/settings.js';
import { readIstioGolden } from '../test/fixtures/istio-golden.js';
import {
  type BenchNetns,
  elapsedMs,
  execIn,
  execTool,
  useAddonSpawner,
  formatTable,
  ip,
  NetnsPool,
  summarize,
  summaryRow,
  timeMs,
} from './support.js';

const MIN_PODS = 200;
const TARGET_RATIO = 15;

interface Config {
  pods: number;
  ipv6: boolean;
}

interface Ctx {
  addon: NativeNetAddon;
  nftRules: NftablesInpodRules;
  iptRules: IptablesInpodRules;
  script: string;
  restore: { v4: string; v6?: string };
  ipv6: boolean;
}

type Sample = [label: string, ms: number];

/** One thing done per fresh namespace; `check` says how to prove it installed the rules. */
interface Slot {
  run(ctx: Ctx, ns: BenchNetns): Promise<Sample[]>;
  check: 'nft' | 'iptables';
}

const L = {
  inProcess: 'in-process nftables (addon)',
  iptRestore: 'exec iptables-restore (Istio iptables)',
  nftExec: 'exec nft -f (Istio nftables via knftables)',
  iptAllExec: 'exec iptables-restore + 2x exec ip',
  iptBackend: 'project iptables backend (save+restore)',
  openClose: 'openNetns + close',
  hop: 'addon.run([]) (thread hop + setns)',
  nftOnly: 'addon.run([nft]) (nft transaction)',
  routeOnly: 'addon.run(route+rule) (netlink)',
} as const;

const MAIN_ROWS = [L.inProcess, L.iptRestore, L.nftExec, L.iptAllExec, L.iptBackend];
const DETAIL_ROWS = [L.openClose, L.hop, L.nftOnly, L.routeOnly];

function readConfig(): Config {
  const raw = process.env['BENCH_PODS'];
  const pods = raw === undefined ? MIN_PODS : Number(raw);
  if (!Number.isInteger(pods) || pods < 1) throw new Error(`BENCH_PODS must be a positive integer, got ${JSON.stringify(raw)}`);
  return { pods, ipv6: process.env['BENCH_IPV6'] === '1' };
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

/** The same routing as routingApplySteps, as `ip` execs (route first, then rule, per family). */
function routingExecs(ns: BenchNetns, ipv6: boolean): string[][] {
  const families: Array<[string, string]> = ipv6 ? [['-4', '0.0.0.0/0'], ['-6', '::/0']] : [['-4', '0.0.0.0/0']];
  const mark = `0x${INPOD_TPROXY_MARK.toString(16)}/0x${INPOD_TPROXY_MASK.toString(16)}`;
  const table = String(ROUTE_TABLE_INBOUND);
  return families.flatMap(([flag, dst]) => [
    nsenter(ns, ['ip', flag, 'route', 'replace', 'local', dst, 'dev', 'lo', 'table', table]),
    nsenter(ns, ['ip', flag, 'rule', 'add', 'fwmark', mark, 'pref', String(IP_RULE_PRIORITY), 'lookup', table]),
  ]);
}

async function allExec(ctx: Ctx, ns: BenchNetns): Promise<void> {
  for (const argv of routingExecs(ns, ctx.ipv6)) await execTool(argv);
  await execRestore(ctx, ns);
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
    const nft = await timeMs(() => ctx.addon.run(handle, [{ op: 'nft', script: ctx.script }]));
    const routing = await timeMs(() => ctx.addon.run(handle, routingApplySteps(ctx.ipv6)));
    return [[L.openClose, openClose], [L.hop, hop], [L.nftOnly, nft], [L.routeOnly, routing]];
  } finally {
    handle.close();
  }
}

const SLOTS: Slot[] = [
  timed(L.inProcess, 'nft', inProcess),
  timed(L.iptRestore, 'iptables', (ctx, ns) => withAddonRouting(ctx, ns, () => execRestore(ctx, ns))),
  timed(L.nftExec, 'nft', (ctx, ns) =>
    withAddonRouting(ctx, ns, () => execTool(nsenter(ns, ['nft', '-f', '-']), ctx.script)),
  ),
  timed(L.iptAllExec, 'iptables', allExec),
  timed(L.iptBackend, 'iptables', iptablesBackend),
  { check: 'nft', run: breakdown },
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
  const pairs: Array<[string, string | undefined]> = [['iptables-save', ctx.restore.v4], ['ip6tables-save', ctx.restore.v6]];
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

async function inFreshNetns<T>(pool: NetnsPool, work: (ns: BenchNetns) => Promise<T>): Promise<T> {
  const ns = await pool.create();
  try {
    return await work(ns);
  } finally {
    await pool.destroy(ns);
  }
}

/** Runs every slot once and checks the result, so no row can be timing a no-op. Returns first samples. */
async function verifySlots(ctx: Ctx, pool: NetnsPool): Promise<Map<string, number>> {
  const first = new Map<string, number>();
  for (const slot of SLOTS) {
    const samples = await inFreshNetns(pool, async (ns) => {
      const result = await slot.run(ctx, ns);
      assertInstalled(ctx, ns, slot.check);
      return result;
    });
    for (const [label, ms] of samples) first.set(label, ms);
  }
  return first;
}

/** Each iteration runs every slot once, starting at a rotating slot, so load drift hits all alike. */
async function runRounds(ctx: Ctx, pool: NetnsPool, pods: number): Promise<Map<string, number[]>> {
  const samples = new Map<string, number[]>();
  for (let i = 0; i < pods; i++) {
    const k = i % SLOTS.length;
    for (const slot of [...SLOTS.slice(k), ...SLOTS.slice(0, k)]) {
      for (const [label, ms] of await inFreshNetns(pool, (ns) => slot.run(ctx, ns))) {
        const list = samples.get(label) ?? [];
        list.push(ms);
        samples.set(label, list);
      }
    }
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

function ratioLines(samples: Map<string, number[]>): { notes: string[]; ratio: number } {
  const base = p50(samples, L.inProcess);
  const ratio = p50(samples, L.iptRestore) / base;
  const others = [L.nftExec, L.iptAllExec, L.iptBackend].map((l) => `${l}: ${(p50(samples, l) / base).toFixed(1)}x`);
  return { ratio, notes: [`p50 ratios vs in-process: ${L.iptRestore}: ${ratio.toFixed(1)}x; ${others.join('; ')}`] };
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
    `each sample: fresh netns (ip netns add + lo up, untimed) -> one mechanism (timed, process.hrtime.bigint) -> ip netns del (untimed)`,
    `every child process (untimed setup and the exec rows) is posix_spawn'd (clone with CLONE_VM|CLONE_VFORK, as Go/Istio spawns) from an addon thread in the host netns; Node's fork-based child_process would leave this process copy-on-write and bill the in-process rows for the page faults`,
    `mechanisms interleaved round-robin per iteration with a rotating start; ${cfg.pods} iterations; namespaces ${pool.prefix}*`,
    `routing: the two exec rows "${L.iptRestore}" and "${L.nftExec}" do ip route/rule via netlink in-process (addon), as Istio does, so they differ from in-process only by the exec; "${L.iptAllExec}" execs \`nsenter ip route replace\` + \`nsenter ip rule add\` instead`,
    `exec rows use \`nsenter --net=<path>\` (one extra exec vs Istio, which spawns from a setns'd thread); "${L.iptBackend}" = IptablesInpodRules.apply: iptables-save state check + netlink routing + iptables-restore, posix_spawn'd from an addon thread inside the netns (no nsenter; Istio additionally runs ip6tables-save)`,
    `every mechanism ran once before timing and was checked with nft list ruleset / iptables-save / ip rule / ip route (rule counts match the input)`,
  ];
}

function header(cfg: Config): string[] {
  const mode = cfg.ipv6 ? 'IPv6 on' : 'IPv6 off';
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

function makeCtx(cfg: Config): Ctx {
  const addon = new NativeNetAddon();
  const settings = defaultRuleSettings({ ipv6: cfg.ipv6, dnsCapture: true });
  const nftRules = new NftablesInpodRules(addon, settings);
  const iptRules = new IptablesInpodRules(addon, settings);
  const script = nftRules.script(NO_OVERRIDES);
  return { addon, nftRules, iptRules, script, restore: iptRules.restoreInputs(NO_OVERRIDES), ipv6: cfg.ipv6 };
}

interface Measurement {
  samples: Map<string, number[]>;
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
  return { samples, warmUpMs, firstInProcessMs: first.get(L.inProcess) ?? NaN, start, before, after, home };
}

function report(cfg: Config, ctx: Ctx, pool: NetnsPool, m: Measurement): string[] {
  const { notes: ratioNotes, ratio } = ratioLines(m.samples);
  const maxInProcess = summarize(m.samples.get(L.inProcess) ?? []).max;
  const notes = [
    ...ratioNotes,
    `nftRules.warmUp() took ${m.warmUpMs.toFixed(2)} ms; first in-process apply after it (verification pass, untimed) ${m.firstInProcessMs.toFixed(3)} ms; max in the loop ${maxInProcess.toFixed(3)} ms`,
    ...methodNotes(cfg, pool),
    ...resourceNotes(m.start, m.before, m.after, m.home),
    `leftover namespaces ${pool.prefix}* before exit: ${pool.leftovers().length}`,
    ...(cfg.pods < MIN_PODS ? [`smoke run: BENCH_PODS=${cfg.pods} is below the ${MIN_PODS} the issue asks for`] : []),
  ];
  const warnings = [
    ...(m.before.fds !== m.after.fds ? [`WARNING: fd count changed across the timed loop (${m.before.fds} -> ${m.after.fds})`] : []),
    ...(ratio < TARGET_RATIO ? [`WARNING: in-process p50 is only ${ratio.toFixed(1)}x faster than exec iptables-restore (target ${TARGET_RATIO}x)`] : []),
  ];
  return [
    ...header(cfg),
    goldenNote(ctx),
    '',
    tableFor(MAIN_ROWS, m.samples, 3),
    '',
    'in-process parts (same run, own namespaces):',
    tableFor(DETAIL_ROWS, m.samples, 3),
    '',
    'notes:',
    ...notes.map((n) => `- ${n}`),
    ...warnings,
    `ratio_vs_iptables_restore=${ratio.toFixed(1)}`, // must stay the last line
  ];
}

async function main(): Promise<void> {
  const cfg = readConfig();
  const pool = new NetnsPool();
  installCleanup(pool);
  try {
    const ctx = makeCtx(cfg);
    useAddonSpawner(ctx.addon);
    const measurement = await measure(cfg, ctx, pool);
    console.log(report(cfg, ctx, pool, measurement).join('\n'));
  } finally {
    pool.destroyAll();
  }
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? (err.stack ?? err.message) : err);
  process.exitCode = 1;
});
