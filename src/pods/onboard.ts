// The two halves of putting a pod into the mesh, run at the same time: the in-pod rules (an
// addon thread in the pod's netns) and the ZDS add (ztunnel enters the netns and binds its
// listeners before it acks). Istio runs them one after the other; neither depends on the other,
// and nothing in the pod runs until the CNI ADD returns, so the order is not observable: ztunnel
// sees the same messages, and the pod's first packet meets both. The ADD waits for both.
// Both need the pod's lo up, which the runtime may not have done yet (containerd does it
// concurrently with the CNI chain): ztunnel binds 127.0.0.1:15053 as soon as it has the add.
import type { NetAddon, NetnsHandle } from '../addon/net-addon.js';
import { LOOPBACK_UP_STEP } from '../rules/loopback.js';
import type { InpodRuleManager, RulesStamp } from '../rules/manager.js';
import type { PodOverrides } from '../rules/settings.js';
import type { PodIdentity, PodRegistry } from '../zds/registry.js';

/** The rules could not be installed (not retryable by the agent: the sandbox is broken). */
export class RuleApplyError extends Error {}

export interface OnboardResult {
  rulesMs: number;
  zdsMs: number;
  /** The rules' stamp (nftables): lets a restart verify them without listing. */
  stamp?: RulesStamp;
}

export interface OnboardDeps {
  addon: NetAddon;
  rules: InpodRuleManager;
  registry: PodRegistry;
  /** Called as soon as the rules are in, with their stamp: a ztunnel failure still leaves a pod worth recording. */
  onRulesApplied?: (stamp: RulesStamp | undefined) => void;
}

const msSince = (start: bigint): number => Number(process.hrtime.bigint() - start) / 1e6;

/**
 * Registers the pod (the registry takes `netns`), then applies the rules and announces the pod
 * to ztunnel concurrently. A rule failure is thrown as RuleApplyError, after taking a pod that
 * was not registered before back out of ztunnel (it must not serve a pod whose traffic is not
 * redirected). A ztunnel failure is thrown as is, with the pod left registered: it goes out with
 * the next snapshot, and a retried ADD completes it.
 */
export async function onboardPod(deps: OnboardDeps, pod: PodIdentity, netns: NetnsHandle, overrides: PodOverrides): Promise<OnboardResult> {
  const wasRegistered = deps.registry.has(pod.uid);
  const handle = deps.registry.register(pod, netns);
  if (!handle) throw new Error(`pod ${pod.uid}: no netns to enrol`);
  const start = process.hrtime.bigint();
  // ztunnel's half is the longer one (it enters the netns and binds four listeners): lo up is a
  // step list of its own in the same netns visit as the rules (asked for in the same turn, see
  // NetAddon.run), settled as soon as it is done, so ztunnel is told while the rules go in.
  const announced = deps.addon
    .run(handle, [LOOPBACK_UP_STEP])
    .then(() => deps.registry.announce(pod.uid))
    .then(() => msSince(start));
  const applied = deps.rules.apply(handle, overrides).then((stamp) => {
    deps.onRulesApplied?.(stamp);
    return { ms: msSince(start), stamp };
  });
  const [rules, zds] = await Promise.allSettled([applied, announced]);
  if (rules.status === 'rejected') {
    if (!wasRegistered) await deps.registry.delete(pod.uid).catch(() => undefined);
    const reason = rules.reason as Error;
    throw new RuleApplyError(`applying in-pod rules: ${reason.message}`, { cause: reason });
  }
  if (zds.status === 'rejected') throw zds.reason;
  return { rulesMs: rules.value.ms, zdsMs: zds.value, ...(rules.value.stamp ? { stamp: rules.value.stamp } : {}) };
}

/**
 * What a pod's onboarding still waits for, for an ADD answered before it finished; undefined
 * when the pod is not registered yet (nothing of it has started).
 */
export function onboardingPending(registry: PodRegistry, uid: string): string | undefined {
  if (!registry.has(uid)) return undefined;
  return registry.awaitingZtunnel(uid)
    ? 'ztunnel has not acknowledged it (the pod stays registered and goes to ztunnel with its next snapshot)'
    : 'its in-pod rules are not applied yet';
}
