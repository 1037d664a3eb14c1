// nft transaction text for `nft -f -`, byte-compatible with what Istio's knftables code
// produces (cni/pkg/nftables/testdata/*.golden). Several rules contain double spaces;
// they are copied from upstream on purpose, do not "fix" them.

import {
  DNS_CONNTRACK_ZONE,
  DNS_PORT,
  INPOD_MARK,
  INPOD_MASK,
  INPOD_TPROXY_MARK,
  INPOD_TPROXY_MASK,
  LOOPBACK_CIDR_V4,
  LOOPBACK_CIDR_V6,
  LOOPBACK_INTERFACE,
  NFT_FAMILY,
  NFT_TABLE_MANGLE,
  NFT_TABLE_NAT,
  NFT_TABLE_RAW,
} from './constants.js';
import type { DeleteNftTablesStep } from '../addon/steps.js';
import {
  chainsUsed,
  hooksUsed,
  INPOD_TABLES,
  tablesUsed,
  type HostModel,
  type HostRule,
  type InpodChain,
  type InpodModel,
  type InpodRule,
  type InpodTable,
  type IpFamily,
} from './model.js';

const TABLE_NAMES: Readonly<Record<InpodTable, string>> = {
  nat: NFT_TABLE_NAT,
  mangle: NFT_TABLE_MANGLE,
  raw: NFT_TABLE_RAW,
};

/** Base chain definitions per table: the priorities mirror iptables' nat/mangle/raw tables. */
const BASE_CHAIN_SPECS: Readonly<Record<InpodTable, Readonly<Record<InpodChain, string>>>> = {
  nat: {
    prerouting: '{ type nat hook prerouting priority -100 ; }',
    output: '{ type nat hook output priority -100 ; }',
  },
  mangle: {
    prerouting: '{ type filter hook prerouting priority -150 ; }',
    // `route` so that a mark restored in output triggers a re-route (to the local table 100).
    output: '{ type route hook output priority -150 ; }',
  },
  raw: {
    prerouting: '{ type filter hook prerouting priority -300 ; }',
    output: '{ type filter hook output priority -300 ; }',
  },
};

const HOST_POSTROUTING_SPEC = '{ type nat hook postrouting priority 100 ; }';

const hex = (n: number): string => `0x${n.toString(16)}`;
const MARK = hex(INPOD_MARK);
const MASK = hex(INPOD_MASK);
const TPROXY_MARK = hex(INPOD_TPROXY_MARK);
const TPROXY_MASK = hex(INPOD_TPROXY_MASK);
/** Keeps the connmark bits other agents own while setting ours. */
const CONNMARK_KEEP_MASK = hex(~INPOD_TPROXY_MASK >>> 0);

const addressKeyword = (family: IpFamily): string => (family === 4 ? 'ip' : 'ip6');
const loopbackCidr = (family: IpFamily): string => (family === 4 ? LOOPBACK_CIDR_V4 : LOOPBACK_CIDR_V6);
const agentChain = (chain: InpodChain): string => `istio-${chain}`;

/**
 * Names made only of letters, digits, '_', '.', '-' and starting with a letter or '_' are
 * plain nft strings. Anything else the settings validation lets through (e.g. "1s0f0")
 * would be lexed as a number, so it is quoted.
 */
function nftString(value: string): string {
  return /^[A-Za-z_][A-Za-z0-9_.-]*$/.test(value) ? value : `"${value}"`;
}

/** The `add rule` body (after the chain name) for one model entry. */
function inpodRuleBody(rule: InpodRule): string {
  switch (rule.kind) {
    case 'jump':
      return `jump ${agentChain(rule.chain)}`;
    case 'virtualInterfaceRedirect':
      return `iifname ${nftString(rule.iface)} meta l4proto tcp counter redirect to :${rule.toPort}`;
    case 'virtualInterfaceReturn':
      return `iifname ${nftString(rule.iface)} meta l4proto tcp counter return`;
    case 'setConnmarkFromInpodMark':
      return `meta mark & ${MASK} == ${MARK} counter ct mark set ct mark & ${CONNMARK_KEEP_MASK} |  ${TPROXY_MARK}`;
    case 'acceptProbeFromSnat':
      return `meta l4proto tcp ${addressKeyword(rule.family)} saddr ${rule.snatAddress} counter accept`;
    case 'acceptProbeReply':
      return `meta l4proto tcp ${addressKeyword(rule.family)} daddr ${rule.snatAddress} counter accept`;
    case 'redirectInbound': {
      // Upstream's IPv4 variant has two spaces before "!="; the IPv6 one has one.
      const gap = rule.family === 4 ? '  ' : ' ';
      return `${addressKeyword(rule.family)} daddr != ${loopbackCidr(rule.family)} tcp dport != ${rule.exceptDestinationPort} mark and ${MASK}${gap}!= ${MARK} counter redirect to :${rule.toPort}`;
    }
    case 'restoreMarkFromConnmark':
      return `ct mark and ${TPROXY_MASK} == ${TPROXY_MARK} counter meta mark set ct mark`;
    case 'redirectDnsUdp':
      return `oifname != ${LOOPBACK_INTERFACE} mark and ${MASK} != ${MARK} udp dport ${DNS_PORT} counter redirect to :${rule.toPort}`;
    case 'redirectDnsTcp':
      return `${addressKeyword(rule.family)} daddr != ${loopbackCidr(rule.family)} tcp dport ${DNS_PORT} mark and ${MASK} != ${MARK} counter redirect to :${rule.toPort}`;
    case 'dnsZoneForProxyQueries':
      return `udp dport ${DNS_PORT} meta mark and ${MASK} == ${MARK} counter ct zone set ${DNS_CONNTRACK_ZONE}`;
    case 'dnsZoneForProxyReplies':
      return `udp sport ${DNS_PORT} meta mark and ${MASK} != ${MARK} counter ct zone set ${DNS_CONNTRACK_ZONE}`;
    case 'acceptConnmarked':
      return `meta l4proto tcp mark and ${TPROXY_MASK} == ${TPROXY_MARK} counter accept`;
    case 'acceptLoopbackToSelf':
      return `oifname ${LOOPBACK_INTERFACE} ${addressKeyword(rule.family)} daddr != ${loopbackCidr(rule.family)} counter accept`;
    case 'redirectOutbound':
      return `meta l4proto tcp ${addressKeyword(rule.family)} daddr != ${loopbackCidr(rule.family)} mark and ${MASK} != ${MARK} counter redirect to :${rule.toPort}`;
    default:
      return assertNever(rule);
  }
}

/** Jumps live in the base (hook) chain; every other rule in the agent chain. */
function inpodRuleChainName(rule: InpodRule): string {
  return rule.kind === 'jump' ? rule.chain : agentChain(rule.chain);
}

function hostRuleBody(rule: HostRule, kubeletUid: number): string {
  switch (rule.kind) {
    case 'probeSnat':
      return `meta l4proto tcp skuid ${kubeletUid} ${addressKeyword(rule.family)} daddr @${rule.probeSet} counter snat to ${rule.snatAddress}`;
    default:
      return assertNever(rule.kind);
  }
}

/** `add table` first so that `flush table` cannot fail on a fresh netns; flush makes re-apply idempotent. */
function tableHeader(table: string): string[] {
  return [`add table ${NFT_FAMILY} ${table}`, `flush table ${NFT_FAMILY} ${table}`];
}

function renderInpodTable(model: InpodModel, table: InpodTable): string[] {
  const name = TABLE_NAMES[table];
  const lines = tableHeader(name);
  for (const hook of hooksUsed(model, table)) {
    lines.push(`add chain ${NFT_FAMILY} ${name} ${hook} ${BASE_CHAIN_SPECS[table][hook]}`);
  }
  for (const chain of chainsUsed(model, table)) {
    lines.push(`add chain ${NFT_FAMILY} ${name} ${agentChain(chain)}`);
  }
  for (const rule of model) {
    if (rule.table !== table) continue;
    lines.push(`add rule ${NFT_FAMILY} ${name} ${inpodRuleChainName(rule)} ${inpodRuleBody(rule)}`);
  }
  return lines;
}

const transaction = (lines: readonly string[]): string => lines.map((line) => `${line}\n`).join('');

/** One atomic transaction creating (or replacing) all in-pod tables of the model. */
export function renderInpodNftables(model: InpodModel): string {
  return transaction(tablesUsed(model).flatMap((table) => renderInpodTable(model, table)));
}

/**
 * Host transaction for the probe SNAT rules. The probe sets live in the same table but
 * are managed separately (as upstream), so only the chain and its rules are written here.
 */
export function renderHostNftables(hostModel: HostModel, kubeletUid: number): string {
  if (!Number.isSafeInteger(kubeletUid) || kubeletUid < 0) {
    throw new RangeError(`kubelet UID must be a non-negative integer, got ${String(kubeletUid)}`);
  }
  const lines = tableHeader(NFT_TABLE_NAT);
  lines.push(`add chain ${NFT_FAMILY} ${NFT_TABLE_NAT} postrouting ${HOST_POSTROUTING_SPEC}`);
  for (const rule of hostModel) {
    lines.push(`add rule ${NFT_FAMILY} ${NFT_TABLE_NAT} postrouting ${hostRuleBody(rule, kubeletUid)}`);
  }
  return transaction(lines);
}

/** Removes all three in-pod tables, whichever exist; the `add` keeps `delete` from failing. */
/** The in-pod delete as one addon step (the same effect as renderInpodNftablesDelete's text). */
export function inpodNftablesDeleteStep(): DeleteNftTablesStep {
  return { op: 'deleteNftTables', family: NFT_FAMILY, tables: INPOD_TABLES.map((table) => TABLE_NAMES[table]) };
}

export function renderInpodNftablesDelete(): string {
  return transaction(
    INPOD_TABLES.flatMap((table) => [`add table ${NFT_FAMILY} ${TABLE_NAMES[table]}`, `delete table ${NFT_FAMILY} ${TABLE_NAMES[table]}`]),
  );
}

/**
 * Istio's host delete flushes rather than deletes the table, so the probe set objects are
 * not removed along with the rules.
 */
export function renderHostNftablesDelete(): string {
  return transaction(tableHeader(NFT_TABLE_NAT));
}

/** nft table names (family inet) the model creates, in transaction order. */
export function inpodNftTables(model: InpodModel): string[] {
  return tablesUsed(model).map((table) => TABLE_NAMES[table]);
}

function assertNever(value: never): never {
  throw new Error(`unhandled rule: ${JSON.stringify(value)}`);
}
