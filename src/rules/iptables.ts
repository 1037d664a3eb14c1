// iptables-restore --noflush input, byte-compatible with Istio's builder
// (tools/istio-iptables/pkg/builder, goldens in cni/pkg/iptables/testdata). Each restore
// text ends with "COMMIT\n": iptables-restore only recognises the line "COMMIT\n", so the
// final newline is required (the goldens show the text line by line, without it).

import {
  DNS_CONNTRACK_ZONE,
  DNS_PORT,
  INPOD_MARK,
  INPOD_MASK,
  INPOD_RESTORE_MASK,
  INPOD_TPROXY_MARK,
  INPOD_TPROXY_MASK,
  IPT_CHAIN_OUTPUT,
  IPT_CHAIN_POSTROUTING,
  IPT_CHAIN_PREROUTING,
  LOOPBACK_CIDR_V4,
  LOOPBACK_CIDR_V6,
  LOOPBACK_INTERFACE,
} from './constants.js';
import {
  familiesUsed,
  INPOD_CHAINS,
  INPOD_JUMPS,
  INPOD_TABLES,
  type HostModel,
  type HostRule,
  type InpodChain,
  type InpodModel,
  type InpodRule,
  type IpFamily,
  type RuleFamily,
} from './model.js';

/** One line of restore input before it is grouped by table. */
interface RestoreRule {
  readonly table: string;
  readonly chain: string;
  /** Insert at this 1-based position instead of appending. */
  readonly insertAt?: number;
  readonly args: string;
  /** Set when the rule jumps to one of our chains, which must then be declared. */
  readonly jumpTarget?: string;
}

/** Built-in chains exist already and must never be declared with -N. */
const BUILTIN_CHAINS: ReadonlySet<string> = new Set(['PREROUTING', 'OUTPUT', 'POSTROUTING', 'INPUT', 'FORWARD']);

const AGENT_CHAINS: Readonly<Record<InpodChain, string>> = {
  prerouting: IPT_CHAIN_PREROUTING,
  output: IPT_CHAIN_OUTPUT,
};
const HOOK_CHAINS: Readonly<Record<InpodChain, string>> = {
  prerouting: 'PREROUTING',
  output: 'OUTPUT',
};

const hex = (n: number): string => `0x${n.toString(16)}`;
const INPOD_MARK_MATCH = `${hex(INPOD_MARK)}/${hex(INPOD_MASK)}`;
const TPROXY_MARK_MATCH = `${hex(INPOD_TPROXY_MARK)}/${hex(INPOD_TPROXY_MASK)}`;
const RESTORE_MASK = hex(INPOD_RESTORE_MASK);

const loopbackCidr = (family: IpFamily): string => (family === 4 ? LOOPBACK_CIDR_V4 : LOOPBACK_CIDR_V6);

/** The arguments after `-A <chain>` for one model entry, rendered for `family`. */
function inpodRuleArgs(rule: InpodRule, family: IpFamily): string {
  switch (rule.kind) {
    case 'jump':
      return `-j ${AGENT_CHAINS[rule.chain]}`;
    case 'virtualInterfaceRedirect':
      return `-i ${rule.iface} -p tcp -j REDIRECT --to-ports ${rule.toPort}`;
    case 'virtualInterfaceReturn':
      return `-i ${rule.iface} -p tcp -j RETURN`;
    case 'setConnmarkFromInpodMark':
      return `-m mark --mark ${INPOD_MARK_MATCH} -j CONNMARK --set-xmark ${TPROXY_MARK_MATCH}`;
    case 'acceptProbeFromSnat':
      return `-s ${rule.snatAddress} -p tcp -m tcp -j ACCEPT`;
    case 'acceptProbeReply':
      return `-d ${rule.snatAddress} -p tcp -m tcp -j ACCEPT`;
    case 'redirectInbound':
      return `! -d ${loopbackCidr(family)} -p tcp ! --dport ${rule.exceptDestinationPort} -m mark ! --mark ${INPOD_MARK_MATCH} -j REDIRECT --to-ports ${rule.toPort}`;
    case 'restoreMarkFromConnmark':
      return `-m connmark --mark ${TPROXY_MARK_MATCH} -j CONNMARK --restore-mark --nfmask ${RESTORE_MASK} --ctmask ${RESTORE_MASK}`;
    case 'redirectDnsUdp':
      // Upstream writes the singular --to-port here (and only here); both spellings work.
      return `! -o ${LOOPBACK_INTERFACE} -p udp -m mark ! --mark ${INPOD_MARK_MATCH} -m udp --dport ${DNS_PORT} -j REDIRECT --to-port ${rule.toPort}`;
    case 'redirectDnsTcp':
      return `! -d ${loopbackCidr(family)} -p tcp --dport ${DNS_PORT} -m mark ! --mark ${INPOD_MARK_MATCH} -j REDIRECT --to-ports ${rule.toPort}`;
    case 'dnsZoneForProxyQueries':
      return `-p udp -m mark --mark ${INPOD_MARK_MATCH} -m udp --dport ${DNS_PORT} -j CT --zone ${DNS_CONNTRACK_ZONE}`;
    case 'dnsZoneForProxyReplies':
      return `-p udp -m mark ! --mark ${INPOD_MARK_MATCH} -m udp --sport ${DNS_PORT} -j CT --zone ${DNS_CONNTRACK_ZONE}`;
    case 'acceptConnmarked':
      return `-p tcp -m mark --mark ${TPROXY_MARK_MATCH} -j ACCEPT`;
    case 'acceptLoopbackToSelf':
      return `! -d ${loopbackCidr(family)} -o ${LOOPBACK_INTERFACE} -j ACCEPT`;
    case 'redirectOutbound':
      return `! -d ${loopbackCidr(family)} -p tcp -m mark ! --mark ${INPOD_MARK_MATCH} -j REDIRECT --to-ports ${rule.toPort}`;
    default:
      return assertNever(rule);
  }
}

function inpodRestoreRule(rule: InpodRule, family: IpFamily): RestoreRule {
  const args = inpodRuleArgs(rule, family);
  if (rule.kind === 'jump') {
    return { table: rule.table, chain: HOOK_CHAINS[rule.chain], args, jumpTarget: AGENT_CHAINS[rule.chain] };
  }
  return { table: rule.table, chain: AGENT_CHAINS[rule.chain], args };
}

/** Jump inserted first in POSTROUTING, so other agents' SNAT/MASQUERADE cannot pre-empt ours. */
const HOST_JUMP: RestoreRule = {
  table: 'nat',
  chain: 'POSTROUTING',
  insertAt: 1,
  args: `-j ${IPT_CHAIN_POSTROUTING}`,
  jumpTarget: IPT_CHAIN_POSTROUTING,
};

function hostRestoreRule(rule: HostRule): RestoreRule {
  switch (rule.kind) {
    case 'probeSnat':
      return {
        table: 'nat',
        chain: IPT_CHAIN_POSTROUTING,
        args: `-m owner --socket-exists -p tcp -m set --match-set ${rule.probeSet} dst -j SNAT --to-source ${rule.snatAddress}`,
      };
    default:
      return assertNever(rule.kind);
  }
}

const appliesTo = (ruleFamily: RuleFamily, family: IpFamily): boolean => ruleFamily === 'any' || ruleFamily === family;

/**
 * Chain declarations as Istio's builder emits them: first the chains that hold rules, in
 * rule order, then jump targets not declared yet (e.g. ISTIO_PRERT in ingress mode).
 */
function chainDeclarations(rules: readonly RestoreRule[]): string[] {
  const declared = new Set<string>();
  const declare = (chain: string): void => {
    if (!BUILTIN_CHAINS.has(chain)) declared.add(chain);
  };
  for (const rule of rules) declare(rule.chain);
  for (const rule of rules) if (rule.jumpTarget !== undefined) declare(rule.jumpTarget);
  return [...declared].map((chain) => `-N ${chain}`);
}

function ruleLine(rule: RestoreRule): string {
  return rule.insertAt === undefined ? `-A ${rule.chain} ${rule.args}` : `-I ${rule.chain} ${rule.insertAt} ${rule.args}`;
}

/** Tables sorted by name, empty ones left out, each closed by COMMIT. */
function buildRestore(rules: readonly RestoreRule[]): string {
  const tables = [...new Set(rules.map((rule) => rule.table))].sort();
  const lines: string[] = [];
  for (const table of tables) {
    const inTable = rules.filter((rule) => rule.table === table);
    lines.push(`* ${table}`, ...chainDeclarations(inTable), ...inTable.map(ruleLine), 'COMMIT');
  }
  return lines.map((line) => `${line}\n`).join('');
}

/** `v6` is present only when the model has IPv6 rules (settings.ipv6). */
export function renderInpodIptables(model: InpodModel): { v4: string; v6?: string } {
  const render = (family: IpFamily): string =>
    buildRestore(model.filter((rule) => appliesTo(rule.family, family)).map((rule) => inpodRestoreRule(rule, family)));
  const hasV6 = familiesUsed(model).includes(6);
  return hasV6 ? { v4: render(4), v6: render(6) } : { v4: render(4) };
}

/** Probe SNAT chain in the host's nat table, jumped to first thing in POSTROUTING. */
export function renderHostIptables(hostModel: HostModel): { v4: string; v6?: string } {
  const render = (family: IpFamily): string => {
    const snat = hostModel.filter((rule) => rule.family === family).map(hostRestoreRule);
    return buildRestore(snat.length > 0 ? [HOST_JUMP, ...snat] : []);
  };
  const hasV6 = familiesUsed(hostModel).includes(6);
  return hasV6 ? { v4: render(4), v6: render(6) } : { v4: render(4) };
}

/** The arguments after `-A ISTIO_POSTRT` of the host probe SNAT rule (as the restore input has them). */
export function hostProbeRuleArgs(rule: HostRule): string {
  return hostRestoreRule(rule).args;
}

/**
 * Istio's DeleteHostRules for one family (its builder's BuildCleanupV4/V6: the rules undone in
 * reverse order, then the chain flushed and deleted), as argv lists to run ignoring errors.
 * `extraJumps` repeats the jump deletion for duplicated jumps (Istio deletes one).
 */
export function hostIptablesDeleteCommands(hostModel: HostModel, family: IpFamily, extraJumps = 0): string[][] {
  const binary = family === 4 ? 'iptables' : 'ip6tables';
  const snat = hostModel.filter((rule) => rule.family === family).map(hostRestoreRule);
  const deleteRule = (rule: RestoreRule): string[] => [binary, '-t', rule.table, '-D', rule.chain, ...rule.args.split(' ')];
  return [
    ...[...snat].reverse().map(deleteRule),
    ...Array.from({ length: 1 + extraJumps }, () => deleteRule(HOST_JUMP)),
    [binary, '-t', 'nat', '-F', IPT_CHAIN_POSTROUTING],
    [binary, '-t', 'nat', '-X', IPT_CHAIN_POSTROUTING],
  ];
}

/**
 * Istio's DeleteInpodRules, as argv lists to run one by one, ignoring errors: the rules
 * may be partly or wholly absent. Covers raw even when DNS capture is off, since the
 * rules may have been created under other settings.
 */
export function inpodIptablesDeleteCommands(ipv6: boolean): string[][] {
  const binaries = ipv6 ? ['iptables', 'ip6tables'] : ['iptables'];
  return binaries.flatMap((binary) => [
    ...INPOD_JUMPS.map(({ table, chain }) => [binary, '-t', table, '-D', HOOK_CHAINS[chain], '-j', AGENT_CHAINS[chain]]),
    ...agentChainsInDeleteOrder().map(({ table, chain }) => [binary, '-t', table, '-F', chain]),
    ...agentChainsInDeleteOrder().map(({ table, chain }) => [binary, '-t', table, '-X', chain]),
  ]);
}

/** mangle, nat, raw; PRERT before OUTPUT in each (upstream's order). */
function agentChainsInDeleteOrder(): { table: string; chain: string }[] {
  const tables = [...INPOD_TABLES].sort();
  return tables.flatMap((table) => INPOD_CHAINS.map((chain) => ({ table, chain: AGENT_CHAINS[chain] })));
}

function assertNever(value: never): never {
  throw new Error(`unhandled rule: ${JSON.stringify(value)}`);
}
