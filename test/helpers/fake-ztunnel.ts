// A ztunnel-like ZDS client in TypeScript: connects, says hello, answers every request with one
// ack after applying ztunnel's state rules (docs/zds-protocol.md §2.5, §2.6), keeps the fds of running
// pods open and closes them when the pods go. Behaviour can be bent for failure tests.
import { fstatSync, readlinkSync } from 'node:fs';
import { SeqpacketSocket, type Datagram } from '../../src/addon/seqpacket.js';
import {
  decodeRequest,
  encodeHello,
  encodeResponse,
  requestKind,
  type RequestKind,
  type WorkloadInfo,
  type WorkloadRequest,
} from '../../src/zds/codec.js';

export interface ReceivedMessage {
  kind: RequestKind;
  uid?: string;
  info?: WorkloadInfo;
  fds: number;
  /** Inode of the received fd (the pod netns), when there was one. */
  inode?: number;
  /** Whether the received fd is a network namespace (its /proc/self/fd link reads `net:[inode]`). */
  netns?: boolean;
  ack: string;
}

export interface FakeZtunnelOptions {
  /** Error text to answer with (undefined = success). */
  ackError?: (req: WorkloadRequest) => string | undefined;
  /** Do not answer this request at all (to test ack timeouts). */
  silent?: (req: WorkloadRequest, index: number) => boolean;
  /** Close the connection when the n-th request (0-based) arrives, without answering it. */
  dieOnRequest?: number;
  helloVersion?: number;
  /** Answer each request this much later (a slow ztunnel binding listeners). */
  ackDelayMs?: number;
  /** Per request delay (overrides ackDelayMs when it returns a number). */
  ackDelayFor?: (req: WorkloadRequest) => number | undefined;
  /** Keep only the last this many (up to twice as many) messages, for long soaks; default: all. */
  maxMessages?: number;
}

export class FakeZtunnel {
  readonly messages: ReceivedMessage[] = [];
  readonly running = new Map<string, { fd: number; inode: number }>();
  protocolError: string | undefined;
  closed = false;
  /** Requests received so far (also those dropped from `messages` by maxMessages). */
  received = 0;
  #socket: SeqpacketSocket;
  #snapshotSent = false;
  #inSnapshot = new Set<string>();
  #waiters: Array<() => void> = [];

  private constructor(
    socketPath: string,
    private readonly options: FakeZtunnelOptions,
  ) {
    this.#socket = SeqpacketSocket.connect(socketPath);
    this.#socket.handlers = { onDatagram: (d) => this.#onDatagram(d), onError: () => this.#onClosed() };
  }

  static async connect(socketPath: string, options: FakeZtunnelOptions = {}): Promise<FakeZtunnel> {
    const client = new FakeZtunnel(socketPath, options);
    await client.#socket.send(encodeHello(options.helloVersion ?? 1), undefined, 1000);
    return client;
  }

  get snapshotSent(): boolean {
    return this.#snapshotSent;
  }

  /** Resolves when `predicate` holds (checked after every message), or rejects after `ms`. */
  waitFor(predicate: () => boolean, ms = 3000): Promise<void> {
    if (predicate()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () =>
          reject(
            new Error(`fake ztunnel: condition not met within ${ms} ms; got ${JSON.stringify(this.messages.map((m) => [m.kind, m.uid]))}`),
          ),
        ms,
      );
      const check = (): void => {
        if (!predicate()) return void this.#waiters.push(check);
        clearTimeout(timer);
        resolve();
      };
      this.#waiters.push(check);
    });
  }

  /** Sends something ztunnel never sends: the server must treat it as a protocol error. */
  sendUnsolicited(): Promise<void> {
    return this.#socket.send(encodeResponse({ ack: { error: '' } }), undefined, 1000);
  }

  close(): void {
    this.#socket.close();
    this.#onClosed();
  }

  #onClosed(): void {
    if (this.closed) return;
    this.closed = true;
    for (const pod of this.running.values()) this.#socket.closeForeignFd(pod.fd);
    this.running.clear();
    this.#notify();
  }

  #notify(): void {
    for (const w of this.#waiters.splice(0)) w();
  }

  #onDatagram(d: Datagram): void {
    if (d.eof) return this.close();
    const index = this.received; // = messages.length unless maxMessages dropped some
    const req = decodeRequest(d.data);
    if (!req) return this.#protocolError('no payload', d);
    if (this.options.dieOnRequest === index) {
      for (const fd of d.fds) this.#socket.closeForeignFd(fd);
      return this.close();
    }
    const fd = d.fds[0] !== undefined ? describeFd(d.fds[0]) : {}; // before #apply may close it
    const ack = this.#apply(req, d.fds);
    this.messages.push({ kind: requestKind(req), ...uidOf(req), fds: d.fds.length, ...fd, ack });
    this.received++;
    const max = this.options.maxMessages;
    if (max !== undefined && this.messages.length > 2 * max) this.messages.splice(0, this.messages.length - max);
    if (!this.protocolError && !this.options.silent?.(req, index)) {
      const reply = (): void => void this.#socket.send(encodeResponse({ ack: { error: ack } }), undefined, 1000).catch(() => {});
      const delay = this.options.ackDelayFor?.(req) ?? this.options.ackDelayMs;
      if (delay) setTimeout(reply, delay);
      else reply();
    }
    if (this.protocolError) this.close();
    this.#notify();
  }

  /** ztunnel's state rules; returns the ack error text. */
  #apply(req: WorkloadRequest, fds: number[]): string {
    const kind = requestKind(req);
    if (kind === 'add' ? fds.length !== 1 : fds.length !== 0) {
      for (const fd of fds) this.#socket.closeForeignFd(fd);
      this.protocolError = kind === 'add' ? `add with ${fds.length} fds` : `${kind} with an fd`;
      return `failure to read message : ${this.protocolError}`;
    }
    const injected = this.options.ackError?.(req);
    if ('add' in req) return this.#add(req.add.uid, req.add.workloadInfo, fds[0]!, injected);
    if ('keep' in req) {
      if (this.#snapshotSent) this.protocolError = 'pod keep received after snapshot';
      this.#inSnapshot.add(req.keep.uid);
    } else if ('del' in req) {
      this.#inSnapshot.delete(req.del.uid);
      if (this.#snapshotSent) this.#stop(req.del.uid);
    } else {
      if (this.#snapshotSent) this.protocolError = 'pod snapshot received already';
      for (const uid of [...this.running.keys()]) if (!this.#inSnapshot.has(uid)) this.#stop(uid);
      this.#snapshotSent = true;
    }
    return this.protocolError ? `failure to process message : ProtocolError("${this.protocolError}")` : (injected ?? '');
  }

  #add(uid: string, info: WorkloadInfo | undefined, fd: number, injected: string | undefined): string {
    if (!info) {
      this.protocolError = 'workload_info is required but not present';
      this.#socket.closeForeignFd(fd);
      return `failure to process message : ProtocolError("${this.protocolError}")`;
    }
    if (!this.#snapshotSent) this.#inSnapshot.add(uid);
    if (injected) {
      this.#socket.closeForeignFd(fd);
      return injected;
    }
    const inode = fstatSync(fd).ino;
    const current = this.running.get(uid);
    if (current?.inode === inode) {
      this.#socket.closeForeignFd(fd);
      return '';
    }
    if (current) this.#stop(uid);
    this.running.set(uid, { fd, inode });
    return '';
  }

  #stop(uid: string): void {
    const pod = this.running.get(uid);
    if (pod) this.#socket.closeForeignFd(pod.fd);
    this.running.delete(uid);
  }

  #protocolError(what: string, d: Datagram): void {
    for (const fd of d.fds) this.#socket.closeForeignFd(fd);
    this.protocolError = what;
    this.close();
  }
}

function describeFd(fd: number): { inode: number; netns: boolean } {
  const inode = fstatSync(fd).ino;
  return { inode, netns: readlinkSync(`/proc/self/fd/${fd}`) === `net:[${inode}]` };
}

function uidOf(req: WorkloadRequest): { uid?: string; info?: WorkloadInfo } {
  if ('add' in req) return { uid: req.add.uid, ...(req.add.workloadInfo ? { info: req.add.workloadInfo } : {}) };
  if ('del' in req) return { uid: req.del.uid };
  if ('keep' in req) return { uid: req.keep.uid };
  return {};
}
