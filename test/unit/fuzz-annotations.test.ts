// Hostile pod annotation values (reroute-virtual-interfaces, dns-capture, bypass-inbound-capture)
// never fail the pod and never reach rule text: a bad value is dropped with a warning (as Istio
// drops an unparsable boolean), and what the renderers print holds only valid interface names.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  ANNOTATION_BYPASS_INBOUND_CAPTURE,
  ANNOTATION_DNS_CAPTURE,
  ANNOTATION_REROUTE_VIRTUAL_INTERFACES,
} from '../../src/rules/constants.js';
import { renderInpodIptables } from '../../src/rules/iptables.js';
import { buildInpodModel } from '../../src/rules/model.js';
import { renderInpodNftables } from '../../src/rules/nftables.js';
import {
  defaultRuleSettings,
  MAX_VIRTUAL_INTERFACES,
  NO_OVERRIDES,
  parseGoBool,
  podOverridesFromAnnotations,
  type PodOverrides,
  type RuleSettings,
} from '../../src/rules/settings.js';
import { fuzzParams, fuzzTest } from '../helpers/fuzz.js';

/**
 * The oracle, written independently of settings.ts: Linux IFNAMSIZ (15 bytes and the NUL), no
 * whitespace, '/', quotes, control characters or ';', and (stricter, for rule text) only
 * [A-Za-z0-9_.-] without a leading '-' and not "." or "..".
 */
function isSafeInterfaceName(name: string): boolean {
  return /^[A-Za-z0-9_.][A-Za-z0-9_.-]{0,14}$/.test(name) && name !== '.' && name !== '..';
}

/** Every interface name the renderers printed (nft iifname/oifname, iptables -i/-o). */
function renderedInterfaces(nft: string, ipt: string[]): string[] {
  const names: string[] = [];
  for (const m of nft.matchAll(/\b[io]ifname\s+(?:!=\s+)?("[^"\n]*"|\S+)/g)) names.push(m[1]!.replace(/^"(.*)"$/, '$1'));
  for (const text of ipt) for (const m of text.matchAll(/(?:^|\s)-[io]\s+(\S+)/g)) names.push(m[1]!);
  return names;
}

const VIRTUAL_NFT =
  /^add rule inet istio-ambient-nat istio-prerouting iifname (\S+) meta l4proto tcp counter (?:redirect to :15001|return)$/;
const VIRTUAL_IPT = /^-A ISTIO_PRERT -i (\S+) -p tcp -j (?:REDIRECT --to-ports 15001|RETURN)$/;

/**
 * Problems in the rule text for `overrides`, checked line by line against the same pod without
 * virtual interfaces: every extra line must be one of the two virtual-interface rules, for a safe
 * name the overrides hold. (Plain checks rather than expect(): this runs for thousands of lines.)
 */
function ruleTextProblems(settings: RuleSettings, overrides: PodOverrides): string[] {
  const problems: string[] = [];
  const model = buildInpodModel(settings, overrides);
  const nft = renderInpodNftables(model);
  const ipt = renderInpodIptables(model);
  const iptTexts = [ipt.v4, ...(ipt.v6 === undefined ? [] : [ipt.v6])];
  for (const name of renderedInterfaces(nft, iptTexts)) {
    if (!isSafeInterfaceName(name)) problems.push(`rendered interface ${JSON.stringify(name)}`);
  }
  const baseline = buildInpodModel(settings, { ...overrides, virtualInterfaces: [] });
  const baseNft = new Set(renderInpodNftables(baseline).split('\n'));
  const baseIpt = renderInpodIptables(baseline);
  const baseIptLines = new Set([...baseIpt.v4.split('\n'), ...(baseIpt.v6 ?? '').split('\n')]);
  const extra = (line: string, template: RegExp): void => {
    const m = template.exec(line);
    if (!m || !overrides.virtualInterfaces.includes(m[1]!.replace(/^"(.*)"$/, '$1')))
      problems.push(`unexpected line ${JSON.stringify(line)}`);
  };
  for (const line of nft.split('\n')) if (!baseNft.has(line)) extra(line, VIRTUAL_NFT);
  for (const text of iptTexts) for (const line of text.split('\n')) if (!baseIptLines.has(line)) extra(line, VIRTUAL_IPT);
  // No control character other than the line breaks, in either dialect.
  if (/[\u0000-\u0009\u000b-\u001f\u007f]/.test(nft + iptTexts.join(''))) problems.push('control character in the rule text');
  return problems;
}

function expectOnlySafeRuleText(settings: RuleSettings, overrides: PodOverrides): void {
  expect(ruleTextProblems(settings, overrides)).toEqual([]);
}

const hostilePiece = fc.oneof(
  { arbitrary: fc.stringMatching(/^[A-Za-z0-9_.-]{1,15}$/), weight: 3 }, // valid-looking
  { arbitrary: fc.string({ unit: 'binary', maxLength: 20 }), weight: 2 },
  { arbitrary: fc.string({ unit: 'binary-ascii', maxLength: 20 }), weight: 2 },
  {
    arbitrary: fc.constantFrom(
      'eth0; flush ruleset',
      'eth0;flush ruleset',
      'eth0 counter accept',
      '"eth0"',
      "'eth0'",
      'eth0\nadd rule inet x y accept',
      'eth0\r',
      'a\u0000b',
      '-j ACCEPT',
      '--to-ports',
      'eth+',
      '@set',
      '{a,b}',
      '$var',
      'eth0/1',
      'eth0:1',
      '.',
      '..',
      '-eth',
      'a2345678901234bc',
      'ethé',
      '\u200beth0',
      ' eth0 ',
      '\teth0',
    ),
    weight: 2,
  },
);

/** Comma lists of pieces (as Istio splits them), or any text at all. */
const interfaceList = fc.oneof(
  { arbitrary: fc.array(hostilePiece, { maxLength: 12 }).map((parts) => parts.join(',')), weight: 5 },
  { arbitrary: fc.string({ unit: 'binary', maxLength: 200 }), weight: 1 },
  { arbitrary: fc.integer({ min: 1, max: 200 }).map((n) => Array.from({ length: n }, (_, i) => `v${i}`).join(',')), weight: 1 },
);

const boolValue = fc.oneof(
  fc.constantFrom('1', 't', 'T', 'TRUE', 'true', 'True', '0', 'f', 'F', 'FALSE', 'false', 'False'),
  fc.constantFrom('', ' true', 'yes', 'on', 'TrUe', 'true; flush ruleset', 'false\n'),
  fc.string({ unit: 'binary', maxLength: 20 }),
);

const annotations = fc.record(
  {
    [ANNOTATION_REROUTE_VIRTUAL_INTERFACES]: interfaceList,
    [ANNOTATION_DNS_CAPTURE]: boolValue,
    [ANNOTATION_BYPASS_INBOUND_CAPTURE]: boolValue,
    other: fc.string({ maxLength: 20 }),
  },
  { requiredKeys: [] },
);

const settingsArb = fc.record({ ipv6: fc.boolean(), dnsCapture: fc.boolean() }).map((s) => defaultRuleSettings(s));

describe('fuzz: pod annotations to rules', () => {
  it('never throws; accepted interfaces are safe, distinct, bounded; valid ones are kept; warnings are bounded', fuzzTest(), () => {
    fc.assert(
      fc.property(annotations, (a) => {
        const { overrides, warnings } = podOverridesFromAnnotations(a);
        const names = overrides.virtualInterfaces;
        for (const name of names) expect(isSafeInterfaceName(name), name).toBe(true);
        expect(new Set(names).size).toBe(names.length);
        expect(names.length).toBeLessThanOrEqual(MAX_VIRTUAL_INTERFACES);
        // Completeness: the first MAX distinct safe names of the list are all kept, in order.
        const raw = a[ANNOTATION_REROUTE_VIRTUAL_INTERFACES];
        const expected = [
          ...new Set(
            (raw ?? '')
              .split(',')
              .map((p) => p.trim())
              .filter(isSafeInterfaceName),
          ),
        ].slice(0, MAX_VIRTUAL_INTERFACES);
        expect(names).toEqual(expected);
        // Booleans follow Go's strconv.ParseBool, anything else is ignored.
        const bypass = a[ANNOTATION_BYPASS_INBOUND_CAPTURE];
        expect(overrides.ingressMode).toBe(bypass === undefined ? false : (parseGoBool(bypass) ?? false));
        const dns = a[ANNOTATION_DNS_CAPTURE] === undefined ? undefined : parseGoBool(a[ANNOTATION_DNS_CAPTURE]);
        expect(overrides.dnsProxy).toBe(dns === undefined ? 'unset' : dns ? 'enabled' : 'disabled');
        // A hostile value cannot flood the log: a few short warnings at most.
        expect(warnings.length).toBeLessThanOrEqual(10);
        for (const w of warnings) expect(w.length).toBeLessThan(400);
      }),
      fuzzParams(2000),
    );
  });

  it('the rendered nft and iptables text holds only safe interface names and no injected statement', fuzzTest(), () => {
    fc.assert(
      fc.property(settingsArb, annotations, (settings, a) => {
        expectOnlySafeRuleText(settings, podOverridesFromAnnotations(a).overrides);
      }),
      fuzzParams(500),
    );
  });

  describe('explicit hostile values', () => {
    const HUGE = `${'eth0; flush ruleset,'.repeat(5_000)}`; // 100 KB
    const cases: Array<[string, string, string[]]> = [
      ['eth0; flush ruleset', 'eth0; flush ruleset', []],
      ['quotes', '"eth0",\'net1\',net"2', []],
      ['a newline with an injected rule', 'eth0\nadd rule inet istio-ambient-nat istio-prerouting accept', []],
      ['a carriage return', 'net1\r', ['net1']], // trimmed like Istio's strings.TrimSpace
      ['a 100 KB value', HUGE, []],
      [
        '100 KB of valid names',
        Array.from({ length: 12_000 }, (_, i) => `n${i}`).join(','),
        Array.from({ length: MAX_VIRTUAL_INTERFACES }, (_, i) => `n${i}`),
      ],
      ['duplicates', 'net1,net1, net1 ,net2', ['net1', 'net2']],
      ['good and bad mixed', 'net1,eth0;flush ruleset,net2', ['net1', 'net2']],
      ['16 bytes', 'a2345678901234bc', []],
    ];
    it.each(cases)('%s', (_label, value, accepted) => {
      const { overrides, warnings } = podOverridesFromAnnotations({ [ANNOTATION_REROUTE_VIRTUAL_INTERFACES]: value });
      expect(overrides.virtualInterfaces).toEqual(accepted);
      const dropped = value
        .split(',')
        .map((p) => p.trim())
        .filter((p) => p !== '' && !isSafeInterfaceName(p));
      if (dropped.length > 0 || accepted.length === MAX_VIRTUAL_INTERFACES) expect(warnings.length).toBeGreaterThan(0);
      for (const w of warnings) expect(w.length).toBeLessThan(400);
      const settings = defaultRuleSettings();
      expectOnlySafeRuleText(settings, overrides);
      if (accepted.length === 0) {
        const model = buildInpodModel(settings, overrides);
        expect(renderInpodNftables(model)).toBe(renderInpodNftables(buildInpodModel(settings, NO_OVERRIDES)));
        expect(renderInpodIptables(model)).toEqual(renderInpodIptables(buildInpodModel(settings, NO_OVERRIDES)));
      }
    });

    it.each([
      ['dns-capture', ANNOTATION_DNS_CAPTURE],
      ['bypass-inbound-capture', ANNOTATION_BYPASS_INBOUND_CAPTURE],
    ])('a hostile %s value is ignored with one short warning', (_label, key) => {
      for (const value of ['true; flush ruleset', 'true\n', '"true"', 'x'.repeat(100_000)]) {
        const { overrides, warnings } = podOverridesFromAnnotations({ [key]: value });
        expect(overrides).toEqual(NO_OVERRIDES);
        expect(warnings).toHaveLength(1);
        expect(warnings[0]!.length).toBeLessThan(300);
      }
    });

    it('a value that is not a string (a broken API object) is ignored, not thrown on', () => {
      const weird = {
        [ANNOTATION_REROUTE_VIRTUAL_INTERFACES]: 42,
        [ANNOTATION_DNS_CAPTURE]: null,
        [ANNOTATION_BYPASS_INBOUND_CAPTURE]: ['true'],
      } as unknown as Record<string, string>;
      const { overrides, warnings } = podOverridesFromAnnotations(weird);
      expect(overrides).toEqual(NO_OVERRIDES);
      expect(warnings).toHaveLength(3);
    });
  });
});
