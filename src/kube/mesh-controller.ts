// Kubernetes mode: Istio's node-agent logic (docs/istio-behaviours.md §1). Pods of this node and all
// namespaces come from informers; a pod is put into the mesh from the CNI path (new pods) or from
// informer events (label changes, pods that existed before the agent), and taken out on
// un-labelling, deletion or termination. The pod annotation `ambient.istio.io/redirection` is the
// state machine that survives restarts: `pending` (rules in place, ztunnel has not accepted),
// `enabled` (fully enrolled), absent (not enrolled).
import type { V1Namespace, V1Pod } from '@kubernetes/client-node';
import { hasErrorCode } from '../addon/errors.js';
import { sameNetns, type NetAddon, type NetnsHandle, type NetnsIdentity } from '../addon/net-addon.js';
import type { PluginAddEvent } from '../cni/protocol.js';
import { silentLogger, type Logger } from '../ops/log.js';
import { PodNetnsOpener } from '../pods/netns-path.js';
import { onboardPod, RuleApplyError, type OnboardResult } from '../pods/onboard.js';
import { verifyAndRepair } from '../reconcile/repair.js';
import { describeDrift } from '../rules/drift.js';
import { KeyedQueue } from '../util/keyed-queue.js';
import { mapLimit } from '../util/map-limit.js';
import type { InpodRuleManager } from '../rules/manager.js';
import { podOverridesFromAnnotations, type PodOverrides } from '../rules/settings.js';
import { isRetryable } from '../zds/errors.js';
import type { PodRegistry } from '../zds/registry.js';
import { RetryQueue } from './retry-queue.js';

export const ANNOTATION_REDIRECTION = 'ambient.istio.io/redirection';
export type RedirectionState = 'enabled' | 'pending';

/** The informer caches the controller reads. */
export interface PodCache {
  get(namespace: string, name: string): V1Pod | undefined;
  list(): V1Pod[];
}
export interface NamespaceCache {
  get(name: string): V1Namespace | undefined;
  list(): V1Namespace[];
}

export interface AnnotationWriter {
  /** Merge patch on pods/status; resolves false when the pod is gone. */
  patchPodAnnotations(namespace: string, name: string, annotations: Record<string, string | null>): Promise<boolean>;
}

export interface HostProbes {
  podEnrolled(uid: string, ips: string[]): Promise<void>;
  podRemoved(uid: string, ips: string[]): Promise<void>;
  syncEnrolled(pods: Array<{ uid: string; ips: string[] }>): Promise<void>;
}

export interface NetnsFinder {
  find(pods: Array<{ uid: string; ips: string[] }>): Promise<Map<string, NetnsHandle>>;
}

export interface EnablementPolicy {
  podMatches(pod: V1Pod, namespace: V1Namespace | undefined): boolean;
  shouldBeEnabled(pod: V1Pod, namespace: V1Namespace | undefined): boolean;
  isZtunnelPod(pod: V1Pod): boolean;
  namespaceMatches(labels: Record<string, string>): boolean;
}

export interface MeshControllerDeps {
  addon: NetAddon;
  rules: InpodRuleManager;
  registry: PodRegistry;
  pods: PodCache;
  namespaces: NamespaceCache;
  api: AnnotationWriter;
  host: HostProbes;
  finder: NetnsFinder;
  enablement: EnablementPolicy;
  netnsRoot: string;
  /** The node's namespace when it is not the agent's own: never accepted as a pod's (istio#55139). */
  hostNetns?: NetnsIdentity;
  /** --netns-dirs and --proc-dir, for the netns path checks (src/pods/netns-path.ts). */
  netnsDirs?: readonly string[];
  procDir?: string;
  /** AMBIENT_RECONCILE_POD_RULES_ON_STARTUP (Helm default true). */
  reconcileRulesOnStartup?: boolean;
  log?: Logger;
}

/** How long the CNI path waits for a pod the informer has not seen yet (Istio: 10 tries, 10 ms apart). */
const CACHE_LAG_TRIES = 10;
const CACHE_LAG_DELAY_MS = 10;

/** Failures that retrying cannot fix (Istio's ErrNonRetryableAdd): dropped by the queue. */
export class NonRetryableError extends Error {
  override readonly name = 'NonRetryableError';
}

export function podUid(pod: V1Pod): string {
  return pod.metadata?.uid ?? '';
}

export function podKey(pod: V1Pod): string {
  return `${pod.metadata?.namespace ?? ''}/${pod.metadata?.name ?? ''}`;
}

export function redirectionState(pod: V1Pod): RedirectionState | undefined {
  const value = pod.metadata?.annotations?.[ANNOTATION_REDIRECTION];
  return value === 'enabled' || value === 'pending' ? value : undefined;
}

export function isTerminated(pod: V1Pod): boolean {
  return pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed';
}

/** status.podIPs, else status.podIP (Istio's GetPodIPsIfPresent). */
export function podIps(pod: V1Pod): string[] {
  const ips = (pod.status?.podIPs ?? []).map((p) => p.ip).filter((ip): ip is string => Boolean(ip));
  if (ips.length > 0) return ips;
  return pod.status?.podIP ? [pod.status.podIP] : [];
}

/** Restored pods verified side by side (as standalone mode), on the addon's threads. */
const STARTUP_VERIFY_CONCURRENCY = 8;

export class MeshController {
  readonly queue: RetryQueue;
  /** Per pod UID: a removal and a reconciler repair never interleave. */
  readonly #locks = new KeyedQueue();
  readonly #log: Logger;
  readonly #opener: PodNetnsOpener;

  constructor(private readonly deps: MeshControllerDeps) {
    this.#log = (deps.log ?? silentLogger).child({ component: 'mesh-controller' });
    this.#opener = new PodNetnsOpener(deps.addon, deps.netnsRoot, {
      extraDirs: deps.netnsDirs,
      procDir: deps.procDir,
      ...(deps.hostNetns ? { host: deps.hostNetns } : {}),
    });
    this.queue = new RetryQueue({ log: this.#log });
  }

  // ---- CNI path -------------------------------------------------------------------------------

  /**
   * CNI ADD: the pod is looked up in the informer cache (it lags the kubelet a little); its IPs
   * come from the event (the Pod object has none yet). Istio's plugin asks the API server and
   * only forwards ambient pods; ours makes no API call and forwards every pod, so a pod that does
   * not match the selectors is answered 200 (it starts outside the mesh, as with Istio). A pod
   * the cache does not know yet fails (the runtime retries) only when its namespace is ambient;
   * otherwise it starts, and the informer enrolls it later if its own labels say so.
   */
  async cniAdd(event: PluginAddEvent): Promise<void> {
    const namespace = this.deps.namespaces.get(event.PodNamespace);
    const pod = await this.#waitForPod(event.PodNamespace, event.PodName);
    if (!pod) {
      if (this.deps.enablement.namespaceMatches(namespace?.metadata?.labels ?? {})) {
        throw new Error(`pod ${event.PodNamespace}/${event.PodName} not found in the informer cache`);
      }
      return this.#log.info(
        { pod: `${event.PodNamespace}/${event.PodName}` },
        'pod not in the cache yet and its namespace is not ambient; letting it start',
      );
    }
    if (!this.deps.enablement.shouldBeEnabled(pod, namespace)) {
      return this.#log.debug({ pod: podKey(pod) }, 'not an ambient pod; nothing to do');
    }
    await this.addPodToMesh(
      pod,
      event.IPs.map((ip) => ip.Address.IP),
      event.Netns,
    );
  }

  /** CNI CHECK: the enrolled pod's rules are as expected. */
  async cniCheck(event: PluginAddEvent): Promise<string | undefined> {
    const pod = this.deps.pods.get(event.PodNamespace, event.PodName);
    const netns = pod ? this.deps.registry.netnsOf(podUid(pod)) : undefined;
    if (!pod || !netns) return undefined; // not an ambient pod: nothing to check
    const drift = await this.deps.rules.verify(netns, this.#overrides(pod));
    return drift.inSync ? undefined : `in-pod rules drifted: ${describeDrift(drift).join('; ')}`;
  }

  async #waitForPod(namespace: string, name: string): Promise<V1Pod | undefined> {
    const tries = CACHE_LAG_TRIES;
    for (let i = 0; i < tries; i++) {
      const pod = this.deps.pods.get(namespace, name);
      if (pod) return pod;
      await new Promise((r) => setTimeout(r, CACHE_LAG_DELAY_MS));
    }
    return undefined;
  }

  // ---- enrol / remove (Istio's AddPodToMesh / RemovePodFromMesh) -------------------------------

  /**
   * Rules and ztunnel (concurrently, see onboard.ts), then the host probe set and the `enabled`
   * annotation. A ztunnel failure leaves the rules in place and marks the pod `pending` (retried);
   * a rule failure is final.
   */
  async addPodToMesh(pod: V1Pod, ips: string[], netnsPath: string): Promise<void> {
    const uid = podUid(pod);
    const log = this.#log.child({ pod: podKey(pod), uid });
    const netns = await this.#netnsFor(pod, ips, netnsPath);
    const identity = {
      uid,
      name: pod.metadata?.name ?? '',
      namespace: pod.metadata?.namespace ?? '',
      serviceAccount: pod.spec?.serviceAccountName || 'default',
    };
    let timings: OnboardResult;
    try {
      timings = await onboardPod(this.deps, identity, netns, this.#overrides(pod));
    } catch (err) {
      if (err instanceof RuleApplyError) throw new NonRetryableError(`${podKey(pod)}: ${err.message}`, { cause: err });
      if (!isRetryable(err)) throw err;
      log.warn({ err: (err as Error).message }, 'ztunnel did not accept the pod; marking it pending');
      await this.#annotate(pod, 'pending');
      throw err;
    }
    await this.deps.host.podEnrolled(uid, ips);
    await this.#annotate(pod, 'enabled');
    log.info({ ips, rulesMs: timings.rulesMs, zdsMs: timings.zdsMs }, 'pod enrolled');
  }

  /** Runs `work` under the pod's lock (the reconciler's repairs). */
  exclusive<T>(uid: string, work: () => Promise<T>): Promise<T> {
    return this.#locks.run(uid, work);
  }

  /** Probe set (UID-checked), in-pod rules unless the pod is being deleted, ztunnel, annotation. */
  removePodFromMesh(pod: V1Pod, isDelete: boolean): Promise<void> {
    return this.#locks.run(podUid(pod), () => this.#removePodFromMesh(pod, isDelete));
  }

  async #removePodFromMesh(pod: V1Pod, isDelete: boolean): Promise<void> {
    const uid = podUid(pod);
    await this.deps.host.podRemoved(uid, podIps(pod));
    const netns = this.deps.registry.netnsOf(uid);
    if (!isDelete && netns && !netns.closed) await this.deps.rules.remove(netns);
    await this.deps.registry.delete(uid);
    try {
      await this.deps.api.patchPodAnnotations(pod.metadata?.namespace ?? '', pod.metadata?.name ?? '', { [ANNOTATION_REDIRECTION]: null });
    } catch (err) {
      if (!isDelete) throw err;
    }
    this.#log.info({ pod: podKey(pod), uid, isDelete }, 'pod removed from the mesh');
  }

  async #netnsFor(pod: V1Pod, ips: string[], netnsPath: string): Promise<NetnsHandle> {
    const uid = podUid(pod);
    if (netnsPath) {
      try {
        return this.#opener.open(netnsPath);
      } catch (err) {
        throw new NonRetryableError(`opening netns: ${(err as Error).message}`, { cause: err });
      }
    }
    const cached = this.deps.registry.netnsOf(uid);
    if (cached && !cached.closed) return cached;
    const found = (await this.deps.finder.find([{ uid, ips }])).get(uid);
    if (found) return found;
    throw new NonRetryableError(`can't find netns for pod ${podKey(pod)} (netns not provided, but is needed as pod is not in cache)`);
  }

  async #annotate(pod: V1Pod, state: RedirectionState): Promise<void> {
    if (redirectionState(pod) === state) return; // no-op patches are free, but skip the round trip
    await this.deps.api.patchPodAnnotations(pod.metadata?.namespace ?? '', pod.metadata?.name ?? '', { [ANNOTATION_REDIRECTION]: state });
  }

  #overrides(pod: V1Pod): PodOverrides {
    const { overrides, warnings } = podOverridesFromAnnotations(pod.metadata?.annotations ?? {});
    for (const w of warnings) this.#log.warn({ pod: podKey(pod) }, w);
    return overrides;
  }

  // ---- informer events (Istio's informers.go) -------------------------------------------------

  /** A namespace appeared (every namespace at start-up): re-evaluate all its pods on this node. */
  namespaceAdded(ns: V1Namespace): void {
    this.#fanOut(ns.metadata?.name ?? '');
  }

  namespaceUpdated(oldNs: V1Namespace, newNs: V1Namespace): void {
    const before = this.deps.enablement.namespaceMatches(oldNs.metadata?.labels ?? {});
    const after = this.deps.enablement.namespaceMatches(newNs.metadata?.labels ?? {});
    if (before !== after) this.#fanOut(newNs.metadata?.name ?? '');
  }

  #fanOut(namespace: string): void {
    for (const pod of this.deps.pods.list()) {
      if (pod.metadata?.namespace === namespace && !this.deps.enablement.isZtunnelPod(pod)) this.podUpdated(pod, pod);
    }
  }

  /** Pod updates (and synthetic ones from namespace events) go through the retrying queue. */
  podUpdated(oldPod: V1Pod, newPod: V1Pod): void {
    const key = podKey(newPod);
    this.queue.enqueue(key, () => this.#reconcilePod(oldPod, newPod));
  }

  podDeleted(pod: V1Pod): void {
    const state = redirectionState(pod);
    const ns = this.deps.namespaces.get(pod.metadata?.namespace ?? '');
    if (state === undefined && !this.deps.enablement.podMatches(pod, ns)) return;
    this.queue.enqueue(podKey(pod), () => this.removePodFromMesh(pod, true));
  }

  async #reconcilePod(oldPod: V1Pod, eventPod: V1Pod): Promise<void> {
    const pod = this.deps.pods.get(eventPod.metadata?.namespace ?? '', eventPod.metadata?.name ?? '');
    if (!pod || podUid(pod) !== podUid(eventPod)) return; // gone (or replaced) since the event
    const ns = this.deps.namespaces.get(pod.metadata?.namespace ?? '');
    const state = redirectionState(pod);
    const shouldBeEnabled = this.deps.enablement.shouldBeEnabled(pod, ns);
    if (isTerminated(pod)) {
      // The old object: a terminal status may come without an IP (kubernetes#125370).
      if (state !== undefined) await this.removePodFromMesh(oldPod, true);
      return;
    }
    if (state === 'enabled' && shouldBeEnabled && podIps(oldPod).join() !== podIps(pod).join()) {
      await this.deps.host.podEnrolled(podUid(pod), podIps(pod)); // IPs changed (kubelet restart)
    }
    const changeNeeded = (state === 'enabled') !== shouldBeEnabled || state === 'pending';
    if (!changeNeeded) return;
    if (!shouldBeEnabled) return this.removePodFromMesh(pod, false);
    const ips = podIps(pod);
    if (ips.length === 0) return; // not scheduled on the network yet: the CNI path will come
    try {
      await this.addPodToMesh(pod, ips, '');
    } catch (err) {
      if (err instanceof NonRetryableError) return this.#log.warn({ pod: podKey(pod), err: err.message }, 'not enrolling pod');
      throw err; // retried with backoff
    }
  }

  // ---- start-up reconciliation (Istio's ConstructInitialSnapshot) -----------------------------

  /** Pods this node has enrolled (annotation `enabled`), not terminated, not ztunnel. */
  enrolledPods(): V1Pod[] {
    return this.deps.pods
      .list()
      .filter((p) => redirectionState(p) === 'enabled' && !isTerminated(p) && !this.deps.enablement.isZtunnelPod(p));
  }

  /**
   * Re-adds enrolled pod IPs to the probe sets, finds each enrolled pod's netns in /proc, repairs
   * drifted rules, and registers everything for the first ZDS snapshot (`keep` without a netns).
   */
  async reconcileStartup(): Promise<{ pods: number; withNetns: number; repaired: number }> {
    const pods = this.enrolledPods();
    const wanted = pods.map((p) => ({ uid: podUid(p), ips: podIps(p) }));
    await this.deps.host.syncEnrolled(wanted);
    const found = await this.deps.finder.find(wanted);
    const verify = this.deps.reconcileRulesOnStartup !== false;
    const results = await mapLimit(pods, STARTUP_VERIFY_CONCURRENCY, async (pod) => {
      const netns = found.get(podUid(pod));
      return netns && verify ? this.#repair(pod, netns) : false;
    });
    const repaired = results.filter(Boolean).length;
    for (const pod of pods) {
      const netns = found.get(podUid(pod));
      this.deps.registry.adopt(
        {
          uid: podUid(pod),
          name: pod.metadata?.name ?? '',
          namespace: pod.metadata?.namespace ?? '',
          serviceAccount: pod.spec?.serviceAccountName || 'default',
        },
        netns,
      );
    }
    const summary = { pods: pods.length, withNetns: found.size, repaired };
    this.#log.info(summary, 'initial snapshot built');
    return summary;
  }

  async #repair(pod: V1Pod, netns: NetnsHandle): Promise<boolean> {
    const overrides = this.#overrides(pod);
    const outcome = await verifyAndRepair({
      verify: () => this.deps.rules.verify(netns, overrides),
      repair: async () => {
        await this.deps.rules.apply(netns, overrides);
      },
    });
    if (outcome.status === 'in-sync') return false;
    this.#log.warn({ pod: podKey(pod), drift: outcome.drift, reason: outcome.reason }, 'in-pod rules drifted; repairing');
    if (outcome.status === 'repaired') return true;
    if (!hasErrorCode(outcome.error, 'ENOENT'))
      this.#log.error({ pod: podKey(pod), err: outcome.error.message }, 'could not repair in-pod rules; try restarting the pod');
    return false;
  }

  // ---- live reconciliation (src/reconcile/) ----------------------------------------------------

  podByUid(uid: string): V1Pod | undefined {
    return this.deps.pods.list().find((p) => podUid(p) === uid);
  }

  overridesFor(uid: string): PodOverrides {
    const pod = this.podByUid(uid);
    return pod ? this.#overrides(pod) : podOverridesFromAnnotations({}).overrides;
  }

  /**
   * A repair failed: the annotation must not claim `enabled` while the rules are not in place.
   * `pending` is Istio's value for "not fully enrolled"; the reconciler keeps retrying.
   */
  async markRepairFailed(uid: string): Promise<void> {
    const pod = this.podByUid(uid);
    if (pod && redirectionState(pod) === 'enabled') await this.#annotate(pod, 'pending');
  }

  /** The rules are back: the pod goes through the normal path (ztunnel add, then `enabled`). */
  markRepaired(uid: string): void {
    const pod = this.podByUid(uid);
    if (pod && redirectionState(pod) === 'pending') this.podUpdated(pod, pod);
  }

  /**
   * The sandbox check (istio#61182): the registered netns must still hold one of the pod's IPs.
   * When it does not, the netns holding them now (the runtime re-created the sandbox) is found
   * in /proc and the pod is re-enrolled with it; the old handle is released by the registry.
   */
  async checkSandbox(uid: string): Promise<'same' | 'replaced' | 'unknown'> {
    const pod = this.podByUid(uid);
    const netns = this.deps.registry.netnsOf(uid);
    if (!pod || !netns || netns.closed || redirectionState(pod) === undefined) return 'unknown';
    const ips = podIps(pod);
    if (ips.length === 0) return 'unknown';
    const [listed] = await this.deps.addon.run(netns, [{ op: 'listAddresses' }] as const).catch(() => [{ addresses: [] }] as const);
    if (listed.addresses.some((a) => ips.includes(a.address))) return 'same';
    const found = (await this.deps.finder.find([{ uid, ips }])).get(uid);
    if (!found) return 'unknown';
    if (sameNetns(found, netns)) {
      found.close();
      return 'same';
    }
    this.#log.warn(
      { pod: podKey(pod), uid, oldNetnsIno: netns.ino, newNetnsIno: found.ino },
      'sandbox netns replaced; re-enrolling the pod with the new one',
    );
    await this.exclusive(uid, async () => {
      await onboardPod(this.deps, this.#identityOf(pod), found, this.#overrides(pod));
      await this.deps.host.podEnrolled(uid, ips);
      await this.#annotate(pod, 'enabled');
    });
    return 'replaced';
  }

  #identityOf(pod: V1Pod): { uid: string; name: string; namespace: string; serviceAccount: string } {
    return {
      uid: podUid(pod),
      name: pod.metadata?.name ?? '',
      namespace: pod.metadata?.namespace ?? '',
      serviceAccount: pod.spec?.serviceAccountName || 'default',
    };
  }
}
