// Every pod the registry holds a netns for is a reconcile target, in both modes: a registration
// (ADD, restore, re-enrolment with a new sandbox) starts its watch, a removal ends it. The mode
// contributes what only it knows (per-pod overrides, its per-pod lock, what a failed repair means).
import type { NetnsHandle } from '../addon/net-addon.js';
import type { WatchKind } from '../addon/netns-watch.js';
import type { InpodRuleManager } from '../rules/manager.js';
import { NO_OVERRIDES, type PodOverrides } from '../rules/settings.js';
import type { PodRegistry } from '../zds/registry.js';
import type { ReconcileTarget, Reconciler } from './reconciler.js';
import { verifyAndRepair, type RepairOutcome, type RepairTarget } from './repair.js';
import type { StampedRules } from './stamped-rules.js';

/** What the pods' mode adds to reconciliation (all optional). */
export interface PodReconcileHooks {
  /** Runs a check under the mode's per-pod lock, so a repair never races the pod's removal. */
  exclusive?<T>(uid: string, work: () => Promise<T>): Promise<T>;
  overridesFor?(uid: string): PodOverrides;
  onOutcome?(uid: string, outcome: RepairOutcome): void;
  onAddressesChanged?(uid: string, netns: NetnsHandle): void;
}

/** The host netns and the host dataplane's own verify and repair (Kubernetes mode). */
export interface HostReconcileTarget extends RepairTarget {
  netns: NetnsHandle;
}

export const POD_WATCH_KINDS: readonly WatchKind[] = ['nftables', 'routing'];

/** The verify-and-repair routine applied to one pod's in-pod rules. */
export function podRepairTarget(rules: InpodRuleManager, netns: NetnsHandle, overrides: () => PodOverrides): RepairTarget {
  return {
    verify: () => rules.verify(netns, overrides()),
    repair: async () => {
      await rules.apply(netns, overrides());
    },
  };
}

export function hostTarget(host: HostReconcileTarget): ReconcileTarget {
  return {
    key: 'host',
    scope: 'host',
    netns: host.netns,
    // Any commit in the host netns (kube-proxy's too) moves the generation: the host check runs
    // at most once per poll, and its listing is of our own table only.
    kinds: ['nftables'],
    logFields: { target: 'host' },
    check: () => verifyAndRepair(host),
  };
}

/** Keeps the reconciler's pod targets equal to the registry's pods with a netns; returns the unsubscribe. */
export function reconcileRegisteredPods(
  reconciler: Reconciler,
  registry: PodRegistry,
  rules: StampedRules,
  hooks: PodReconcileHooks,
): () => void {
  const exclusive = <T>(uid: string, work: () => Promise<T>): Promise<T> => (hooks.exclusive ? hooks.exclusive(uid, work) : work());
  const targetOf = (uid: string, netns: NetnsHandle): ReconcileTarget => {
    const info = registry.workloadOf(uid);
    const overrides = (): PodOverrides => hooks.overridesFor?.(uid) ?? NO_OVERRIDES;
    return {
      key: uid,
      scope: 'pod',
      netns,
      kinds: POD_WATCH_KINDS,
      logFields: { pod: info ? `${info.namespace}/${info.name}` : uid, uid },
      check: () =>
        exclusive(uid, async () => {
          // Removed or re-enrolled with another sandbox while this check waited: not ours any more.
          if (registry.netnsOf(uid) !== netns || netns.closed) return undefined;
          return verifyAndRepair(podRepairTarget(rules, netns, overrides));
        }),
      onOutcome: (outcome) => hooks.onOutcome?.(uid, outcome),
      onAddressesChanged: () => hooks.onAddressesChanged?.(uid, netns),
    };
  };
  const watched = new Map<string, NetnsHandle>();
  const unsubscribe = registry.observe((uid, netns) => {
    const old = watched.get(uid);
    if (old) rules.forget(old);
    if (netns) {
      watched.set(uid, netns);
      reconciler.add(targetOf(uid, netns));
    } else {
      watched.delete(uid);
      reconciler.remove(uid);
    }
  });
  for (const { uid } of registry.snapshot()) {
    const netns = registry.netnsOf(uid);
    if (netns) {
      watched.set(uid, netns);
      reconciler.add(targetOf(uid, netns));
    }
  }
  return unsubscribe;
}
