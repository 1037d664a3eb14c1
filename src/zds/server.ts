// The node agent's ZDS server: ztunnel connects here and receives every ambient pod's netns.
// Adds go to the newest connection (the new ztunnel during a rolling update); deletes go to all.
import { bindZdsSocket } from './bind.js';
import type { SeqpacketListener, SeqpacketSocket } from '../addon/seqpacket.js';
import type { RawAddon } from '../addon/binding.js';
import { silentLogger, type Logger } from '../ops/log.js';
import type { WorkloadInfo } from './codec.js';
import { ISTIO_TIMEOUTS, ZdsConnection, type AckObserver, type FdSource, type SnapshotEntry, type ZdsTimeouts } from './connection.js';
import { ZdsError } from './errors.js';

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
  /** Called with the number of live connections whenever it changes (ztunnel_connected). */
  onConnectionCount: (count: number) => void = () => {};

  constructor(private readonly options: ZdsServerOptions) {
    this.#timeouts = { ...ISTIO_TIMEOUTS, ...options.timeouts };
    this.#log = (options.log ?? silentLogger).child({ component: 'zds' });
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
   * Hands a pod to the newest ztunnel and resolves once it acked. A missing connection, a
   * timeout or an error ack is a retryable ZdsError carrying ztunnel's text.
   */
  async podAdded(uid: string, info: WorkloadInfo, netns: FdSource): Promise<void> {
    const conn = this.#connections.at(-1);
    if (!conn) throw new ZdsError('ZDS_NO_CONNECTION', 'no ztunnel connection', true);
    const error = await conn.request({ add: { uid, workloadInfo: info } }, netns);
    if (error) throw new ZdsError('ZDS_ACK_ERROR', `ztunnel rejected pod ${uid}: ${error}`, true);
  }

  /**
   * Tells every ztunnel the pod is gone. With no connection this succeeds: the next snapshot
   * will not contain the pod, and ztunnel drops what the snapshot does not mention.
   */
  async podDeleted(uid: string): Promise<void> {
    const results = await Promise.allSettled(this.#connections.map((c) => c.request({ del: { uid } })));
    for (const r of results) {
      if (r.status === 'rejected') this.#log.warn({ uid, err: (r.reason as Error).message }, 'ztunnel delete not acknowledged; its next snapshot will drop the pod');
    }
  }

  /** Stops listening and closes every connection (ztunnel keeps its proxies and reconnects). */
  close(): void {
    this.#listener?.close();
    this.#listener = undefined;
    this.#accepting = false;
    for (const c of [...this.#connections]) c.close('server shutting down');
  }

  #accept(socket: SeqpacketSocket): void {
    const conn = new ZdsConnection(socket, this.#timeouts, this.#log);
    if (this.options.onAck) conn.onAck = this.options.onAck;
    this.#connections.push(conn);
    conn.onClose = (closed) => {
      this.#connections = this.#connections.filter((c) => c !== closed);
      this.onConnectionCount(this.#connections.length);
    };
    this.#log.info({ conn: conn.id, connections: this.#connections.length }, 'ztunnel connected');
    this.onConnectionCount(this.#connections.length);
    conn.handshake(this.options.snapshot).catch((err: Error) => {
      this.#log.warn({ conn: conn.id, err: err.message }, 'ztunnel handshake failed');
    });
  }
}
