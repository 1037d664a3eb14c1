import { describe, expect, it } from 'vitest';

import {
  ANNOTATION_BYPASS_INBOUND_CAPTURE,
  ANNOTATION_DNS_CAPTURE,
  ANNOTATION_REROUTE_VIRTUAL_INTERFACES,
  DEFAULT_HOST_PROBE_SNAT_IPV4,
  DEFAULT_HOST_PROBE_SNAT_IPV6,
} from '../../src/rules/constants.js';
import { renderInpodIptables } from '../../src/rules/iptables.js';
import { buildHostModel, buildInpodModel, chainsUsed, dnsCaptureEnabled, tablesUsed, type InpodModel } from '../../src/rules/model.js';
import { renderInpodNftables } from '../../src/rules/nftables.js';
import {
  defaultRuleSettings,
  interfaceNameProblem,
  NO_OVERRIDES,
  parseGoBool,
  podOverridesFromAnnotations,
  type PodOverrides,
} from '../../src/rules/settings.js';

const TRUE_SPELLINGS = ['1', 't', 'T', 'TRUE', 'true', 'True'];
const FALSE_SPELLINGS = ['0', 'f', 'F', 'FALSE', 'false', 'False'];
const NOT_BOOLEANS = ['', 'yes', 'no', 'on', 'TrUe', ' true', 'true ', '2', 'enabled', '*'];

const kinds = (model: InpodModel): string[] => model.map((rule) => rule.kind);
const withOverrides = (partial: Partial<PodOverrides>): PodOverrides => ({ ...NO_OVERRIDES, ...partial });

describe('defaultRuleSettings', () => {
  it("uses Istio's defaults", () => {
    expect(defaultRuleSettings()).toEqual({
      ipv6: true,
      dnsCapture: true,
      hostProbeSnatIpv4: DEFAULT_HOST_PROBE_SNAT_IPV4,
      hostProbeSnatIpv6: DEFAULT_HOST_PROBE_SNAT_IPV6,
    });
    expect(DEFAULT_HOST_PROBE_SNAT_IPV4).toBe('169.254.7.127');
    expect(DEFAULT_HOST_PROBE_SNAT_IPV6).toBe('fd16:9254:7127:1337:ffff:ffff:ffff:ffff');
  });

  it('keeps given values', () => {
    const s = defaultRuleSettings({ ipv6: false, dnsCapture: false, hostProbeSnatIpv4: '10.0.0.1' });
    expect(s).toMatchObject({ ipv6: false, dnsCapture: false, hostProbeSnatIpv4: '10.0.0.1' });
  });

  it('prints the IPv6 SNAT address in canonical form, as Go netip.Addr does', () => {
    expect(defaultRuleSettings({ hostProbeSnatIpv6: 'FD16:0:0:0:0:0:0:1' }).hostProbeSnatIpv6).toBe('fd16::1');
  });

  it('rejects SNAT values that are not addresses (they would be injected into rule text)', () => {
    expect(() => defaultRuleSettings({ hostProbeSnatIpv4: '1.2.3.4 -j ACCEPT' })).toThrow(RangeError);
    expect(() => defaultRuleSettings({ hostProbeSnatIpv4: '::1' })).toThrow(RangeError);
    expect(() => defaultRuleSettings({ hostProbeSnatIpv6: '169.254.7.127' })).toThrow(RangeError);
    expect(() => defaultRuleSettings({ hostProbeSnatIpv6: 'fd16::1 counter accept' })).toThrow(RangeError);
  });
});

describe('parseGoBool', () => {
  it.each(TRUE_SPELLINGS)('%j is true', (value) => expect(parseGoBool(value)).toBe(true));
  it.each(FALSE_SPELLINGS)('%j is false', (value) => expect(parseGoBool(value)).toBe(false));
  it.each(NOT_BOOLEANS)('%j is not a boolean', (value) => expect(parseGoBool(value)).toBeUndefined());
});

describe('podOverridesFromAnnotations', () => {
  it('gives no overrides and no warnings without annotations', () => {
    expect(podOverridesFromAnnotations({})).toEqual({ overrides: NO_OVERRIDES, warnings: [] });
    expect(podOverridesFromAnnotations({ [ANNOTATION_DNS_CAPTURE]: undefined }).overrides.dnsProxy).toBe('unset');
  });

  it.each(TRUE_SPELLINGS)('bypass-inbound-capture=%j turns ingress mode on', (value) => {
    const { overrides, warnings } = podOverridesFromAnnotations({ [ANNOTATION_BYPASS_INBOUND_CAPTURE]: value });
    expect(overrides.ingressMode).toBe(true);
    expect(warnings).toEqual([]);
  });

  it.each(FALSE_SPELLINGS)('bypass-inbound-capture=%j leaves ingress mode off', (value) => {
    const { overrides, warnings } = podOverridesFromAnnotations({ [ANNOTATION_BYPASS_INBOUND_CAPTURE]: value });
    expect(overrides.ingressMode).toBe(false);
    expect(warnings).toEqual([]);
  });

  it.each(NOT_BOOLEANS)('bypass-inbound-capture=%j is ignored with a warning', (value) => {
    const { overrides, warnings } = podOverridesFromAnnotations({ [ANNOTATION_BYPASS_INBOUND_CAPTURE]: value });
    expect(overrides.ingressMode).toBe(false);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain(ANNOTATION_BYPASS_INBOUND_CAPTURE);
  });

  it.each(TRUE_SPELLINGS)('dns-capture=%j enables DNS capture', (value) => {
    const { overrides, warnings } = podOverridesFromAnnotations({ [ANNOTATION_DNS_CAPTURE]: value });
    expect(overrides.dnsProxy).toBe('enabled');
    expect(warnings).toEqual([]);
  });

  it.each(FALSE_SPELLINGS)('dns-capture=%j disables DNS capture', (value) => {
    const { overrides, warnings } = podOverridesFromAnnotations({ [ANNOTATION_DNS_CAPTURE]: value });
    expect(overrides.dnsProxy).toBe('disabled');
    expect(warnings).toEqual([]);
  });

  it.each(NOT_BOOLEANS)('dns-capture=%j stays unset with a warning', (value) => {
    const { overrides, warnings } = podOverridesFromAnnotations({ [ANNOTATION_DNS_CAPTURE]: value });
    expect(overrides.dnsProxy).toBe('unset');
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain(ANNOTATION_DNS_CAPTURE);
  });

  it('splits, trims and drops empty virtual interface names', () => {
    const { overrides, warnings } = podOverridesFromAnnotations({
      [ANNOTATION_REROUTE_VIRTUAL_INTERFACES]: ' fake1s0f0 ,, fake1s0f1,\tnet1 , ',
    });
    expect(overrides.virtualInterfaces).toEqual(['fake1s0f0', 'fake1s0f1', 'net1']);
    expect(warnings).toEqual([]);
    expect(podOverridesFromAnnotations({ [ANNOTATION_REROUTE_VIRTUAL_INTERFACES]: '' }).overrides.virtualInterfaces).toEqual([]);
  });

  const hostile = [
    'eth0 counter accept', // trimmed parts keep inner whitespace
    'a;flush ruleset',
    'x\nadd rule',
    '-j',
    'eth0/1',
    '.',
    '..',
    'averyveryverylong0', // 18 bytes > IFNAMSIZ-1
    '@istio-inpod-probes-v4',
    'eth+',
    'veth"x',
    'ethé',
    'a{b}',
  ];

  it.each(hostile)('rejects the interface name %j with a warning and never renders it', (name) => {
    const { overrides, warnings } = podOverridesFromAnnotations({
      [ANNOTATION_REROUTE_VIRTUAL_INTERFACES]: `good0,${name}`,
    });
    expect(overrides.virtualInterfaces).toEqual(['good0']);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain(ANNOTATION_REROUTE_VIRTUAL_INTERFACES);
    const model = buildInpodModel(defaultRuleSettings(), overrides);
    const nftIfaces = renderInpodNftables(model).match(/iifname \S+/g);
    expect(nftIfaces).toEqual(['iifname good0', 'iifname good0']);
    const iptIfaces = renderInpodIptables(model).v4.match(/-i \S+/g);
    expect(iptIfaces).toEqual(['-i good0', '-i good0']);
  });

  it('accepts names at the length limit and the usual characters', () => {
    for (const name of ['eth0', 'net1', 'fake1s0f0', 'a2345678901234b', 'br-1a2b.100', 'veth_x', '1s0f0']) {
      expect(interfaceNameProblem(name)).toBeUndefined();
    }
    expect(interfaceNameProblem('a2345678901234bc')).toBeDefined();
  });

  it('refuses hand-built overrides with invalid names when building the model', () => {
    expect(() => buildInpodModel(defaultRuleSettings(), withOverrides({ virtualInterfaces: ['x;y'] }))).toThrow(RangeError);
  });

  it('quotes valid names nft would read as a number', () => {
    const model = buildInpodModel(defaultRuleSettings(), withOverrides({ virtualInterfaces: ['1s0f0'] }));
    expect(renderInpodNftables(model)).toContain('iifname "1s0f0" meta l4proto tcp counter redirect to :15001');
    expect(renderInpodIptables(model).v4).toContain('-i 1s0f0 -p tcp -j REDIRECT --to-ports 15001');
  });

  it('reads all three annotations together', () => {
    const { overrides, warnings } = podOverridesFromAnnotations({
      [ANNOTATION_BYPASS_INBOUND_CAPTURE]: 'true',
      [ANNOTATION_DNS_CAPTURE]: 'false',
      [ANNOTATION_REROUTE_VIRTUAL_INTERFACES]: 'net1',
      'unrelated/annotation': 'x',
    });
    expect(overrides).toEqual({ ingressMode: true, dnsProxy: 'disabled', virtualInterfaces: ['net1'] });
    expect(warnings).toEqual([]);
  });
});

describe('DNS capture precedence', () => {
  const dnsKinds = ['redirectDnsUdp', 'redirectDnsTcp', 'dnsZoneForProxyQueries', 'dnsZoneForProxyReplies'];

  it('pod enabled wins over global off', () => {
    const settings = defaultRuleSettings({ dnsCapture: false });
    const overrides = withOverrides({ dnsProxy: 'enabled' });
    expect(dnsCaptureEnabled(settings, overrides)).toBe(true);
    const model = buildInpodModel(settings, overrides);
    expect(kinds(model)).toEqual(expect.arrayContaining(dnsKinds));
    expect(tablesUsed(model)).toEqual(['nat', 'mangle', 'raw']);
    expect(renderInpodNftables(model)).toContain('redirect to :15053');
    expect(renderInpodIptables(model).v4).toContain('* raw');
  });

  it('pod disabled wins over global on', () => {
    const settings = defaultRuleSettings({ dnsCapture: true });
    const overrides = withOverrides({ dnsProxy: 'disabled' });
    expect(dnsCaptureEnabled(settings, overrides)).toBe(false);
    const model = buildInpodModel(settings, overrides);
    expect(kinds(model).filter((kind) => dnsKinds.includes(kind))).toEqual([]);
    expect(tablesUsed(model)).toEqual(['nat', 'mangle']);
    expect(renderInpodNftables(model)).not.toContain('15053');
    expect(renderInpodNftables(model)).not.toContain('istio-ambient-raw');
    const ipt = renderInpodIptables(model);
    expect(ipt.v4).not.toContain('* raw');
    expect(ipt.v6).not.toContain('* raw');
  });

  it('unset follows the global setting', () => {
    expect(dnsCaptureEnabled(defaultRuleSettings({ dnsCapture: true }), NO_OVERRIDES)).toBe(true);
    expect(dnsCaptureEnabled(defaultRuleSettings({ dnsCapture: false }), NO_OVERRIDES)).toBe(false);
  });
});

describe('IPv6 off', () => {
  const model = buildInpodModel(defaultRuleSettings({ ipv6: false }), NO_OVERRIDES);

  it('has no IPv6 entries in the model', () => {
    expect(model.some((rule) => rule.family === 6)).toBe(false);
    expect(model.some((rule) => rule.family === 4)).toBe(true);
  });

  it('renders no ip6 rules', () => {
    const nft = renderInpodNftables(model);
    expect(nft).not.toContain('ip6 ');
    expect(nft).not.toContain('::1/128');
    const ipt = renderInpodIptables(model);
    expect(ipt.v6).toBeUndefined();
  });

  it('has no IPv6 host rule', () => {
    expect(buildHostModel(defaultRuleSettings({ ipv6: false })).map((rule) => rule.family)).toEqual([4]);
    expect(buildHostModel(defaultRuleSettings({ ipv6: true })).map((rule) => rule.family)).toEqual([4, 6]);
  });

  it('emits IPv6 entries next to their IPv4 twins when on', () => {
    const dual = buildInpodModel(defaultRuleSettings({ ipv6: true }), NO_OVERRIDES);
    const outbound = dual.filter((rule) => rule.kind === 'redirectOutbound').map((rule) => rule.family);
    expect(outbound).toEqual([4, 6]);
    const udp = dual.filter((rule) => rule.kind === 'redirectDnsUdp');
    expect(udp).toHaveLength(1);
    expect(udp[0]?.family).toBe('any');
  });
});

describe('ingress mode', () => {
  const normal = buildInpodModel(defaultRuleSettings(), NO_OVERRIDES);
  const ingress = buildInpodModel(defaultRuleSettings(), withOverrides({ ingressMode: true }));

  it('keeps the mangle connmark rule (istio#58546)', () => {
    expect(kinds(ingress)).toContain('setConnmarkFromInpodMark');
    expect(renderInpodNftables(ingress)).toContain('ct mark set ct mark & 0xfffff000 |  0x111');
    expect(renderInpodIptables(ingress).v4).toContain('-A ISTIO_PRERT -m mark --mark 0x539/0xfff -j CONNMARK --set-xmark 0x111/0xfff');
  });

  it('drops inbound redirection and the probe accept in prerouting', () => {
    expect(kinds(normal)).toContain('redirectInbound');
    expect(kinds(normal)).toContain('acceptProbeFromSnat');
    expect(kinds(ingress)).not.toContain('redirectInbound');
    expect(kinds(ingress)).not.toContain('acceptProbeFromSnat');
    expect(ingress.filter((rule) => rule.table === 'nat' && rule.chain === 'prerouting').map((rule) => rule.kind)).toEqual(['jump']);
    expect(renderInpodNftables(ingress)).not.toContain('15006');
  });

  it('keeps the probe reply accept in output and the nat prerouting chain (jump target)', () => {
    expect(kinds(ingress)).toContain('acceptProbeReply');
    expect(chainsUsed(ingress, 'nat')).toEqual(['prerouting', 'output']);
    expect(renderInpodNftables(ingress)).toContain('add chain inet istio-ambient-nat istio-prerouting\n');
  });
});

describe('model shape', () => {
  it('is frozen data', () => {
    const model = buildInpodModel(defaultRuleSettings(), NO_OVERRIDES);
    expect(Object.isFrozen(model)).toBe(true);
    expect(model.every((rule) => Object.isFrozen(rule))).toBe(true);
    expect(Object.isFrozen(NO_OVERRIDES)).toBe(true);
  });

  it('puts every rule in a known table/chain', () => {
    const model = buildInpodModel(defaultRuleSettings(), withOverrides({ virtualInterfaces: ['net1'] }));
    for (const rule of model) {
      expect(['nat', 'mangle', 'raw']).toContain(rule.table);
      expect(['prerouting', 'output']).toContain(rule.chain);
      expect([4, 6, 'any']).toContain(rule.family);
    }
  });
});
