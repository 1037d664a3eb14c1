// What differs between the rules a pod should have and the rules it has.
import type { ListedRuleset } from './nft-listing.js';

export type DriftKind = 'table' | 'chain' | 'rule' | 'order' | 'set' | 'ip-rule' | 'route';

export interface DriftItem {
  kind: DriftKind;
  /** Where it is: `inet istio-ambient-nat`, `inet istio-ambient-nat/istio-output`, `ipv4`... */
  where: string;
  text: string;
}

export interface DriftReport {
  inSync: boolean;
  missing: DriftItem[];
  extra: DriftItem[];
}

export function driftReport(missing: DriftItem[], extra: DriftItem[]): DriftReport {
  return { inSync: missing.length === 0 && extra.length === 0, missing, extra };
}

export function mergeDrift(...reports: DriftReport[]): DriftReport {
  return driftReport(
    reports.flatMap((r) => r.missing),
    reports.flatMap((r) => r.extra),
  );
}

export function describeDrift(report: DriftReport): string[] {
  return [
    ...report.missing.map((d) => `missing ${d.kind} in ${d.where}: ${d.text}`),
    ...report.extra.map((d) => `extra ${d.kind} in ${d.where}: ${d.text}`),
  ];
}

/** Multiset difference: each element of `b` cancels one equal element of `a`. */
function minus(a: readonly string[], b: readonly string[]): string[] {
  const counts = new Map<string, number>();
  for (const x of b) counts.set(x, (counts.get(x) ?? 0) + 1);
  return a.filter((x) => {
    const n = counts.get(x) ?? 0;
    if (n === 0) return true;
    counts.set(x, n - 1);
    return false;
  });
}

function compareRules(where: string, expected: readonly string[], actual: readonly string[], out: DriftReport): void {
  const missing = minus(expected, actual);
  const extra = minus(actual, expected);
  out.missing.push(...missing.map((text) => ({ kind: 'rule' as const, where, text })));
  out.extra.push(...extra.map((text) => ({ kind: 'rule' as const, where, text })));
  // Same rules in another order still change what matches first.
  if (missing.length === 0 && extra.length === 0 && expected.join('\n') !== actual.join('\n')) {
    out.extra.push({ kind: 'order', where, text: 'rules are in a different order' });
  }
}

/** Compares two listings table by table, chain by chain, rule by rule. */
export function diffRulesets(expected: ListedRuleset, actual: ListedRuleset): DriftReport {
  const out = driftReport([], []);
  for (const [key, table] of expected) {
    const other = actual.get(key);
    if (!other) {
      out.missing.push({ kind: 'table', where: key, text: `table ${key}` });
      continue;
    }
    for (const [name, chain] of table.chains) {
      const where = `${key}/${name}`;
      const otherChain = other.chains.get(name);
      if (!otherChain || otherChain.spec !== chain.spec) {
        out.missing.push({ kind: 'chain', where: key, text: `chain ${name} ${chain.spec}`.trim() });
        if (otherChain) out.extra.push({ kind: 'chain', where: key, text: `chain ${name} ${otherChain.spec}`.trim() });
        continue;
      }
      compareRules(where, chain.rules, otherChain.rules, out);
    }
    for (const name of other.chains.keys()) {
      if (!table.chains.has(name)) out.extra.push({ kind: 'chain', where: key, text: `chain ${name}` });
    }
  }
  for (const key of actual.keys()) {
    if (!expected.has(key)) out.extra.push({ kind: 'table', where: key, text: `table ${key}` });
  }
  return driftReport(out.missing, out.extra);
}
