import { isIPv4, isIPv6 } from 'node:net';

import {
  ANNOTATION_BYPASS_INBOUND_CAPTURE,
  ANNOTATION_DNS_CAPTURE,
  ANNOTATION_REROUTE_VIRTUAL_INTERFACES,
  DEFAULT_HOST_PROBE_SNAT_IPV4,
  DEFAULT_HOST_PROBE_SNAT_IPV6,
  MAX_INTERFACE_NAME_BYTES,
} from './constants.js';

/** Node-wide settings that shape the rules (env/flags of the agent). */
export interface RuleSettings {
  ipv6: boolean;
  /** AMBIENT_DNS_CAPTURE: the default when a pod has no dns-capture annotation. */
  dnsCapture: boolean;
  hostProbeSnatIpv4: string;
  hostProbeSnatIpv6: string;
}

export type DnsOverride = 'enabled' | 'disabled' | 'unset';

/** Per-pod overrides taken from annotations (Istio's PodLevelOverrides). */
export interface PodOverrides {
  /** bypass-inbound-capture: no inbound redirection, for ingress-like workloads. */
  ingressMode: boolean;
  dnsProxy: DnsOverride;
  /** Interfaces whose inbound TCP is treated as outbound (sent to 15001). */
  virtualInterfaces: string[];
}

export const NO_OVERRIDES: PodOverrides = Object.freeze({
  ingressMode: false,
  dnsProxy: 'unset',
  virtualInterfaces: Object.freeze([]) as unknown as string[],
});

/**
 * Settings with Istio's defaults. The SNAT addresses end up verbatim in rule text,
 * so anything that is not an IP address is rejected here rather than rendered.
 */
export function defaultRuleSettings(partial: Partial<RuleSettings> = {}): RuleSettings {
  const settings: RuleSettings = {
    ipv6: partial.ipv6 ?? true,
    dnsCapture: partial.dnsCapture ?? true,
    hostProbeSnatIpv4: partial.hostProbeSnatIpv4 ?? DEFAULT_HOST_PROBE_SNAT_IPV4,
    hostProbeSnatIpv6: canonicalIpv6(partial.hostProbeSnatIpv6 ?? DEFAULT_HOST_PROBE_SNAT_IPV6),
  };
  assertValidSettings(settings);
  return settings;
}

/** Throws a RangeError when a setting would produce invalid or injected rule text. */
export function assertValidSettings(settings: RuleSettings): void {
  if (!isIPv4(settings.hostProbeSnatIpv4)) {
    throw new RangeError(`host probe SNAT IPv4 address is not an IPv4 address: ${JSON.stringify(settings.hostProbeSnatIpv4)}`);
  }
  if (!isIPv6(settings.hostProbeSnatIpv6)) {
    throw new RangeError(`host probe SNAT IPv6 address is not an IPv6 address: ${JSON.stringify(settings.hostProbeSnatIpv6)}`);
  }
}

/**
 * Istio keeps the address as a netip.Addr and prints its canonical form, so "FD16:0::1"
 * is rendered as "fd16::1". The WHATWG URL serializer implements the same RFC 5952
 * compression; forms with an embedded IPv4 part are left alone because the two
 * serializers disagree on them.
 */
function canonicalIpv6(address: string): string {
  if (!isIPv6(address) || address.includes('.')) return address;
  return new URL(`http://[${address}]/`).hostname.slice(1, -1);
}

/** Go's strconv.ParseBool: exactly these spellings, anything else is an error. */
export function parseGoBool(value: string): boolean | undefined {
  switch (value) {
    case '1':
    case 't':
    case 'T':
    case 'TRUE':
    case 'true':
    case 'True':
      return true;
    case '0':
    case 'f':
    case 'F':
    case 'FALSE':
    case 'false':
    case 'False':
      return false;
    default:
      return undefined;
  }
}

/**
 * Why a name cannot be used as an interface in rule text, or undefined when it can.
 * The kernel's own limits (dev_valid_name) come first. On top of them only
 * [A-Za-z0-9_.-] is allowed, without a leading '-': the kernel accepts names such as
 * "a;b", "@x" or "eth+", but in nft/iptables-restore input those characters are
 * statement separators, set references or wildcards, i.e. an injection vector.
 */
export function interfaceNameProblem(name: string): string | undefined {
  if (name.length === 0) return 'empty';
  if (Buffer.byteLength(name, 'utf8') > MAX_INTERFACE_NAME_BYTES) {
    return `longer than ${MAX_INTERFACE_NAME_BYTES} bytes`;
  }
  if (name === '.' || name === '..') return 'reserved name';
  if (!/^[A-Za-z0-9_.-]+$/.test(name)) return 'contains characters other than letters, digits, "_", "." and "-"';
  if (name.startsWith('-')) return 'starts with "-"';
  return undefined;
}

/**
 * At most this many distinct interfaces are taken from reroute-virtual-interfaces. Istio has
 * no limit, but every name costs rules in each family, and a 256 KB annotation could otherwise
 * list tens of thousands of them; real pods have a handful of virtual interfaces.
 */
export const MAX_VIRTUAL_INTERFACES = 32;

/** Warnings quote a value by its start: an annotation can be 256 KB. */
const MAX_QUOTED = 64;
/** Invalid interface names warned about one by one; the rest are counted in one warning. */
const MAX_WARNED_NAMES = 5;

function quoted(value: string): string {
  return JSON.stringify(value.length <= MAX_QUOTED ? value : `${value.slice(0, MAX_QUOTED)}...`);
}

/**
 * Reads the three per-pod annotations the way Istio does (getPodLevelTrafficOverrides).
 * Bad values never fail the pod: they are dropped and reported in `warnings` (Istio ignores an
 * unparsable boolean with a warning too). For reroute-virtual-interfaces each unusable name is
 * dropped on its own, the valid ones still apply; duplicates count once, and names past
 * MAX_VIRTUAL_INTERFACES are dropped with a warning. Nothing dropped reaches rule text.
 */
export function podOverridesFromAnnotations(annotations: Record<string, string | undefined>): {
  overrides: PodOverrides;
  warnings: string[];
} {
  const warnings: string[] = [];
  const ingressMode = readBoolAnnotation(annotations, ANNOTATION_BYPASS_INBOUND_CAPTURE, warnings) ?? false;
  const dnsFlag = readBoolAnnotation(annotations, ANNOTATION_DNS_CAPTURE, warnings);
  const dnsProxy: DnsOverride = dnsFlag === undefined ? 'unset' : dnsFlag ? 'enabled' : 'disabled';
  const virtualInterfaces = readInterfaceList(annotations[ANNOTATION_REROUTE_VIRTUAL_INTERFACES], warnings);
  return { overrides: { ingressMode, dnsProxy, virtualInterfaces }, warnings };
}

function readBoolAnnotation(annotations: Record<string, string | undefined>, key: string, warnings: string[]): boolean | undefined {
  const raw: unknown = annotations[key];
  if (raw === undefined) return undefined;
  const parsed = typeof raw === 'string' ? parseGoBool(raw) : undefined;
  if (parsed === undefined) {
    const shown = typeof raw === 'string' ? quoted(raw) : `(a ${raw === null ? 'null' : typeof raw}, not a string)`;
    warnings.push(`annotation ${key}=${shown} ignored: not a boolean (expected "true" or "false")`);
  }
  return parsed;
}

/** Comma list, trimmed, empties dropped (as Istio); unusable names dropped with a warning. */
function readInterfaceList(raw: unknown, warnings: string[]): string[] {
  if (raw === undefined) return [];
  if (typeof raw !== 'string') {
    warnings.push(`annotation ${ANNOTATION_REROUTE_VIRTUAL_INTERFACES} ignored: not a string`);
    return [];
  }
  const names: string[] = [];
  let invalid = 0;
  let overLimit = 0;
  for (const part of raw.split(',')) {
    const name = part.trim();
    if (name === '' || names.includes(name)) continue;
    const problem = interfaceNameProblem(name);
    if (problem !== undefined) {
      // One warning per bad name, up to a few: a huge hostile value must not flood the log.
      if (++invalid <= MAX_WARNED_NAMES) {
        warnings.push(`annotation ${ANNOTATION_REROUTE_VIRTUAL_INTERFACES}: interface ${quoted(name)} ignored: ${problem}`);
      }
      continue;
    }
    if (names.length >= MAX_VIRTUAL_INTERFACES) {
      overLimit++;
      continue;
    }
    names.push(name);
  }
  if (invalid > MAX_WARNED_NAMES) {
    warnings.push(
      `annotation ${ANNOTATION_REROUTE_VIRTUAL_INTERFACES}: ${invalid - MAX_WARNED_NAMES} more invalid interface names ignored`,
    );
  }
  if (overLimit > 0) {
    warnings.push(
      `annotation ${ANNOTATION_REROUTE_VIRTUAL_INTERFACES}: ${overLimit} interface names past the first ${MAX_VIRTUAL_INTERFACES} ignored`,
    );
  }
  return names;
}
