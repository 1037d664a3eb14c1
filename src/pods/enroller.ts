// Puts pods into the mesh and takes them out: open the pod's netns, install the in-pod
// redirection, remember the pod, hand it to ztunnel. Used by the CNI path (and, after a restart,
// to pick the enrolled pods up again). One operation per pod at a time.
import type { NetAddon, NetnsHandle } from '../addon/net-addon.js';
import { silentLogger, type Logger } from '../ops/log.js';
import { describeDrift, type DriftReport } from '../rules/drift.js';
import type { InpodRuleManager } from '../rules/manager.js';
import { NO_OVERRIDES } from '../rules/settings.js';
import { KeyedQueue } from '../util/keyed-queue.js';
import type { PodIdentity, PodRegistry } from '../zds/registry.js';
import { PodNetnsOpener } from './netns-path.js';
import { onboardPod, RuleApplyError } from './onboard.js';
import type { EnrolledPod, PodStateStore } from './state-store.js';

/** What the CNI path knows about a pod. */
export interface CniPod {
  uid: string;
  name: string;
  namespace: string;
  /** As the runtime passed it (CNI_NETNS); opened under the agent's --netns-root. */
  netnsPath: string;
  containerId: string;
  ips: string[];
}

export interface EnrollerDeps {
  addon: NetAddon;
  rules: InpodRuleManager;
  registry: PodRegistry;
  store: PodStateStore;
  netnsRoot: string;
  excludeNamespaces: readonly string[];
  /** Standalone mode has no service accounts to read; Kubernetes mode passes the real one. */
  serviceAccountOf?: (pod: CniPod) => string;
  log?: Logger;
}

export interface RestoreSummary {
  restored: number;
  repaired: number;
  dropped: number;
}

export class PodEnroller {
  readonly #queue = new KeyedQueue();
  readonly #log: Logger;
  readonly #opener: PodNetnsOpener;

  constructor(private readonly deps: EnrollerDeps) {
    this.#log = (deps.log ?? silentLogger).child({ component: 'enroller' });
    this.#opener = new PodNetnsOpener(deps.addon, deps.netnsRoot);
  }

  isExcluded(namespace: string): boolean {
    return this.deps.excludeNamespaces.includes(namespace);
  }

  /**
   * Enrolls the pod; resolves once ztunnel acked. Idempotent: a second ADD re-applies the same
   * rules (one copy) and re-sends the same netns (ztunnel treats it as a no-op).
   */
  add(pod: CniPod): Promise<void> {
    return this.#queue.run(pod.uid, async () => {
      const log = this.#log.child({ pod: `${pod.namespace}/${pod.name}`, uid: pod.uid });
      if (this.isExcluded(pod.namespace)) return log.info('namespace excluded; not enrolling');
      const netns = this.#open(pod.netnsPath);
      const wasStored = this.deps.store.get(pod.uid) !== undefined;
      try {
        // Persisted first: a crash after ztunnel got the pod must still find it on restart.
        this.deps.store.put(this.#record(pod, netns));
      } catch (err) {
        netns.close();
        throw new Error(`cannot record the pod in ${this.deps.store.dir}: ${(err as Error).message}`, { cause: err });
      }
      try {
        const timings = await onboardPod(this.deps, this.#identity(pod), netns, NO_OVERRIDES);
        log.info({ ...timings, netnsIno: netns.ino }, 'pod enrolled');
      } catch (err) {
        if (err instanceof RuleApplyError && !wasStored) this.deps.store.remove(pod.uid);
        throw err;
      }
    });
  }

  /**
   * Takes the pod out: in-pod rules (when its netns still exists), ztunnel, the state file.
   * Never fails because the pod is already gone.
   */
  remove(uid: string): Promise<void> {
    return this.#queue.run(uid, async () => {
      const netns = this.deps.registry.netnsOf(uid);
      if (netns && !netns.closed) {
        await this.deps.rules.remove(netns).catch((err: unknown) =>
          this.#log.warn({ uid, err: (err as Error).message }, 'could not remove in-pod rules; the sandbox is going away'),
        );
      }
      await this.deps.registry.delete(uid);
      this.deps.store.remove(uid);
      this.#log.info({ uid }, 'pod removed');
    });
  }

  /** Verifies an enrolled pod's rules (CNI CHECK). */
  check(uid: string): Promise<DriftReport | undefined> {
    return this.#queue.run(uid, async () => {
      const netns = this.deps.registry.netnsOf(uid);
      return netns ? this.deps.rules.verify(netns, NO_OVERRIDES) : undefined;
    });
  }

  /** Finds the UID of a pod by namespace and name (Istio's plugin does not send UIDs). */
  uidOf(namespace: string, name: string): string | undefined {
    return this.deps.store.list().find((p) => p.namespace === namespace && p.name === name)?.uid;
  }

  /**
   * After a restart: reopen each remembered pod's netns, make sure it is still the same
   * namespace, repair drifted rules, and register it for the next ZDS snapshot. Pods whose
   * sandbox is gone are dropped (ztunnel drops them too: the snapshot will not mention them).
   */
  async restore(): Promise<RestoreSummary> {
    const summary: RestoreSummary = { restored: 0, repaired: 0, dropped: 0 };
    const { pods, problems } = this.deps.store.load();
    for (const problem of problems) {
      this.#log.error({ file: problem.file, reason: problem.reason }, 'unusable pod state file set aside; that pod is not restored');
    }
    for (const pod of pods) {
      const outcome = await this.#restoreOne(pod);
      summary[outcome]++;
    }
    this.#log.info(summary, 'enrolled pods restored from the state file');
    return summary;
  }

  async #restoreOne(pod: EnrolledPod): Promise<keyof RestoreSummary> {
    const log = this.#log.child({ pod: `${pod.namespace}/${pod.name}`, uid: pod.uid });
    let netns: NetnsHandle;
    try {
      netns = this.#open(pod.netnsPath);
    } catch (err) {
      log.info({ err: (err as Error).message }, 'netns gone; dropping pod');
      this.deps.store.remove(pod.uid);
      return 'dropped';
    }
    if (netns.ino !== pod.netnsIno || netns.dev !== pod.netnsDev) {
      netns.close();
      log.info({ netnsPath: pod.netnsPath }, 'netns path now holds another namespace; dropping pod');
      this.deps.store.remove(pod.uid);
      return 'dropped';
    }
    const drift = await this.deps.rules.verify(netns, NO_OVERRIDES).catch((err: unknown) => ({ error: err as Error }));
    let outcome: keyof RestoreSummary = 'restored';
    if ('error' in drift || !drift.inSync) {
      log.warn({ drift: 'error' in drift ? drift.error.message : describeDrift(drift) }, 'in-pod rules drifted; re-applying');
      // A pod whose repair fails stays enrolled (ztunnel keeps serving it); CHECK will report it.
      await this.deps.rules.apply(netns, NO_OVERRIDES).then(
        () => (outcome = 'repaired'),
        (err: unknown) => log.error({ err: (err as Error).message }, 'could not repair in-pod rules'),
      );
    }
    this.deps.registry.adopt({ uid: pod.uid, name: pod.name, namespace: pod.namespace, serviceAccount: pod.serviceAccount }, netns);
    return outcome;
  }

  #open(netnsPath: string): NetnsHandle {
    return this.#opener.open(netnsPath);
  }

  #identity(pod: CniPod): PodIdentity {
    return { uid: pod.uid, name: pod.name, namespace: pod.namespace, serviceAccount: this.#serviceAccount(pod) };
  }

  #serviceAccount(pod: CniPod): string {
    return this.deps.serviceAccountOf?.(pod) ?? 'default';
  }

  #record(pod: CniPod, netns: NetnsHandle): EnrolledPod {
    return {
      uid: pod.uid,
      name: pod.name,
      namespace: pod.namespace,
      serviceAccount: this.#serviceAccount(pod),
      netnsPath: pod.netnsPath,
      netnsIno: netns.ino,
      netnsDev: netns.dev,
      ips: pod.ips,
      containerId: pod.containerId,
    };
  }
}
