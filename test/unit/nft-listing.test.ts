import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { isAmbientTable } from '../../src/rules/canonical.js';
import { describeDrift, diffRulesets } from '../../src/rules/drift.js';
import { parseNftListing, tableKey } from '../../src/rules/nft-listing.js';

const fixture = (name: string): string => readFileSync(new URL(`../fixtures/${name}`, import.meta.url), 'utf8');
const listing = fixture('default-inpod.listing.nft');

describe('parseNftListing', () => {
  it('reads tables, base-chain declarations and rules from a real kernel listing', () => {
    const ruleset = parseNftListing(listing);
    expect([...ruleset.keys()]).toEqual([
      tableKey('inet', 'istio-ambient-nat'),
      tableKey('inet', 'istio-ambient-mangle'),
      tableKey('inet', 'istio-ambient-raw'),
    ]);
    const nat = ruleset.get('inet istio-ambient-nat')!;
    expect([...nat.chains.keys()]).toEqual(['prerouting', 'output', 'istio-prerouting', 'istio-output']);
    expect(nat.chains.get('output')).toEqual({
      spec: 'type nat hook output priority -100; policy accept;',
      rules: ['jump istio-output'],
    });
    expect(nat.chains.get('istio-output')!.rules).toHaveLength(6);
    expect(nat.chains.get('istio-output')!.rules.at(-1)).toBe(
      'meta l4proto tcp ip daddr != 127.0.0.1 meta mark & 0x00000fff != 0x00000539 counter redirect to :15001',
    );
  });

  it('skips sets and their elements, and keeps only the tables asked for', () => {
    const ruleset = parseNftListing(fixture('default-inpod-with-set.listing.nft'));
    const nat = ruleset.get('inet istio-ambient-nat')!;
    expect(nat.chains.has('probes')).toBe(false);
    expect(nat.chains.get('istio-output')!.rules.join('\n')).not.toContain('10.1.1.1');
    const filtered = parseNftListing(`table ip other {\n\tchain c {\n\t\tcounter\n\t}\n}\n${listing}`, isAmbientTable);
    expect(filtered.has('ip other')).toBe(false);
    expect(filtered.size).toBe(3);
  });

  it('returns nothing for an empty listing', () => {
    expect(parseNftListing('').size).toBe(0);
  });
});

describe('diffRulesets', () => {
  const expected = parseNftListing(listing);

  it('finds nothing when the listings match', () => {
    expect(diffRulesets(expected, parseNftListing(listing))).toEqual({ inSync: true, missing: [], extra: [] });
  });

  it('reports a missing rule, an extra rule and a duplicated rule', () => {
    const lines = listing.split('\n');
    const outbound = lines.findIndex((l) => l.includes('redirect to :15001'));
    const dns = lines.findIndex((l) => l.includes('udp dport 53 counter redirect'));
    const drifted = [...lines];
    drifted.splice(outbound, 1, '\t\tcounter drop', lines[dns]!);
    const report = diffRulesets(expected, parseNftListing(drifted.join('\n')));
    expect(report.inSync).toBe(false);
    expect(report.missing).toEqual([
      expect.objectContaining({ kind: 'rule', where: 'inet istio-ambient-nat/istio-output', text: expect.stringContaining(':15001') }),
    ]);
    expect(report.extra.map((d) => d.text)).toEqual(['counter drop', lines[dns]!.trim()]);
  });

  it('reports a missing table and an extra table', () => {
    const withoutRaw = listing.slice(0, listing.indexOf('table inet istio-ambient-raw'));
    const report = diffRulesets(expected, parseNftListing(withoutRaw));
    expect(describeDrift(report)).toEqual(['missing table in inet istio-ambient-raw: table inet istio-ambient-raw']);
    const reverse = diffRulesets(parseNftListing(withoutRaw), expected);
    expect(reverse.extra).toEqual([{ kind: 'table', where: 'inet istio-ambient-raw', text: 'table inet istio-ambient-raw' }]);
  });

  it('reports a chain whose hook changed and rules that changed order', () => {
    const hooked = listing.replace('type nat hook output priority -100;', 'type nat hook output priority 0;');
    const hookReport = diffRulesets(expected, parseNftListing(hooked));
    expect(hookReport.missing.map((d) => d.kind)).toEqual(['chain']);
    expect(hookReport.extra.map((d) => d.kind)).toEqual(['chain']);

    const lines = listing.split('\n');
    const a = lines.findIndex((l) => l.includes('0x00000111 counter accept'));
    [lines[a], lines[a + 1]] = [lines[a + 1]!, lines[a]!];
    const orderReport = diffRulesets(expected, parseNftListing(lines.join('\n')));
    expect(orderReport.extra).toEqual([
      { kind: 'order', where: 'inet istio-ambient-nat/istio-output', text: 'rules are in a different order' },
    ]);
  });
});
