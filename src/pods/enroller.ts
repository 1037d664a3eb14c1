// Puts pods into the mesh and takes them out: open the pod's netns, install the in-pod
// redirection, remember the pod, hand it to ztunnel. Used by the CNI path (and, after a restart,
// to pick the enrolled pods up again). One operation per pod at a time.
import type { NetAddon, NetnsHandle } from '../addon/net-addon.js';
import { silentLogger, type Logger } from '../ops/log.js';
import { describeDrift, type DriftReport } from '../rules/drift.js';
import type { InpodRuleManager, RulesStamp } from '../rules/manager.js';
import { NO_OVERRIDES } from '../rules/settings.js';
import { KeyedQueue } from '../util/keyed-queue.js';
import { answerWithin } from '../util/answer-within.js';
import { mapLimit } from '../util/map-limit.js';
import type { PodIdentity, PodRegistry } from '../zds/registry.js';
import { PodNetnsOpener } from './netns-path.js';
import { onboardPod } from './onboard.js';
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
  /** How long an ADD may take before it is answered with what is still pending (ADD_ANSWER_MS). */
  addAnswerMs?: number;
}

/**
 * An ADD is answered within this, naming what is still pending. The plugin gives up on the agent
 * after 5 s (Istio's HTTP timeout) and then reports an unreachable agent ("try again later"),
 * which hides the real cause; ztunnel's ack timeout is 5 s too, and the adds of a burst wait for
 * each other on the one ZDS connection. The work itself carries on: a retried ADD of the pod
 * queues behind it, and a pod ztunnel has not acked stays registered for its next snapshot.
 */
export const ADD_ANSWER_MS = 4_000;

interface AddProgress {
  stage: 'queued' | 'enrolling';
  rulesApplied: boolean;
  /** Records the pod now (once the rules are in); false when it could not. */
  persist?: () => boolean;
}

const RESTORE_CONCURRENCY = 8;

export interface RestoreSummary {
  restored: number;
  repaired: number;
  dropped: number;
}

/** The pod's state file could not be written (ENOSPC, EROFS...): the ADD fails. */
class StateWriteError extends Error {
  constructor(message: string, readonly wasStored: boolean, options?: ErrorOptions) {
    super(message, options);
  }
}

export class PodEnroller {
  readonly #queue = new KeyedQueue();
  readonly #log: Logger;
  readonly #opener: PodNetnsOpener;
  /** Pods reopen() registered whose rules verifyReopened() has not checked yet. */
  readonly #reopened: string[] = [];

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
    const progress: AddProgress = { stage: 'queued', rulesApplied: false };
    const work = this.#queue.run(pod.uid, async () => {
      progress.stage = 'enrolling';
      const where = { pod: `${pod.namespace}/${pod.name}`, uid: pod.uid };
      if (this.isExcluded(pod.namespace)) return this.#log.info(where, 'namespace excluded; not enrolling');
      const netns = this.#open(pod.netnsPath);
      const wasStored = this.deps.store.get(pod.uid) !== undefined;
      let persisted = false;
      const persist = (stamp: RulesStamp | undefined): void => {
        if (persisted) return;
        this.#persist(pod, netns, stamp, wasStored);
        persisted = true;
      };
      let applied: { stamp: RulesStamp | undefined } | undefined;
      const onRulesApplied = (stamp: RulesStamp | undefined): void => {
        progress.rulesApplied = true;
        applied = { stamp };
        // An ADD answered before ztunnel acked (see #answerWithin) records the pod right then.
        progress.persist = () => {
          try {
            persist(stamp);
            return true;
          } catch {
            return false;
          }
        };
      };
      let result: Awaited<ReturnType<typeof onboardPod>>;
      try {
        // RuleApplyError: nothing of this ADD stays (onboardPod took a new pod back out of ztunnel).
        result = await onboardPod({ ...this.deps, onRulesApplied }, this.#identity(pod), netns, NO_OVERRIDES);
      } catch (err) {
        // ztunnel failed after the rules went in: the pod stays registered for ztunnel's next
        // snapshot, so it is recorded (a restart must know it too), and the ADD fails.
        if (applied) persist(applied.stamp);
        throw err;
      }
      const { rulesMs, zdsMs, stamp } = result;
      // One write per ADD, with the rules' stamp, before the ADD is answered: an answered ADD is
      // always on disk. A crash before this point fails the ADD, and the runtime retries it.
      persist(stamp);
      // Logged once the ADD is answered (the answer goes out in this turn's microtasks): a write
      // to stdout wakes whoever reads it, and the pod need not wait for that.
      setImmediate(() => this.#log.info({ ...where, rulesMs, zdsMs, netnsIno: netns.ino }, 'pod enrolled'));
    }).catch(async (err: unknown) => {
      if (err instanceof StateWriteError) await this.#undoAdd(pod.uid, err);
      throw err;
    });
    return this.#answerWithin(work, pod, progress);
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

  /** `work`'s outcome, or after addAnswerMs an error naming what it still waits for (it carries on). */
  #answerWithin(work: Promise<void>, pod: CniPod, progress: AddProgress): Promise<void> {
    const ms = this.deps.addAnswerMs ?? ADD_ANSWER_MS;
    const log = (): Logger => this.#log.child({ pod: `${pod.namespace}/${pod.name}`, uid: pod.uid });
    return answerWithin(work, {
      ms,
      late: () => {
        const pending =
          progress.stage === 'queued'
            ? 'an earlier ADD or DEL of this pod is still running'
            : progress.rulesApplied
              ? 'ztunnel has not acknowledged it (its in-pod rules are in place; the pod stays registered and goes to ztunnel with its next snapshot)'
              : 'its in-pod rules are not applied yet';
        // The pod stays registered for ztunnel's next snapshot: a restart must know it too.
        if (progress.rulesApplied && progress.persist?.() === false) log().warn('could not record the pod before answering the ADD');
        const err = new Error(`pod ${pod.namespace}/${pod.name} not enrolled within ${ms} ms: ${pending}`);
        log().warn({ err: err.message }, 'answering the ADD before the plugin gives up; the enrolment carries on');
        return err;
      },
      settledLate: (err) =>
        err === undefined
          ? log().info('late enrolment finished after the ADD was answered')
          : log().warn({ err: (err as Error).message }, 'late enrolment failed after the ADD was answered'),
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

  /** Both phases, for callers with nothing to do in between. */
  async restore(): Promise<RestoreSummary> {
    const reopened = this.reopen();
    const verified = await this.verifyReopened();
    return { ...reopened, repaired: verified.repaired };
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
    const drift = await this.deps.rules.verify(netns, NO_OVERRIDES, stamp).catch((err: unknown) => ({ error: err as Error }));
    if (!('error' in drift) && drift.inSync) return false;
    log.warn({ drift: 'error' in drift ? drift.error.message : describeDrift(drift) }, 'in-pod rules drifted; re-applying');
    // A pod whose repair fails stays enrolled (ztunnel keeps serving it); CHECK will report it.
    return this.deps.rules.apply(netns, NO_OVERRIDES).then(
      (repaired) => {
        this.#remember(uid, repaired);
        return true;
      },
      (err: unknown) => {
        log.error({ err: (err as Error).message }, 'could not repair in-pod rules');
        return false;
      },
    );
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
