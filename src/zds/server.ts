// The node agent's ZDS server: ztunnel connects here and receives every ambient pod's netns.
// Adds go to the newest connection (the new ztunnel during a rolling update), and wait, bounded,
// for the next one when there is none (pod-add-delivery.ts); deletes go to all.
import { bindZdsSocket } from './bind.js';
import type { SeqpacketListener, SeqpacketSocket } from '../addon/seqpacket.js';
import type { RawAddon } from '../addon/binding.js';
import { silentLogger, type Logger } from '../ops/log.js';
import type { WorkloadInfo } from './codec.js';
import { ISTIO_TIMEOUTS, ZdsConnection, type AckObserver, type FdSource, type SnapshotEntry, type ZdsTimeouts } from './connection.js';
import { PodAddDelivery } from './pod-add-delivery.js';
import { ZtunnelGaps, type WaitObserver } from './ztunnel-gaps.js';

export interface ZdsServerOptions {
  socketPath: string;
  /** The pods to hand over when a ztunnel connects (fresh for every connection). */
  snapshot: () => readonly SnapshotEntry[];
  /** Socket file permissions; default 0600 (ztunnel runs as root). */
  mode?: number;
  timeouts?: Partial<ZdsTimeouts>;
  log?: Logger;
  raw?: RawAddon;
  onAck?: AckObserver;
  /** Already bound (paused) at process start, before the heavy modules load; the server takes it. */
  listener?: SeqpacketListener;
  /**
   * How long an add waits for a ztunnel when none is connected or its connection dies before the
   * ack (AMBIENT_ZTUNNEL_WAIT_TIMEOUT); 0 fails it at once, as Istio does.
   */
  ztunnelWaitMs?: number;
  /** Each add that waited, with how long and whether ztunnel acked it in time (metrics). */
  onWaited?: WaitObserver;
}

export interface ConnectionSummary {
  id: number;
  state: string;
  connectedAt: string;
  helloVersion: number | undefined;
  requestsSent: number;
  /** uid -> acked | kept | rejected: <ztunnel's text> */
  pods: Record<string, string>;
}

/** What the rest of the agent needs from ZDS (the registry talks to this). */
export interface ZdsSink {
  podAdded(uid: string, info: WorkloadInfo, netns: FdSource): Promise<void>;
  podDeleted(uid: string): Promise<void>;
}

export class ZdsServer implements ZdsSink {
  #listener: SeqpacketListener | undefined;
  #accepting = false;
  #connections: ZdsConnection[] = []; // oldest first
  readonly #timeouts: ZdsTimeouts;
  readonly #log: Logger;
  readonly #gaps: ZtunnelGaps;
  readonly #delivery: PodAddDelivery;
  /** Adds waiting for a ztunnel to connect, woken by the next accept. */
  #awaitingConnection: Array<() => void> = [];
  /** Called with the number of live connections whenever it changes (ztunnel_connected). */
  onConnectionCount: (count: number) => void = () => {};

  constructor(private readonly options: ZdsServerOptions) {
    this.#timeouts = { ...ISTIO_TIMEOUTS, ...options.timeouts };
    this.#log = (options.log ?? silentLogger).child({ component: 'zds' });
    this.#gaps = new ZtunnelGaps(this.#log, options.onWaited);
    this.#delivery = new PodAddDelivery({
      newest: () => this.#connections.at(-1),
      nextConnection: () => new Promise((resolve) => this.#awaitingConnection.push(resolve)),
      gaps: this.#gaps,
      waitMs: options.ztunnelWaitMs ?? 0,
    });
  }

  /** Accepting connections (readiness): start() was called. */
  get listening(): boolean {
    return this.#accepting;
  }

  /**
   * Binds the socket without serving it yet, as early as possible after a restart: ztunnel's
   * connect succeeds once the kernel queues it in the backlog, so it stops backing off while the
   * agent is still restoring pods, and gets its snapshot the moment start() accepts.
   */
  bind(): void {
    if (this.#listener) return;
    this.#listener = this.options.listener ?? bindZdsSocket(this.options.socketPath, this.options.mode, this.options.raw);
    this.#listener.onConnection = (s) => this.#accept(s);
    this.#log.info({ socket: this.options.socketPath }, 'ZDS socket bound; connections wait in the backlog');
  }

  /** Binds (if bind() was not called) and accepts; every connection first gets the snapshot. */
  start(): void {
    this.bind();
    if (this.#accepting) return;
    this.#accepting = true;
    this.#listener!.resume();
    this.#log.info({ socket: this.options.socketPath }, 'ZDS server listening');
  }

  connections(): ConnectionSummary[] {
    return this.#connections.map((c) => ({
      id: c.id,
      state: c.state,
      connectedAt: c.connectedAt.toISOString(),
      helloVersion: c.helloVersion,
      requestsSent: c.requestsSent,
      pods: Object.fromEntries(c.podStates),
    }));
  }

  /**
   * Hands a pod to the newest ztunnel and resolves once it acked. With no ztunnel, or when its
   * connection dies before the ack, it waits up to ztunnelWaitMs for the next one to take the
   * pod (see PodAddDelivery). An error ack, a timeout or the end of the wait is a retryable
   * ZdsError naming ztunnel (the pod stays registered for the next snapshot).
   */
  podAdded(uid: string, info: WorkloadInfo, netns: FdSource): Promise<void> {
    return this.#delivery.add(uid, info, netns);
  }

  /**
   * Tells every ztunnel the pod is gone. With no connection this succeeds: the next snapshot
   * will not contain the pod, and ztunnel drops what the snapshot does not mention.
   */
  async podDeleted(uid: string): Promise<void> {
    const results = await Promise.allSettled(this.#connections.map((c) => c.request({ del: { uid } })));
    for (const r of results) {
      if (r.status === 'rejected')
        this.#log.warn({ uid, err: (r.reason as Error).message }, 'ztunnel delete not acknowledged; its next snapshot will drop the pod');
    }
  }

  /** Stops listening and closes every connection (ztunnel keeps its proxies and reconnects). */
  close(): void {
    this.#listener?.close();
    this.#listener = undefined;
    this.#accepting = false;
    for (const c of [...this.#connections]) c.close('server shutting down');
  }

  #connectionCountChanged(): void {
    this.#gaps.connectionCount(this.#connections.length);
    this.onConnectionCount(this.#connections.length);
  }

  #accept(socket: SeqpacketSocket): void {
    const conn = new ZdsConnection(socket, this.#timeouts, this.#log);
    if (this.options.onAck) conn.onAck = this.options.onAck;
    this.#connections.push(conn);
    conn.onClose = (closed) => {
      this.#connections = this.#connections.filter((c) => c !== closed);
      this.#connectionCountChanged();
    };
    this.#log.info({ conn: conn.id, connections: this.#connections.length }, 'ztunnel connected');
    this.#connectionCountChanged();
    for (const wake of this.#awaitingConnection.splice(0)) wake();
    conn.handshake(this.options.snapshot).catch((err: Error) => {
      this.#log.warn({ conn: conn.id, err: err.message }, 'ztunnel handshake failed');
    });
  }
}
