// Getting a pod's add acknowledged across ztunnel restarts. The add goes to the newest
// connection; with none, or when that connection dies before the ack, it waits (bounded) for the
// next ztunnel, which takes the pod in its snapshot (the pod is registered, so the snapshot has
// it) or as an add right after it. One connection at a time, so a pod is never sent as an add to
// two live ztunnels, and never twice to the same one.
import { ZdsError } from './errors.js';
import type { FdSource } from './connection.js';
import type { WorkloadInfo } from './codec.js';
import type { ZtunnelGaps } from './ztunnel-gaps.js';

/** What delivery needs from one ztunnel connection (ZdsConnection). */
export interface PodAddTarget {
  /** Resolves with ztunnel's ack error text ('' = ok) for the pod, from its snapshot or an add. */
  addPod(uid: string, info: WorkloadInfo, netns: FdSource): Promise<string>;
}

export interface PodAddDeliveryDeps {
  /** The newest live connection, if any. */
  newest(): PodAddTarget | undefined;
  /** Resolves when the next ztunnel connects. */
  nextConnection(): Promise<void>;
  gaps: ZtunnelGaps;
  /** 0: fail at once without a connection (Istio). */
  waitMs: number;
}

export class PodAddDelivery {
  constructor(private readonly deps: PodAddDeliveryDeps) {}

  /** Resolves once a ztunnel acked the pod; a retryable ZdsError naming ztunnel otherwise. */
  async add(uid: string, info: WorkloadInfo, netns: FdSource): Promise<void> {
    const conn = this.deps.newest();
    if (conn) {
      try {
        return acked(uid, await conn.addPod(uid, info, netns));
      } catch (err) {
        if (!isConnectionLost(err) || this.deps.waitMs === 0) throw err;
      }
    } else if (this.deps.waitMs === 0) {
      throw new ZdsError('ZDS_NO_CONNECTION', 'no ztunnel connection', true);
    }
    return this.#waitForZtunnel(uid, info, netns);
  }

  /** The bounded wait: one connection after another until one acks the pod or the time is up. */
  async #waitForZtunnel(uid: string, info: WorkloadInfo, netns: FdSource): Promise<void> {
    const waiter = this.deps.gaps.begin();
    const ms = this.deps.waitMs;
    let timer: NodeJS.Timeout | undefined;
    let connected = false;
    const timeUp = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(waitExpired(uid, ms, connected)), ms);
    });
    timeUp.catch(() => {});
    try {
      for (;;) {
        const conn = this.deps.newest() ?? (await Promise.race([this.deps.nextConnection(), timeUp]), this.deps.newest());
        if (!conn) continue;
        connected = true;
        const answer = conn.addPod(uid, info, netns);
        answer.catch(() => {}); // when the time runs out first
        try {
          acked(uid, await Promise.race([answer, timeUp]));
          waiter.done(true);
          return;
        } catch (err) {
          if (!isConnectionLost(err)) throw err;
          connected = false; // that one died too: wait for the next
        }
      }
    } catch (err) {
      waiter.done(false);
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }
}

function acked(uid: string, error: string): void {
  if (error) throw new ZdsError('ZDS_ACK_ERROR', `ztunnel rejected pod ${uid}: ${error}`, true);
}

/** The connection ended before the ack (closed, or the write failed): the next ztunnel can take the pod. */
function isConnectionLost(err: unknown): boolean {
  return err instanceof ZdsError && (err.code === 'ZDS_CONNECTION_CLOSED' || err.code === 'ZDS_WRITE_TIMEOUT');
}

function waitExpired(uid: string, ms: number, connected: boolean): ZdsError {
  return connected
    ? new ZdsError(
        'ZDS_ACK_TIMEOUT',
        `ztunnel reconnected but did not acknowledge pod ${uid} within ${ms} ms; the pod stays registered for its snapshot`,
        true,
      )
    : new ZdsError(
        'ZDS_NO_CONNECTION',
        `no ztunnel connection (waited ${ms} ms for one; the pod stays registered for the next snapshot)`,
        true,
      );
}
