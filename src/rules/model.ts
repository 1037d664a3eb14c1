// The one description of Istio's ambient redirection rules. Both renderers (nftables and
// iptables-restore) consume it, so a rule can only be added, dropped or reordered here.
// Entries are data only: everything that varies with settings is in the entry, the fixed
// marks and masks live in constants.ts, and the text belongs to the renderers.

import {
  PROBE_SET_V4,
  PROBE_SET_V6,
  ZTUNNEL_DNS_PORT,
  ZTUNNEL_INBOUND_HBONE_PORT,
  ZTUNNEL_INBOUND_PLAINTEXT_PORT,
  ZTUNNEL_OUTBOUND_PORT,
} from './constants.js';
import { assertValidSettings, interfaceNameProblem, type PodOverrides, type RuleSettings } from './settings.js';

export type InpodTable = 'nat' | 'mangle' | 'raw';
/** The agent's own chains: ISTIO_PRERT/ISTIO_OUTPUT, or istio-prerouting/istio-output in nft. */
export type InpodChain = 'prerouting' | 'output';
export type IpFamily = 4 | 6;
/** 'any' rules carry no address, so iptables emits them for each family and nft once. */
export type RuleFamily = IpFamily | 'any';

export interface Located<T extends InpodTable, C extends InpodChain> {
  readonly table: T;
  readonly chain: C;
}

/**
 * Jump from the built-in hook chain (PREROUTING/OUTPUT, nft base chain prerouting/output)
 * into the agent's chain of the same direction. `chain` names both ends.
 */
export interface JumpRule extends Located<InpodTable, InpodChain> {
  readonly kind: 'jump';
  readonly family: 'any';
}

/** Inbound TCP on a rerouted virtual interface goes to ztunnel's outbound port... */
export interface VirtualInterfaceRedirectRule extends Located<'nat', 'prerouting'> {
  readonly kind: 'virtualInterfaceRedirect';
  readonly family: 'any';
  readonly iface: string;
  readonly toPort: number;
}

/** ...and skips the rest of the chain (no inbound capture for it). */
export interface VirtualInterfaceReturnRule extends Located<'nat', 'prerouting'> {
  readonly kind: 'virtualInterfaceReturn';
  readonly family: 'any';
  readonly iface: string;
}

/** Packets from ztunnel (in-pod mark) tag their connection so replies can be found later. */
export interface SetConnmarkFromInpodMarkRule extends Located<'mangle', 'prerouting'> {
  readonly kind: 'setConnmarkFromInpodMark';
  readonly family: 'any';
}

/** Kubelet probes arrive SNATed to this address from the host rules: let them in directly. */
export interface AcceptProbeFromSnatRule extends Located<'nat', 'prerouting'> {
  readonly kind: 'acceptProbeFromSnat';
  readonly family: IpFamily;
  readonly snatAddress: string;
}

/** Replies to those probes must not be captured as outbound traffic. */
export interface AcceptProbeReplyRule extends Located<'nat', 'output'> {
  readonly kind: 'acceptProbeReply';
  readonly family: IpFamily;
  readonly snatAddress: string;
}

/** All other inbound TCP (except HBONE and ztunnel's own) goes to ztunnel's plaintext port. */
export interface RedirectInboundRule extends Located<'nat', 'prerouting'> {
  readonly kind: 'redirectInbound';
  readonly family: IpFamily;
  readonly toPort: number;
  readonly exceptDestinationPort: number;
}

/** Copies the connection's mark back onto packets of marked connections (the replies). */
export interface RestoreMarkFromConnmarkRule extends Located<'mangle', 'output'> {
  readonly kind: 'restoreMarkFromConnmark';
  readonly family: 'any';
}

/** DNS over UDP to ztunnel's DNS proxy. Has no address, so it is family-agnostic. */
export interface RedirectDnsUdpRule extends Located<'nat', 'output'> {
  readonly kind: 'redirectDnsUdp';
  readonly family: 'any';
  readonly toPort: number;
}

export interface RedirectDnsTcpRule extends Located<'nat', 'output'> {
  readonly kind: 'redirectDnsTcp';
  readonly family: IpFamily;
  readonly toPort: number;
}

/** ztunnel's own DNS queries go to conntrack zone 1 so they cannot collide with the app's. */
export interface DnsZoneForProxyQueriesRule extends Located<'raw', 'output'> {
  readonly kind: 'dnsZoneForProxyQueries';
  readonly family: 'any';
}

/** ...and so do the answers coming back to ztunnel. */
export interface DnsZoneForProxyRepliesRule extends Located<'raw', 'prerouting'> {
  readonly kind: 'dnsZoneForProxyReplies';
  readonly family: 'any';
}

/** Replies on connections ztunnel accepted (restored 0x111 mark) leave unredirected. */
export interface AcceptConnmarkedRule extends Located<'nat', 'output'> {
  readonly kind: 'acceptConnmarked';
  readonly family: 'any';
}

/** The app talking to itself via its pod IP stays local. */
export interface AcceptLoopbackToSelfRule extends Located<'nat', 'output'> {
  readonly kind: 'acceptLoopbackToSelf';
  readonly family: IpFamily;
}

/** Everything else outbound over TCP, unless ztunnel sent it, goes to ztunnel. */
export interface RedirectOutboundRule extends Located<'nat', 'output'> {
  readonly kind: 'redirectOutbound';
  readonly family: IpFamily;
  readonly toPort: number;
}

export type InpodRule =
  | JumpRule
  | VirtualInterfaceRedirectRule
  | VirtualInterfaceReturnRule
  | SetConnmarkFromInpodMarkRule
  | AcceptProbeFromSnatRule
  | AcceptProbeReplyRule
  | RedirectInboundRule
  | RestoreMarkFromConnmarkRule
  | RedirectDnsUdpRule
  | RedirectDnsTcpRule
  | DnsZoneForProxyQueriesRule
  | DnsZoneForProxyRepliesRule
  | AcceptConnmarkedRule
  | AcceptLoopbackToSelfRule
  | RedirectOutboundRule;

/** In Istio's order (the order its builder appends them; renderers group by table). */
export type InpodModel = readonly InpodRule[];

/** SNAT of kubelet probes in the host netns, towards pods listed in the probe set. */
export interface HostProbeSnatRule {
  readonly kind: 'probeSnat';
  readonly family: IpFamily;
  readonly probeSet: string;
  readonly snatAddress: string;
}

export type HostRule = HostProbeSnatRule;
export type HostModel = readonly HostRule[];

/**
 * Istio's jump order. Deletion walks the same list, including raw, whatever the settings,
 * because it cannot know which settings created the rules it is removing.
 */
export const INPOD_JUMPS: readonly Located<InpodTable, InpodChain>[] = Object.freeze([
  { table: 'mangle', chain: 'prerouting' },
  { table: 'mangle', chain: 'output' },
  { table: 'nat', chain: 'output' },
  { table: 'raw', chain: 'prerouting' },
  { table: 'raw', chain: 'output' },
  { table: 'nat', chain: 'prerouting' },
]);

/** Canonical orders: nft emits tables and chains in these orders, not in first-use order. */
export const INPOD_TABLES: readonly InpodTable[] = Object.freeze(['nat', 'mangle', 'raw']);
export const INPOD_CHAINS: readonly InpodChain[] = Object.freeze(['prerouting', 'output']);

/** Pod override wins; otherwise the node-wide AMBIENT_DNS_CAPTURE setting. */
export function dnsCaptureEnabled(settings: RuleSettings, overrides: PodOverrides): boolean {
  switch (overrides.dnsProxy) {
    case 'enabled':
      return true;
    case 'disabled':
      return false;
    case 'unset':
      return settings.dnsCapture;
  }
}

/**
 * The in-pod rules for one pod, in Istio's order (docs/istio-behaviours.md §2). Versioned rules are
 * listed IPv4 then IPv6 next to each other, which is nft's order; iptables splits them.
 */
export function buildInpodModel(settings: RuleSettings, overrides: PodOverrides): InpodModel {
  assertValidSettings(settings);
  assertValidInterfaces(overrides.virtualInterfaces);
  const families: readonly IpFamily[] = settings.ipv6 ? [4, 6] : [4];
  const dns = dnsCaptureEnabled(settings, overrides);
  const inbound = !overrides.ingressMode;
  const snat = (family: IpFamily): string => (family === 4 ? settings.hostProbeSnatIpv4 : settings.hostProbeSnatIpv6);

  const rules: InpodRule[] = [];
  for (const jump of INPOD_JUMPS) {
    if (jump.table === 'raw' && !dns) continue;
    rules.push({ kind: 'jump', family: 'any', table: jump.table, chain: jump.chain });
  }
  for (const iface of overrides.virtualInterfaces) {
    rules.push({
      kind: 'virtualInterfaceRedirect',
      family: 'any',
      table: 'nat',
      chain: 'prerouting',
      iface,
      toPort: ZTUNNEL_OUTBOUND_PORT,
    });
    rules.push({ kind: 'virtualInterfaceReturn', family: 'any', table: 'nat', chain: 'prerouting', iface });
  }
  // Kept in ingress mode too: without it replies to ztunnel-accepted connections are lost (istio#58546).
  rules.push({ kind: 'setConnmarkFromInpodMark', family: 'any', table: 'mangle', chain: 'prerouting' });
  if (inbound) {
    for (const family of families) {
      rules.push({ kind: 'acceptProbeFromSnat', family, table: 'nat', chain: 'prerouting', snatAddress: snat(family) });
    }
  }
  for (const family of families) {
    rules.push({ kind: 'acceptProbeReply', family, table: 'nat', chain: 'output', snatAddress: snat(family) });
  }
  if (inbound) {
    for (const family of families) {
      rules.push({
        kind: 'redirectInbound',
        family,
        table: 'nat',
        chain: 'prerouting',
        toPort: ZTUNNEL_INBOUND_PLAINTEXT_PORT,
        exceptDestinationPort: ZTUNNEL_INBOUND_HBONE_PORT,
      });
    }
  }
  rules.push({ kind: 'restoreMarkFromConnmark', family: 'any', table: 'mangle', chain: 'output' });
  if (dns) {
    rules.push({ kind: 'redirectDnsUdp', family: 'any', table: 'nat', chain: 'output', toPort: ZTUNNEL_DNS_PORT });
    for (const family of families) {
      rules.push({ kind: 'redirectDnsTcp', family, table: 'nat', chain: 'output', toPort: ZTUNNEL_DNS_PORT });
    }
    rules.push({ kind: 'dnsZoneForProxyQueries', family: 'any', table: 'raw', chain: 'output' });
    rules.push({ kind: 'dnsZoneForProxyReplies', family: 'any', table: 'raw', chain: 'prerouting' });
  }
  rules.push({ kind: 'acceptConnmarked', family: 'any', table: 'nat', chain: 'output' });
  for (const family of families) {
    rules.push({ kind: 'acceptLoopbackToSelf', family, table: 'nat', chain: 'output' });
  }
  for (const family of families) {
    rules.push({ kind: 'redirectOutbound', family, table: 'nat', chain: 'output', toPort: ZTUNNEL_OUTBOUND_PORT });
  }
  return Object.freeze(rules.map((rule) => Object.freeze(rule)));
}

/** Host-netns probe SNAT rules (docs/istio-behaviours.md §3): IPv4, and IPv6 when enabled. */
export function buildHostModel(settings: RuleSettings): HostModel {
  assertValidSettings(settings);
  const rules: HostRule[] = [{ kind: 'probeSnat', family: 4, probeSet: PROBE_SET_V4, snatAddress: settings.hostProbeSnatIpv4 }];
  if (settings.ipv6) {
    rules.push({ kind: 'probeSnat', family: 6, probeSet: PROBE_SET_V6, snatAddress: settings.hostProbeSnatIpv6 });
  }
  return Object.freeze(rules.map((rule) => Object.freeze(rule)));
}

/** Tables holding at least one rule, in canonical order (raw only exists with DNS capture). */
export function tablesUsed(model: InpodModel): InpodTable[] {
  return INPOD_TABLES.filter((table) => model.some((rule) => rule.table === table));
}

/** Agent chains of a table that hold rules or are jumped to, in canonical order. */
export function chainsUsed(model: InpodModel, table: InpodTable): InpodChain[] {
  return INPOD_CHAINS.filter((chain) => model.some((rule) => rule.table === table && rule.chain === chain));
}

/** Hook chains (PREROUTING/OUTPUT, nft base chains) of a table that hold a jump. */
export function hooksUsed(model: InpodModel, table: InpodTable): InpodChain[] {
  return INPOD_CHAINS.filter((chain) => model.some((rule) => rule.kind === 'jump' && rule.table === table && rule.chain === chain));
}

/** Families with address-specific rules; 'any' rules follow whichever families exist. */
export function familiesUsed(model: readonly { readonly family: RuleFamily }[]): IpFamily[] {
  const families: IpFamily[] = [4, 6];
  return families.filter((family) => model.some((rule) => rule.family === family));
}

/** Overrides may be built by hand, so names are checked again before they reach rule text. */
function assertValidInterfaces(names: readonly string[]): void {
  for (const name of names) {
    const problem = interfaceNameProblem(name);
    if (problem !== undefined) {
      throw new RangeError(`invalid virtual interface name ${JSON.stringify(name)}: ${problem}`);
    }
  }
}
