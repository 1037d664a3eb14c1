// The pods handed to ztunnel, keyed by UID, and the netns handles that go with them. The registry
// owns every handle it is given: it closes each exactly once, when its pod leaves (or is replaced
// by a new sandbox), or when the registry is closed.
import { sameNetns, type NetnsHandle } from '../addon/net-addon.js';
import type { WorkloadInfo } from './codec.js';
import type { SnapshotEntry } from './connection.js';
import type { ZdsSink } from './server.js';

export interface PodIdentity extends WorkloadInfo {
  uid: string;
}

interface RegisteredPod {
  info: WorkloadInfo;
  netns: NetnsHandle | undefined;
}

/** Told whenever a pod's registered netns changes: a new handle, or undefined when it left. */
export type NetnsListener = (uid: string, netns: NetnsHandle | undefined) => void;

export class PodRegistry {
  readonly #pods = new Map<string, RegisteredPod>();
  /** Announcements sent (or waiting for a ztunnel) and not acknowledged yet, per pod. */
  readonly #announcing = new Map<string, number>();
  readonly #listeners = new Set<NetnsListener>();

  constructor(private readonly zds: ZdsSink) {}

  /**
   * Registers the pod (taking ownership of `netns`) and, when there is a netns, waits for
   * ztunnel's ack. A retryable ZdsError leaves the pod registered: it goes out again with the
   * next snapshot, and the caller may retry. Without a netns the pod is only kept (`keep` in
   * snapshots) until the agent finds it.
   */
  async add(pod: PodIdentity, netns?: NetnsHandle): Promise<void> {
    if (this.register(pod, netns)) await this.announce(pod.uid);
  }

  /**
   * The synchronous half of add: takes ownership of `netns` and returns the handle the pod now
   * has (an already registered handle to the same namespace wins; the offered one is closed).
   */
  register(pod: PodIdentity, netns?: NetnsHandle): NetnsHandle | undefined {
    if (!pod.uid) {
      netns?.close();
      throw new TypeError('pod uid is required');
    }
    const info = { name: pod.name, namespace: pod.namespace, serviceAccount: pod.serviceAccount };
    const current = this.#pods.get(pod.uid);
    const keep = this.#chooseNetns(current?.netns, netns);
    this.#set(pod.uid, { info, netns: keep });
    return keep;
  }

  /** The asynchronous half: sends the registered pod to ztunnel and waits for the ack. */
  async announce(uid: string): Promise<void> {
    const pod = this.#pods.get(uid);
    if (!pod?.netns) throw new Error(`pod ${uid} has no registered netns to send`);
    this.#announcing.set(uid, (this.#announcing.get(uid) ?? 0) + 1);
    try {
      await this.zds.podAdded(uid, pod.info, pod.netns);
    } finally {
      const left = (this.#announcing.get(uid) ?? 1) - 1;
      if (left > 0) this.#announcing.set(uid, left);
      else this.#announcing.delete(uid);
    }
  }

  /** An announcement of the pod is waiting for ztunnel's ack. */
  awaitingZtunnel(uid: string): boolean {
    return this.#announcing.has(uid);
  }

  /**
   * Registers a pod without telling ztunnel now (after an agent restart: the pod goes out with
   * the next snapshot, which every new connection gets first). Takes ownership of `netns`.
   */
  adopt(pod: PodIdentity, netns: NetnsHandle | undefined): void {
    const current = this.#pods.get(pod.uid);
    const info = { name: pod.name, namespace: pod.namespace, serviceAccount: pod.serviceAccount };
    this.#set(pod.uid, { info, netns: this.#chooseNetns(current?.netns, netns) });
  }

  /** Forgets the pod, closes its netns and tells every ztunnel. Unknown UIDs are fine. */
  async delete(uid: string): Promise<void> {
    const pod = this.#pods.get(uid);
    this.#pods.delete(uid);
    if (pod?.netns) this.#notify(uid, undefined);
    pod?.netns?.close();
    await this.zds.podDeleted(uid);
  }

  has(uid: string): boolean {
    return this.#pods.has(uid);
  }

  get size(): number {
    return this.#pods.size;
  }

  netnsOf(uid: string): NetnsHandle | undefined {
    return this.#pods.get(uid)?.netns;
  }

  workloadOf(uid: string): WorkloadInfo | undefined {
    return this.#pods.get(uid)?.info;
  }

  /** Calls `listener` on every netns change from now on (the reconciler watches these); returns the unsubscribe. */
  observe(listener: NetnsListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  snapshot(): SnapshotEntry[] {
    return [...this.#pods].map(([uid, pod]) => ({ uid, workloadInfo: pod.info, ...(pod.netns ? { netns: pod.netns } : {}) }));
  }

  /** Closes every handle (agent shutdown). ztunnel keeps its own copies of the fds. */
  close(): void {
    for (const [uid, pod] of this.#pods) {
      if (pod.netns) this.#notify(uid, undefined);
      pod.netns?.close();
    }
    this.#pods.clear();
  }

  #set(uid: string, pod: RegisteredPod): void {
    const before = this.#pods.get(uid)?.netns;
    this.#pods.set(uid, pod);
    if (before !== pod.netns) this.#notify(uid, pod.netns);
  }

  #notify(uid: string, netns: NetnsHandle | undefined): void {
    for (const listener of this.#listeners) listener(uid, netns);
  }

  /** Same namespace (inode and device) as before: keep the old handle, close the new one. */
  #chooseNetns(current: NetnsHandle | undefined, offered: NetnsHandle | undefined): NetnsHandle | undefined {
    if (!offered) return current;
    if (!current) return offered;
    if (current === offered) return current;
    if (sameNetns(current, offered)) {
      offered.close();
      return current;
    }
    current.close(); // the sandbox was re-created
    return offered;
  }
}
