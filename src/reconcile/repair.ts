// The one verify-and-repair routine, for pods and for the host, in both modes: at start-up
// (restored pods), on a netlink event and on the periodic sweep.
import { describeDrift, type DriftReport } from '../rules/drift.js';

/** Something whose kernel state can be checked against what it should be, and put back. */
export interface RepairTarget {
  verify(): Promise<DriftReport>;
  repair(): Promise<void>;
}

export type RepairOutcome =
  | { status: 'in-sync' }
  | { status: 'repaired'; reason: string; drift: string[] }
  | { status: 'failed'; reason: string; drift: string[]; error: Error };

/** The metric label for what drifted: nftables, ip-rule, route (joined with '+'), or verify-failed. */
export function driftReason(report: DriftReport): string {
  const kinds = new Set(
    [...report.missing, ...report.extra].map((d) => (d.kind === 'ip-rule' || d.kind === 'route' ? d.kind : 'nftables')),
  );
  return [...kinds].sort().join('+') || 'unknown';
}

/** Verifies; on drift (or a verify that failed) re-applies. Never throws. */
export async function verifyAndRepair(target: RepairTarget): Promise<RepairOutcome> {
  let reason: string;
  let drift: string[];
  try {
    const report = await target.verify();
    if (report.inSync) return { status: 'in-sync' };
    reason = driftReason(report);
    drift = describeDrift(report);
  } catch (err) {
    reason = 'verify-failed';
    drift = [`verify failed: ${(err as Error).message}`];
  }
  try {
    await target.repair();
    return { status: 'repaired', reason, drift };
  } catch (err) {
    return { status: 'failed', reason, drift, error: err as Error };
  }
}
