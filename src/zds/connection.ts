// One ztunnel connection: hello, snapshot, then requests written in order (up to MAX_IN_FLIGHT
// ahead of their acks), each answered by exactly one ack (acks are matched by order only).
// Anything else ztunnel sends is a protocol error.
import type { Datagram, SeqpacketSocket } from '../addon/seqpacket.js';
import type { Logger } from '../ops/log.js';
import { decodeAck, decodeHello, encodeRequest, requestKind, type WorkloadInfo, type WorkloadRequest } from './codec.js';
import { ZdsError } from './errors.js';

export interface ZdsTimeouts {
  helloMs: number;
  ackMs: number;
  writeMs: number;
}

export const ISTIO_TIMEOUTS: ZdsTimeouts = { helloMs: 5000, ackMs: 5000, writeMs: 5000 };

/** Something whose fd can travel to ztunnel; `closed` is checked right before sending. */
export interface FdSource {
  readonly fd: number;
  readonly closed: boolean;
}

export interface SnapshotEntry {
  uid: string;
  workloadInfo: WorkloadInfo;
  /** The pod's netns; without one the pod goes out as `keep`. */
  netns?: FdSource;
}

export type ConnectionState = 'hello' | 'snapshot' | 'ready' | 'closed';

/** Called after every request/ack exchange (for the ack latency histogram). */
export type AckObserver = (request: string, seconds: number, ok: boolean) => void;

/** A promise with its settle functions outside (rejections are handled: only awaiters see them). */
interface Deferred<T> {
  promise: Promise<T>;
  resolve(value: T): void;
  reject(err: Error): void;
}

function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (err: Error) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  promise.catch(() => {});
  return { promise, resolve, reject };
}

/** A pod's add in this connection's snapshot: its ack answers the pod's ADD (undefined: sent as keep after all). */
interface SnapshotAdd {
  netns: FdSource;
  ack: Deferred<string | undefined>;
}

/** A request and the fd it carries, as decided when it is written. */
interface Outgoing {
  req: WorkloadRequest;
  netns?: FdSource | undefined;
}

interface Expectation {
  resolve(data: Buffer): void;
  reject(err: Error): void;
  timeoutMs: number;
  what: string;
  /** Armed when the expectation reaches the head of the queue (its ack is the next one due). */
  timer?: NodeJS.Timeout;
}

/**
 * Requests sent ahead of their acks. ztunnel reads one datagram at a time and acks each in order,
 * so more than one may wait in the socket; the agent need not wake up between them (a snapshot of
 * 330 pods is then ztunnel's work, not 330 round trips). Bounded, so the fds in flight stay few.
 */
const MAX_IN_FLIGHT = 32;

let nextConnectionId = 1;

export class ZdsConnection {
  readonly id = nextConnectionId++;
  readonly connectedAt = new Date();
  #state: ConnectionState = 'hello';
  #snapshotSent = false;
  /** Acks due, oldest first: acks are matched by order. */
  readonly #expects: Expectation[] = [];
  #slotWaiters: Array<() => void> = [];
  /** The sends happen in request order: each waits for the previous one to be written. */
  #sendTail: Promise<unknown> = Promise.resolve();
  #tail: Promise<unknown>;
  /** Requests queued or in flight (after the snapshot). */
  #queued = 0;
  #markReady!: () => void;
  #failReady!: (err: Error) => void;
  #closeReason: string | undefined;
  /** Resolves once the snapshot's entries are taken (after the hello). */
  readonly #snapshotTaken = deferred<void>();
  /** The snapshot's adds until snapshot_sent is acked, by pod. */
  readonly #snapshotAdds = new Map<string, SnapshotAdd>();
  helloVersion: number | undefined;
  requestsSent = 0;
  /** What this ztunnel said about each pod: acked, kept, or its error text (for /debug/pods). */
  readonly podStates = new Map<string, string>();
  onAck: AckObserver = () => {};
  onClose: (conn: ZdsConnection, reason: string) => void = () => {};

  constructor(
    private readonly socket: SeqpacketSocket,
    private readonly timeouts: ZdsTimeouts,
    private readonly log: Logger,
  ) {
    // Public requests queue behind the snapshot: nothing may overtake snapshot_sent.
    this.#tail = new Promise<void>((resolve, reject) => {
      this.#markReady = resolve;
      this.#failReady = reject;
    });
    this.#tail.catch(() => {});
    socket.handlers = { onDatagram: (d) => this.#onDatagram(d), onError: (err) => this.close(`socket error: ${err.message}`) };
  }

  get state(): ConnectionState {
    return this.#state;
  }

  get closeReason(): string | undefined {
    return this.#closeReason;
  }

  /**
   * Reads the hello, sends the snapshot and snapshot_sent (written ahead of their acks, see
   * MAX_IN_FLIGHT). Closes the connection on failure. A pod whose netns handle was closed after
   * the entries were taken (its sandbox replaced or deleted meanwhile) goes out as `keep`: ztunnel
   * keeps what it runs, and the add or del that follows the snapshot settles it.
   */
  async handshake(snapshot: () => readonly SnapshotEntry[]): Promise<void> {
    try {
      this.helloVersion = decodeHello(await this.#next(this.timeouts.helloMs, 'hello')).version;
      this.#state = 'snapshot';
      const entries = snapshot().filter((e) => !e.netns?.closed);
      for (const e of entries) if (e.netns) this.#snapshotAdds.set(e.uid, { netns: e.netns, ack: deferred() });
      this.#snapshotTaken.resolve();
      const answers = entries.map((entry) => this.#sendSnapshotEntry(entry));
      const done = this.#exchange({ snapshotSent: {} });
      for (const pending of [...answers, done]) pending.catch(() => {}); // the first failure is thrown below
      for (const [i, answer] of answers.entries()) {
        const error = await answer;
        if (error) this.log.warn({ conn: this.id, uid: entries[i]!.uid, ztunnelError: error }, 'ztunnel rejected a snapshot entry');
      }
      await done;
      this.#snapshotAdds.clear();
      this.#state = 'ready';
      this.log.info({ conn: this.id, pods: entries.length, helloVersion: this.helloVersion }, 'ztunnel snapshot sent');
      this.#markReady();
    } catch (err) {
      this.close(`handshake failed: ${(err as Error).message}`);
      throw err;
    }
  }

  /** One snapshot entry, add or keep as its netns is when written; its ack answers a waiting ADD. */
  async #sendSnapshotEntry(entry: SnapshotEntry): Promise<string> {
    let asAdd = false;
    const error = await this.#exchangeWhenWritten(() => {
      const netns = entry.netns && !entry.netns.closed ? entry.netns : undefined;
      asAdd = netns !== undefined;
      return { req: snapshotRequest(entry.uid, entry.workloadInfo, netns), netns };
    });
    this.#snapshotAdds.get(entry.uid)?.ack.resolve(asAdd ? error : undefined);
    return error;
  }

  /**
   * Hands a pod to this ztunnel once: when the pod is in this connection's snapshot with the same
   * netns, that entry's ack is the answer (no second add to the same ztunnel); otherwise an add
   * after the snapshot. Resolves with ztunnel's ack error text ('' = ok).
   */
  async addPod(uid: string, info: WorkloadInfo, netns: FdSource): Promise<string> {
    if (this.#state === 'hello') await this.#snapshotTaken.promise;
    const inSnapshot = this.#snapshotAdds.get(uid);
    if (inSnapshot?.netns === netns) {
      const error = await inSnapshot.ack.promise;
      if (error !== undefined) return error;
    }
    return this.request({ add: { uid, workloadInfo: info } }, netns);
  }

  /**
   * Sends one request after everything queued before it (its ack may still be due); resolves with
   * ztunnel's ack error text ('' = ok).
   */
  request(req: WorkloadRequest, netns?: FdSource): Promise<string> {
    // Nothing queued after the snapshot: send now, in this tick (a pod's ADD should not wait for a
    // microtask behind the rule install it runs alongside). Otherwise queue behind the others.
    const direct = this.#state === 'ready' && this.#queued === 0;
    this.#queued++;
    const run = (direct ? this.#exchange(req, netns) : this.#tail.then(() => this.#exchange(req, netns))).finally(() => this.#queued--);
    return run;
  }

  close(reason: string): void {
    if (this.#state === 'closed') return;
    this.#state = 'closed';
    this.#closeReason = reason;
    this.socket.close();
    const err = new ZdsError('ZDS_CONNECTION_CLOSED', `ztunnel connection ${this.id} closed: ${reason}`, true);
    this.#failReady(err);
    this.#snapshotTaken.reject(err);
    for (const entry of this.#snapshotAdds.values()) entry.ack.reject(err);
    this.#snapshotAdds.clear();
    for (const pending of this.#expects.splice(0)) {
      clearTimeout(pending.timer);
      pending.reject(err);
    }
    for (const wake of this.#slotWaiters.splice(0)) wake();
    this.log.info({ conn: this.id, reason }, 'ztunnel connection closed');
    this.onClose(this, reason);
  }

  /** Never sends what ztunnel rejects; see docs/zds-protocol.md §6. */
  #check(req: WorkloadRequest, netns: FdSource | undefined): void {
    const kind = requestKind(req);
    const fail = (message: string): never => {
      throw new ZdsError('ZDS_INVALID_MESSAGE', message, false);
    };
    if ('add' in req && !req.add.workloadInfo) fail('refusing to send add without workload_info (ztunnel exits on it)');
    if (kind === 'add' && !netns) fail('refusing to send add without exactly one netns fd');
    if (kind !== 'add' && netns) fail(`refusing to send an fd with ${kind}`);
    if (netns?.closed) fail('the pod netns handle was closed before it could be sent');
    if (kind === 'keep' && this.#snapshotSent) fail('refusing to send keep after snapshot_sent (ztunnel exits on it)');
    if (kind === 'snapshotSent' && this.#snapshotSent) fail('refusing to send a second snapshot_sent (ztunnel exits on it)');
  }

  /**
   * Writes the request (in request order, behind earlier writes) and resolves with ztunnel's ack
   * text. The write of the next request does not wait for this one's ack.
   */
  #exchange(req: WorkloadRequest, netns?: FdSource): Promise<string> {
    return this.#exchangeWhenWritten(() => ({ req, netns }));
  }

  /** The same, with the request decided right before it is written. */
  #exchangeWhenWritten(outgoing: () => Outgoing): Promise<string> {
    const written = this.#sendTail.then(() => this.#write(outgoing));
    this.#sendTail = written.catch(() => {});
    if (this.#state === 'ready') this.#tail = this.#sendTail; // public requests queue behind this write only
    return written.then(({ req, ack, started }) => this.#answer(req, ack, started));
  }

  async #write(outgoing: () => Outgoing): Promise<{ req: WorkloadRequest; ack: Promise<Buffer>; started: bigint }> {
    while (this.#expects.length >= MAX_IN_FLIGHT && this.#state !== 'closed') {
      await new Promise<void>((resolve) => this.#slotWaiters.push(resolve));
    }
    if (this.#state === 'closed')
      throw new ZdsError('ZDS_CONNECTION_CLOSED', `ztunnel connection ${this.id} is closed: ${this.#closeReason}`, true);
    const { req, netns } = outgoing();
    this.#check(req, netns);
    const bytes = encodeRequest(req);
    if ('snapshotSent' in req) this.#snapshotSent = true;
    const ack = this.#next(this.timeouts.ackMs, `ack for ${requestKind(req)}`);
    try {
      await this.socket.send(bytes, netns, this.timeouts.writeMs);
    } catch (err) {
      ack.catch(() => {});
      this.close(`write failed: ${(err as Error).message}`);
      throw new ZdsError('ZDS_WRITE_TIMEOUT', `sending ${requestKind(req)} to ztunnel failed: ${(err as Error).message}`, true, {
        cause: err,
      });
    }
    this.requestsSent++;
    return { req, ack, started: process.hrtime.bigint() };
  }

  async #answer(req: WorkloadRequest, ack: Promise<Buffer>, started: bigint): Promise<string> {
    const reply = await ack.catch((err: unknown) => {
      this.onAck(requestKind(req), Number(process.hrtime.bigint() - started) / 1e9, false);
      throw err;
    });
    try {
      const error = decodeAck(reply);
      this.onAck(requestKind(req), Number(process.hrtime.bigint() - started) / 1e9, error === '');
      this.#recordPodState(req, error);
      return error;
    } catch (err) {
      this.close(`protocol error: ${(err as Error).message}`);
      throw new ZdsError('ZDS_PROTOCOL', `ztunnel answered ${requestKind(req)} with garbage: ${(err as Error).message}`, true, {
        cause: err,
      });
    }
  }

  #recordPodState(req: WorkloadRequest, error: string): void {
    if ('add' in req) this.podStates.set(req.add.uid, error ? `rejected: ${error}` : 'acked');
    else if ('keep' in req) this.podStates.set(req.keep.uid, 'kept');
    else if ('del' in req) this.podStates.delete(req.del.uid);
  }

  #next(timeoutMs: number, what: string): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      this.#expects.push({ resolve, reject, timeoutMs, what });
      if (this.#expects.length === 1) this.#armHead();
    });
  }

  /** The deadline runs for the ack that is due next only (ztunnel answers one at a time). */
  #armHead(): void {
    const head = this.#expects[0];
    if (!head || head.timer) return;
    head.timer = setTimeout(() => {
      const err = new ZdsError('ZDS_ACK_TIMEOUT', `no ${head.what} from ztunnel within ${head.timeoutMs} ms`, true);
      this.#expects.shift();
      head.reject(err);
      // Acks are matched by order: a late one would answer the next request. Start over instead.
      this.close(err.message);
    }, head.timeoutMs);
  }

  #onDatagram(d: Datagram): void {
    for (const fd of d.fds) this.socket.closeForeignFd(fd);
    if (d.eof) return this.close('ztunnel closed the connection');
    if (d.truncated || d.controlTruncated) return this.close('protocol error: oversized datagram from ztunnel');
    if (d.fds.length > 0) return this.close('protocol error: ztunnel sent file descriptors');
    const expect = this.#expects.shift();
    if (!expect) return this.close('protocol error: unsolicited datagram from ztunnel');
    clearTimeout(expect.timer);
    this.#armHead();
    this.#slotWaiters.shift()?.();
    expect.resolve(d.data);
  }
}

function snapshotRequest(uid: string, workloadInfo: WorkloadInfo, netns: FdSource | undefined): WorkloadRequest {
  return netns ? { add: { uid, workloadInfo } } : { keep: { uid } };
}
