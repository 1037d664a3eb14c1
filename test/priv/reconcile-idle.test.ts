// The idle cost of live reconciliation: 330 enrolled pods (real namespaces, real rules) watched
// for 60 s (RECONCILE_IDLE_SECONDS) with the default 30 s sweep. The watchers hold at most two fds
// per pod (one nf_tables and one rtnetlink socket; the netns fd is the registry's, held with or
// without reconciliation) and cost under 1% of one core (utime + stime of this process from
// /proc/self/stat, where the reconciler runs).
import { readFileSync, readlinkSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';

import { NativeNetAddon } from '../../src/addon/net-addon.js';
import { fdCount } from '../helpers/netns-files.js';
import { reconcileRegisteredPods } from '../../src/reconcile/pod-targets.js';
import { Reconciler } from '../../src/reconcile/reconciler.js';
import { StampedRules } from '../../src/reconcile/stamped-rules.js';
import { ROUTE_TABLE_INBOUND } from '../../src/rules/constants.js';
import { NftablesInpodRules } from '../../src/rules/nftables-manager.js';
import { defaultRuleSettings, NO_OVERRIDES } from '../../src/rules/settings.js';
import { mapLimit } from '../../src/util/map-limit.js';
import { PodRegistry } from '../../src/zds/registry.js';
import { createNetns, deleteNetns, privilegedSkipReason, requirePrivilegedInCi, type TestNetns } from '../helpers/netns.js';

requirePrivilegedInCi();
const skip = privilegedSkipReason();
const PODS = 330;
const IDLE_S = Number(process.env['RECONCILE_IDLE_SECONDS'] ?? 60);

/** CPU time of this process in ms (utime + stime from /proc/self/stat, clock ticks of 10 ms). */
function cpuMs(): number {
  const stat = readFileSync('/proc/self/stat', 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10; // utime, stime (fields 14 and 15)
}

describe.skipIf(skip)(`live reconciliation idle cost${skip ? ` — skipped: ${skip}` : ''}`, () => {
  const namespaces: TestNetns[] = [];
  let reconciler: Reconciler | undefined;
  let registry: PodRegistry | undefined;

  afterAll(() => {
    reconciler?.stop();
    registry?.close();
    for (const ns of namespaces) deleteNetns(ns);
  });

  it(
    `${PODS} idle pods for ${IDLE_S} s: < 1% of one core, <= 2 fds per pod`,
    async () => {
      const addon = new NativeNetAddon();
      addon.warmUp();
      const rules = new StampedRules(new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: false })));
      registry = new PodRegistry({ podAdded: async () => undefined, podDeleted: async () => undefined });
      for (let i = 0; i < PODS; i++) namespaces.push(createNetns('idle'));
      const fdsBefore = fdCount(); // before the pods' namespaces are opened: every fd a pod costs counts
      const handles = namespaces.map((ns) => addon.openNetns(ns.path));
      await mapLimit(handles, 4, (h) => rules.apply(h, NO_OVERRIDES));
      let checks = 0;
      reconciler = new Reconciler({
        addon,
        routeTable: ROUTE_TABLE_INBOUND,
        intervalMs: 30_000,
        metrics: { repairs: () => undefined, check: () => void checks++ },
      });
      reconcileRegisteredPods(reconciler, registry, rules, {});
      reconciler.start();
      handles.forEach((h, i) => registry!.adopt({ uid: `idle-${i}`, name: `idle-${i}`, namespace: 'test', serviceAccount: 'default' }, h));
      // Settle: every watch open and its first check done.
      const settleStart = Date.now();
      while (checks < PODS && Date.now() - settleStart < 30_000) await new Promise((r) => setTimeout(r, 100));
      expect(checks).toBeGreaterThanOrEqual(PODS);
      const watchFds = reconciler.watchFds();
      expect(watchFds).toBe(2 * PODS);
      // A pod costs its two watch sockets and nothing more: one of them holds its namespace.
      expect(fdCount() - fdsBefore).toBeLessThanOrEqual(2 * PODS + 4);
      expect(handles.every((h) => readlinkSync(`/proc/self/fd/${h.fd}`).startsWith('socket:'))).toBe(true);

      const cpu0 = cpuMs();
      const t0 = Date.now();
      const checks0 = checks;
      await new Promise((r) => setTimeout(r, IDLE_S * 1000));
      const share = (cpuMs() - cpu0) / (Date.now() - t0);
      console.log(
        `idle ${PODS} pods ${IDLE_S}s: cpu ${(share * 100).toFixed(3)}% of one core, ${watchFds / PODS} watch fds per pod, ${checks - checks0} sweep checks`,
      );
      expect(share).toBeLessThan(0.01);
      // Only the sweeps checked anything (every pod once per sweep), no event-driven churn.
      expect((checks - checks0) % PODS).toBe(0);
      expect(checks - checks0).toBeLessThanOrEqual(PODS * Math.ceil(IDLE_S / 30));
      for (let i = 0; i < PODS; i++) expect(reconciler.status(`idle-${i}`)?.repairs).toBe(0);
    },
    180_000 + IDLE_S * 1000,
  );
});
