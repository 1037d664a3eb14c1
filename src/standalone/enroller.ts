// Puts pods into the mesh and takes them out: open the pod's netns, install the in-pod
// redirection, remember the pod, hand it to ztunnel. Used by the CNI path (and, after a restart,
// to pick the enrolled pods up again). One operation per pod at a time.
import type { NetAddon, NetnsHandle } from '../addon/net-addon.js';
import { silentLogger, type Logger } from '../ops/log.js';
import type { DriftReport } from '../rules/drift.js';
import { verifyAndRepair } from '../reconcile/repair.js';
import type { InpodRuleManager, RulesStamp } from '../rules/manager.js';
import { NO_OVERRIDES } from '../rules/settings.js';
import { KeyedQueue } from '../util/keyed-queue.js';
import { mapLimit } from '../util/map-limit.js';
import type { PodIdentity, PodRegistry } from '../zds/registry.js';
import { PodNetnsOpener } from '../pods/netns-path.js';
import { onboardingPending, onboardPod } from '../pods/onboard.js';
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
  /** --netns-dirs and --proc-dir, for the netns path checks (src/pods/netns-path.ts). */
  netnsDirs?: readonly string[];
  procDir?: string;
  excludeNamespaces: readonly string[];
  log?: Logger;
}

const RESTORE_CONCURRENCY = 8;
/** Standalone mode has no service accounts to read; every pod gets `default`. */
const STANDALONE_SERVICE_ACCOUNT = 'default';

export interface RestoreSummary {
  restored: number;
  repaired: number;
  dropped: number;
}

/** The pod's state file could not be written (ENOSPC, EROFS...): the ADD fails. */
class StateWriteError extends Error {
  constructor(
    message: string,
    readonly wasStored: boolean,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

export class PodEnroller {
  readonly #queue = new KeyedQueue();
  readonly #log: Logger;
  readonly #opener: PodNetnsOpener;
  /** Pods reopen() registered whose rules verifyReopened() has not checked yet. */
  readonly #reopened: string[] = [];
  /** ADDs waiting behind an earlier ADD or DEL of the same pod (what a late answer names). */
  readonly #queuedAdds = new Map<string, number>();

  constructor(private readonly deps: EnrollerDeps) {
    this.#log = (deps.log ?? silentLogger).child({ component: 'enroller' });
    this.#opener = new PodNetnsOpener(deps.addon, deps.netnsRoot, { extraDirs: deps.netnsDirs, procDir: deps.procDir });
  }

  isExcluded(namespace: string): boolean {
    return this.deps.excludeNamespaces.includes(namespace);
  }

  /**
   * Enrolls the pod; resolves once ztunnel acked. Idempotent: a second ADD re-applies the same
   * rules (one copy) and re-sends the same netns (ztunnel treats it as a no-op).
   */
  add(pod: CniPod): Promise<void> {
    this.#queuedAdds.set(pod.uid, (this.#queuedAdds.get(pod.uid) ?? 0) + 1);
    return this.#queue
      .run(pod.uid, async () => {
        this.#dequeued(pod.uid);
        const where = { pod: `${pod.namespace}/${pod.name}`, uid: pod.uid };
        if (this.isExcluded(pod.namespace)) return this.#log.info(where, 'namespace excluded; not enrolling');
        const netns = this.#open(pod.netnsPath);
        const wasStored = this.deps.store.get(pod.uid) !== undefined;
        let applied: { stamp: RulesStamp | undefined } | undefined;
        let persisted = false;
        const persist = (stamp: RulesStamp | undefined): void => {
          if (persisted) return;
          this.#persist(pod, netns, stamp, wasStored);
          persisted = true;
        };
        // Recorded as soon as its rules are in, while ztunnel's ack is still on its way: the write
        // is off the ADD's critical path, and a pod whose ack is slow (a ztunnel restart, a hung
        // ztunnel) is on disk while it waits, for the next snapshot and for a restart meanwhile.
        // A failed write here is left to the final one, which fails the ADD.
        const onRulesApplied = (stamp: RulesStamp | undefined): void => {
          applied = { stamp };
          try {
            persist(stamp);
          } catch (err) {
            this.#log.warn({ ...where, err: (err as Error).message }, 'could not record the pod; trying again before answering');
          }
        };
        let result: Awaited<ReturnType<typeof onboardPod>>;
        try {
          // RuleApplyError: nothing of this ADD stays (onboardPod took a new pod back out of ztunnel).
          result = await onboardPod({ ...this.deps, onRulesApplied }, this.#identity(pod), netns, NO_OVERRIDES);
        } catch (err) {
          // ztunnel failed (or its wait ran out) after the rules went in: the pod stays registered
          // for ztunnel's next snapshot, so it is recorded (a restart must know it too); the ADD fails.
          if (applied) persist(applied.stamp);
          throw err;
        }
        const { rulesMs, zdsMs, stamp } = result;
        // One write per ADD (done above unless it failed), with the rules' stamp, before the ADD
        // is answered: an answered ADD is always on disk. A crash before this point fails the ADD,
        // and the runtime retries it.
        persist(stamp);
        // Logged once the ADD is answered (the answer goes out in this turn's microtasks): a write
        // to stdout wakes whoever reads it, and the pod need not wait for that.
        setImmediate(() => this.#log.info({ ...where, rulesMs, zdsMs, netnsIno: netns.ino }, 'pod enrolled'));
      })
      .catch(async (err: unknown) => {
        if (err instanceof StateWriteError) await this.#undoAdd(pod.uid, err);
        throw err;
      });
  }

  /** What an ADD of this pod that is still running waits for (named in an ADD answered late). */
  pendingAdd(uid: string): string | undefined {
    if (this.#queuedAdds.has(uid)) return 'an earlier ADD or DEL of this pod is still running';
    return onboardingPending(this.deps.registry, uid);
  }

  #dequeued(uid: string): void {
    const left = (this.#queuedAdds.get(uid) ?? 1) - 1;
    if (left > 0) this.#queuedAdds.set(uid, left);
    else this.#queuedAdds.delete(uid);
  }

  /** Records the enrolled pod; a failed write is a StateWriteError (the ADD then fails). */
  #persist(pod: CniPod, netns: NetnsHandle, stamp: RulesStamp | undefined, wasStored: boolean): void {
    const record = this.#record(pod, netns);
    try {
      this.deps.store.put(stamp ? { ...record, nftGeneration: stamp.nftGeneration } : record);
    } catch (err) {
      throw new StateWriteError(`cannot record the pod in ${this.deps.store.dir}: ${(err as Error).message}`, wasStored, { cause: err });
    }
  }

  /**
   * A pod enrolled but not recorded must not stay enrolled (a restart would forget it): take it
   * back out of ztunnel and its netns, unless an earlier ADD recorded it.
   */
  async #undoAdd(uid: string, err: StateWriteError): Promise<void> {
    if (err.wasStored) return;
    await this.#queue.run(uid, async () => {
      const netns = this.deps.registry.netnsOf(uid);
      if (netns && !netns.closed) await this.deps.rules.remove(netns).catch(() => undefined);
      await this.deps.registry.delete(uid).catch(() => undefined);
    });
  }

  /**
   * Takes the pod out: in-pod rules (when its netns still exists), ztunnel, the state file.
   * Never fails because the pod is already gone; a pod that is not enrolled is a quiet no-op.
   */
  remove(uid: string): Promise<void> {
    return this.#queue.run(uid, async () => {
      if (!this.deps.registry.has(uid) && this.deps.store.get(uid) === undefined) {
        // Runtimes repeat DEL (containerd: StopPodSandbox, then RemovePodSandbox): nothing to do.
        return this.#log.debug({ uid }, 'DEL for a pod that is not enrolled; nothing to do');
      }
      const netns = this.deps.registry.netnsOf(uid);
      if (netns && !netns.closed) {
        await this.deps.rules
          .remove(netns)
          .catch((err: unknown) =>
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

  /**
   * CNI GC: removes every enrolment whose container ID is not among the runtime's valid ones
   * (a lost DEL would otherwise keep its netns open through our fd forever). Pods enrolled
   * without a container ID (Istio's plugin sends none) cannot be matched and are kept.
   */
  async collectGarbage(validContainerIds: ReadonlySet<string>): Promise<void> {
    // A pod whose ADD is still running may be missing from a list the runtime made just before.
    const stale = this.deps.store.list().filter((p) => p.containerId && !validContainerIds.has(p.containerId) && !this.#queue.busy(p.uid));
    for (const pod of stale) {
      this.#log.info(
        { pod: `${pod.namespace}/${pod.name}`, uid: pod.uid, containerId: pod.containerId },
        'CNI GC: the runtime no longer has this attachment; removing the pod',
      );
      await this.remove(pod.uid);
    }
  }

  /** Runs `task` in the pod's queue: never alongside its ADD, DEL or restore (the reconciler's repairs). */
  exclusive<T>(uid: string, task: () => Promise<T>): Promise<T> {
    return this.#queue.run(uid, task);
  }

  /** Finds the UID of a pod by namespace and name (Istio's plugin does not send UIDs). */
  uidOf(namespace: string, name: string): string | undefined {
    return this.deps.store.uidByName(namespace, name);
  }

  /**
   * After a restart, in two phases. reopen() (before ZDS serves anyone): reopen each remembered
   * pod's netns, make sure it is still the same namespace, and register it for the first
   * snapshot; pods whose sandbox is gone are dropped (ztunnel drops them too: the snapshot will
   * not mention them). verifyReopened() (while ztunnel takes the snapshot): verify each pod's
   * rules and repair drift. The rules need not be verified before ztunnel learns the pod: they
   * were installed before the crash, and ztunnel only binds its listeners.
   */
  reopen(): RestoreSummary {
    const summary: RestoreSummary = { restored: 0, repaired: 0, dropped: 0 };
    const { pods, problems } = this.deps.store.load();
    for (const problem of problems) {
      this.#log.error({ file: problem.file, reason: problem.reason }, 'unusable pod state file set aside; that pod is not restored');
    }
    for (const pod of pods) {
      const netns = this.#reopenOne(pod);
      if (!netns) {
        summary.dropped++;
        continue;
      }
      summary.restored++;
      this.#reopened.push(pod.uid);
      this.deps.registry.adopt({ uid: pod.uid, name: pod.name, namespace: pod.namespace, serviceAccount: pod.serviceAccount }, netns);
    }
    return summary;
  }

  /** The second phase: one netns visit per pod, side by side on the addon's threads. */
  async verifyReopened(): Promise<RestoreSummary> {
    const uids = this.#reopened.splice(0);
    const repaired = await mapLimit(uids, RESTORE_CONCURRENCY, (uid) => this.#queue.run(uid, () => this.#verifyOne(uid)));
    const summary = { restored: uids.length, repaired: repaired.filter(Boolean).length, dropped: 0 };
    this.#log.info(summary, 'rules of the restored pods verified');
    return summary;
  }

  #reopenOne(pod: EnrolledPod): NetnsHandle | undefined {
    const log = this.#log.child({ pod: `${pod.namespace}/${pod.name}`, uid: pod.uid });
    let netns: NetnsHandle;
    try {
      netns = this.#open(pod.netnsPath);
    } catch (err) {
      log.info({ err: (err as Error).message }, 'netns gone; dropping pod');
      this.deps.store.remove(pod.uid);
      return undefined;
    }
    if (netns.ino !== pod.netnsIno || netns.dev !== pod.netnsDev) {
      netns.close();
      log.info({ netnsPath: pod.netnsPath }, 'netns path now holds another namespace; dropping pod');
      this.deps.store.remove(pod.uid);
      return undefined;
    }
    return netns;
  }

  /** Returns whether the rules had to be repaired. A pod removed meanwhile is skipped. */
  async #verifyOne(uid: string): Promise<boolean> {
    const netns = this.deps.registry.netnsOf(uid);
    if (!netns || netns.closed) return false;
    const log = this.#log.child({ uid });
    const stored = this.deps.store.get(uid)?.nftGeneration;
    const stamp = stored === undefined ? undefined : { nftGeneration: stored };
    let repairedStamp: RulesStamp | undefined;
    const outcome = await verifyAndRepair({
      verify: () => this.deps.rules.verify(netns, NO_OVERRIDES, stamp),
      repair: async () => {
        repairedStamp = await this.deps.rules.apply(netns, NO_OVERRIDES);
      },
    });
    if (outcome.status === 'in-sync') return false;
    log.warn({ drift: outcome.drift, reason: outcome.reason }, 'in-pod rules drifted; re-applying');
    // A pod whose repair fails stays enrolled (ztunnel keeps serving it); CHECK and the
    // reconciler report it, and the reconciler retries.
    if (outcome.status === 'failed') {
      log.error({ err: outcome.error.message }, 'could not repair in-pod rules');
      return false;
    }
    this.#remember(uid, repairedStamp);
    return true;
  }

  /**
   * Keeps the rules' stamp with the pod (best effort: without it a restart lists the rules, and
   * a failed write must not fail an ADD whose pod is already recorded).
   */
  #remember(uid: string, stamp: RulesStamp | undefined): void {
    const pod = this.deps.store.get(uid);
    if (!pod || pod.nftGeneration === stamp?.nftGeneration) return;
    const { nftGeneration: _old, ...rest } = pod;
    try {
      this.deps.store.put(stamp ? { ...rest, nftGeneration: stamp.nftGeneration } : rest);
    } catch (err) {
      this.#log.warn({ uid, err: (err as Error).message }, 'could not record the rules stamp; a restart will list the rules instead');
    }
  }

  #open(netnsPath: string): NetnsHandle {
    return this.#opener.open(netnsPath);
  }

  #identity(pod: CniPod): PodIdentity {
    return { uid: pod.uid, name: pod.name, namespace: pod.namespace, serviceAccount: STANDALONE_SERVICE_ACCOUNT };
  }

  #record(pod: CniPod, netns: NetnsHandle): EnrolledPod {
    return {
      uid: pod.uid,
      name: pod.name,
      namespace: pod.namespace,
      serviceAccount: STANDALONE_SERVICE_ACCOUNT,
      netnsPath: pod.netnsPath,
      netnsIno: netns.ino,
      netnsDev: netns.dev,
      ips: pod.ips,
      containerId: pod.containerId,
    };
  }
}
