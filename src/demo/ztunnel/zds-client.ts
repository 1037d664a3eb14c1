// A small built-in ztunnel stand-in for the demo, its ZDS side: a client of the agent's ZDS socket
// with ztunnel's state rules (docs/zds-protocol.md §2.5: snapshot, keep, reconcile, idempotent
// add, pending retries, the protocol errors ztunnel exits on), which starts one PodProxy per added
// pod (pod-proxy.ts: the in-pod listeners, §3). It is a plaintext TCP relay, not a mesh proxy: no
// HBONE, no mTLS, no policy. What it proves is the plumbing: connections are captured by the node
// agent's rules, their original destination is readable, the upstream leaves with ztunnel's mark,
// and inbound upstreams keep the original client IP. dns.ts is its DNS codec.
import { fstatSync } from 'node:fs';
import net from 'node:net';
import { loadRawAddon, type RawAddon } from '../../addon/binding.js';
import { adoptNetnsFd, NativeNetAddon, type NetAddon, type NetnsHandle } from '../../addon/net-addon.js';
import { SeqpacketSocket, type Datagram } from '../../addon/seqpacket.js';
import { decodeRequest, encodeHello, encodeResponse, requestKind, type WorkloadInfo, type WorkloadRequest } from '../../zds/codec.js';
import { PodProxy, type ProxyContext, type StandInEvent } from './pod-proxy.js';

export type { StandInEvent } from './pod-proxy.js';

export interface StandInPodInfo {
  uid: string;
  name: string;
  namespace: string;
  serviceAccount: string;
  netns: { ino: number; dev: number };
  /** running: listeners bound; pending: the start failed and is retried (ztunnel's "pending"). */
  state: 'running' | 'pending';
  error?: string;
  listeners: string[];
  since: Date;
}

export interface ZtunnelStandInOptions {
  /** The node agent's ZDS socket (ztunnel's INPOD_UDS). */
  socketPath: string;
  addon?: NetAddon;
  raw?: RawAddon;
  /** name → IPv4 answered for A queries of names under `.demo`. */
  dnsRecords?: Record<string, string> | ReadonlyMap<string, string>;
  onEvent?: (event: StandInEvent) => void;
  log?: (line: string) => void;
  /** Called when ZDS broke a rule ztunnel exits on; the stand-in has stopped itself. */
  onFatal?: (reason: string) => void;
  /** Connect deadline of upstream connections (ztunnel: 10 s). */
  upstreamConnectTimeoutMs?: number;
  /** Cap of the connect backoff (20 ms doubling; ztunnel caps at 15 s). Default 1 s. */
  reconnectMaxMs?: number;
  /** How often pods whose proxy failed to start are retried (ztunnel: 5 s). */
  pendingRetryMs?: number;
}
const ACK_WRITE_MS = 5_000;
const HELLO_WRITE_MS = 5_000;
/** Kept in `events` (oldest dropped first). */
const MAX_EVENTS = 10_000;

interface Connection {
  id: number;
  socket: SeqpacketSocket;
  ended: boolean;
  /** ztunnel's per-connection state. */
  snapshotReceived: boolean;
  snapshotNames: Set<string>;
}

interface PendingPod {
  info: WorkloadInfo;
  netns: NetnsHandle;
  error: string;
  since: Date;
}

type Nack = { error: string; end: boolean; fatal?: boolean };

export class ZtunnelStandIn {
  readonly events: StandInEvent[] = [];
  onEvent: ((event: StandInEvent) => void) | undefined;
  /** Set when ZDS broke a rule that makes ztunnel exit; the stand-in then stopped itself. */
  fatalError: string | undefined;
  /** Connections made so far (a reconnect adds one). */
  connectionCount = 0;
  /** Every ZDS request received, in order (the end-to-end tests count adds and dels). */
  readonly requests: Array<{ kind: string; uid?: string }> = [];

  readonly #addon: NetAddon;
  readonly #raw: RawAddon;
  readonly #records = new Map<string, string>();
  readonly #opts: ZtunnelStandInOptions;
  readonly #log: (line: string) => void;
  readonly #running = new Map<string, PodProxy>();
  readonly #pending = new Map<string, PendingPod>();
  #conn: Connection | undefined;
  #queue: Promise<void> = Promise.resolve();
  #started = false;
  #stopped = false;
  #stopping: Promise<void> | undefined;
  #backoffMs = 0;
  #reconnectTimer: NodeJS.Timeout | undefined;
  #retryTimer: NodeJS.Timeout | undefined;
  #waiters = new Set<() => void>();

  constructor(opts: ZtunnelStandInOptions) {
    this.#opts = opts;
    this.#raw = opts.raw ?? loadRawAddon();
    this.#addon = opts.addon ?? new NativeNetAddon(this.#raw);
    this.#log = opts.log ?? (() => {});
    this.onEvent = opts.onEvent;
    const records = opts.dnsRecords instanceof Map ? opts.dnsRecords : new Map(Object.entries(opts.dnsRecords ?? {}));
    for (const [name, ip] of records) this.setDnsRecord(name, ip);
    this.#retryTimer = setInterval(() => this.#enqueue(() => this.#retryPending()), opts.pendingRetryMs ?? 5_000);
    this.#retryTimer.unref();
  }

  /** Connects (and keeps reconnecting) to the ZDS socket. */
  start(): this {
    if (this.#stopped) throw new Error('the ztunnel stand-in was stopped');
    if (!this.#started) {
      this.#started = true;
      this.#connect();
    }
    return this;
  }

  /** Adds or replaces a DNS record (name → IPv4). */
  setDnsRecord(name: string, ip: string): void {
    if (!net.isIPv4(ip)) throw new TypeError(`DNS record ${name}: not an IPv4 address: ${ip}`);
    this.#records.set(name.toLowerCase().replace(/\.$/, ''), ip);
  }

  /** Connected and the hello sent. */
  get connected(): boolean {
    return this.#conn !== undefined && !this.#conn.ended;
  }

  /** ztunnel's readiness: snapshot_sent processed on the current connection and nothing pending. */
  get ready(): boolean {
    return this.connected && this.#conn?.snapshotReceived === true && this.#pending.size === 0;
  }

  pods(): Map<string, StandInPodInfo> {
    const out = new Map<string, StandInPodInfo>();
    for (const [uid, p] of this.#running) {
      out.set(uid, {
        uid,
        ...p.info,
        netns: { ino: p.netns.ino, dev: p.netns.dev },
        state: 'running',
        listeners: p.listeners(),
        since: p.since,
      });
    }
    for (const [uid, p] of this.#pending) {
      out.set(uid, {
        uid,
        ...p.info,
        netns: { ino: p.netns.ino, dev: p.netns.dev },
        state: 'pending',
        error: p.error,
        listeners: [],
        since: p.since,
      });
    }
    return out;
  }

  /** Resolves when `predicate` holds (checked after every request and event), or rejects after `ms`. */
  waitFor(predicate: () => boolean, ms = 5_000, what = 'condition'): Promise<void> {
    if (predicate()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const check = (): void => {
        if (!predicate()) return;
        cleanup();
        resolve();
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`ztunnel stand-in: ${what} not met within ${ms} ms`));
      }, ms);
      const cleanup = (): void => {
        clearTimeout(timer);
        this.#waiters.delete(check);
      };
      this.#waiters.add(check);
    });
  }

  /** Closes the ZDS connection, every pod's sockets and every netns fd; no reconnect. */
  stop(): Promise<void> {
    this.#stopping ??= (async () => {
      this.#stopped = true;
      clearTimeout(this.#reconnectTimer);
      clearInterval(this.#retryTimer);
      if (this.#conn) this.#end(this.#conn, 'stand-in stopped');
      // Behind whatever request is being processed (each step of it is bounded).
      await this.#enqueue(async () => {
        await Promise.all([...this.#running.values()].map((p) => p.close()));
        this.#running.clear();
        this.#clearPending();
      });
      this.#notify();
    })();
    return this.#stopping;
  }

  // ---- connection ----

  #connect(): void {
    this.#reconnectTimer = undefined;
    if (this.#stopped) return;
    let socket: SeqpacketSocket;
    try {
      socket = SeqpacketSocket.connect(this.#opts.socketPath, this.#raw);
    } catch (err) {
      return this.#retryConnect(`connect ${this.#opts.socketPath}: ${(err as Error).message}`);
    }
    this.#backoffMs = 0;
    const conn: Connection = { id: ++this.connectionCount, socket, ended: false, snapshotReceived: false, snapshotNames: new Set() };
    socket.handlers = {
      onDatagram: (d) => void this.#enqueue(() => this.#onDatagram(conn, d)),
      onError: (err) => void this.#enqueue(async () => this.#end(conn, `socket error: ${err.message}`)),
    };
    // A new connection resets the per-connection state and forgets pending proxies (ztunnel's
    // reset_snapshot); queued so it cannot overtake the previous connection's last request.
    void this.#enqueue(async () => {
      if (conn.ended) return;
      this.#clearPending();
      this.#conn = conn;
      this.#log(`zds: connected to ${this.#opts.socketPath} (connection ${conn.id})`);
    });
    socket.send(encodeHello(1), undefined, HELLO_WRITE_MS).catch((err: Error) => {
      // An "announce error": back off before the next attempt.
      void this.#enqueue(async () => {
        if (conn.ended) return; // already ended (and a reconnect arranged) for another reason
        this.#end(conn, `hello failed: ${err.message}`, false);
        this.#retryConnect(`hello: ${err.message}`);
      });
    });
  }

  #retryConnect(reason: string): void {
    if (this.#stopped || this.#reconnectTimer) return;
    const max = this.#opts.reconnectMaxMs ?? 1_000;
    this.#backoffMs = Math.min(max, Math.max(20, this.#backoffMs * 2));
    this.#log(`zds: ${reason}; retrying in ${this.#backoffMs} ms`);
    this.#reconnectTimer = setTimeout(() => this.#connect(), this.#backoffMs);
  }

  /** Ends one connection; ztunnel loops straight into a new connect (unless stopped). */
  #end(conn: Connection, reason: string, reconnect = true): void {
    if (conn.ended) return;
    conn.ended = true;
    conn.socket.close();
    if (this.#conn === conn) this.#conn = undefined;
    this.#log(`zds: connection ${conn.id} ended: ${reason}`);
    this.#notify();
    if (reconnect && !this.#stopped && !this.#reconnectTimer) this.#reconnectTimer = setTimeout(() => this.#connect(), 0);
  }

  #enqueue(job: () => Promise<void>): Promise<void> {
    const run = this.#queue.then(job).catch((err: Error) => this.#log(`zds: internal error: ${err.stack ?? err.message}`));
    this.#queue = run;
    return run;
  }

  #notify(): void {
    for (const w of [...this.#waiters]) w();
  }

  // ---- requests ----

  async #onDatagram(conn: Connection, d: Datagram): Promise<void> {
    if (conn.ended || this.#stopped) {
      for (const fd of d.fds) this.#raw.closeFd(fd);
      return;
    }
    if (d.eof) return this.#end(conn, 'the node agent closed the connection');
    const verdict = await this.#handle(conn, d);
    if (conn.ended) return;
    try {
      await conn.socket.send(encodeResponse({ ack: { error: verdict.error } }), undefined, ACK_WRITE_MS);
    } catch (err) {
      this.#end(conn, `sending the ack failed: ${(err as Error).message}`);
      return;
    }
    if (verdict.fatal) return this.#fatal(conn, verdict.error);
    if (verdict.end) this.#end(conn, verdict.error);
    this.#notify();
  }

  /** Validates like ztunnel (fds, truncation, decode, payload/fd match), then applies the request. */
  async #handle(conn: Connection, d: Datagram): Promise<Nack> {
    const readError = (detail: string): Nack => ({ error: `failure to read message : ${detail}`, end: true });
    if (d.fds.length > 1) {
      for (const fd of d.fds) this.#raw.closeFd(fd);
      return readError(`Expected 1 FD, got ${d.fds.length}`);
    }
    if (d.truncated || d.controlTruncated) {
      for (const fd of d.fds) this.#raw.closeFd(fd);
      return readError('received truncated message');
    }
    let req: WorkloadRequest | undefined;
    try {
      req = decodeRequest(d.data);
    } catch (err) {
      for (const fd of d.fds) this.#raw.closeFd(fd);
      return readError(`failed to decode Protobuf message: ${(err as Error).message}`);
    }
    if (!req) {
      for (const fd of d.fds) this.#raw.closeFd(fd);
      return readError('no payload');
    }
    const fd = d.fds[0];
    if ('add' in req) {
      if (fd === undefined) return readError('No control message');
      return this.#add(conn, req.add.uid, req.add.workloadInfo, fd);
    }
    if (fd !== undefined) {
      this.#raw.closeFd(fd);
      return readError('Unexpected control message');
    }
    const protocolError = (text: string): Nack => ({
      error: `failure to process message : ProtocolError("${text}")`,
      end: true,
      fatal: true,
    });
    const kind = requestKind(req);
    const uid = (req as Record<string, { uid?: string } | undefined>)[kind]?.uid;
    this.requests.push(uid === undefined ? { kind } : { kind, uid });
    switch (kind) {
      case 'keep': {
        if (conn.snapshotReceived) return protocolError('pod keep received after snapshot');
        conn.snapshotNames.add((req as { keep: { uid: string } }).keep.uid);
        return { error: '', end: false };
      }
      case 'del': {
        const uid = (req as { del: { uid: string } }).del.uid;
        this.#dropPending(uid);
        if (!conn.snapshotReceived) {
          conn.snapshotNames.delete(uid); // the reconcile at snapshot_sent stops it
        } else {
          await this.#stopProxy(uid, 'deleted');
        }
        return { error: '', end: false };
      }
      default: {
        if (conn.snapshotReceived) return protocolError('pod snapshot received already');
        for (const uid of [...this.#running.keys()]) {
          if (!conn.snapshotNames.has(uid)) await this.#stopProxy(uid, 'not in the snapshot');
        }
        conn.snapshotNames.clear();
        conn.snapshotReceived = true;
        this.#log(`zds: snapshot received (${this.#running.size} running, ${this.#pending.size} pending)`);
        return { error: '', end: false };
      }
    }
  }

  async #add(conn: Connection, uid: string, info: WorkloadInfo | undefined, fd: number): Promise<Nack> {
    if (!info) {
      this.#raw.closeFd(fd);
      return { error: 'failure to process message : ProtocolError("workload_info is required but not present")', end: true, fatal: true };
    }
    if (!conn.snapshotReceived) conn.snapshotNames.add(uid);
    let ino: number;
    let dev: number;
    try {
      ({ ino, dev } = fstatSync(fd));
    } catch (err) {
      this.#raw.closeFd(fd);
      return { error: `failure to start proxy : fstat: ${(err as Error).message}`, end: false };
    }
    const current = this.#running.get(uid);
    if (current && current.netns.ino === ino && current.netns.dev === dev) {
      this.#raw.closeFd(fd); // same sandbox: idempotent
      this.#dropPending(uid);
      return { error: '', end: false };
    }
    if (current) await this.#stopProxy(uid, 'sandbox replaced');
    this.#dropPending(uid);
    const netns = adoptNetnsFd(fd, `zds:${uid}`, this.#raw);
    const error = await this.#start(uid, info, netns);
    return { error, end: false };
  }

  /** Starts the proxy; on failure keeps the pod pending (with its netns) and returns the nack. */
  async #start(uid: string, info: WorkloadInfo, netns: NetnsHandle): Promise<string> {
    try {
      const proxy = await PodProxy.start(uid, info, netns, this.#context());
      this.#pending.delete(uid); // a retried pod: its netns is the proxy's now
      this.#running.set(uid, proxy);
      this.#log(`pod ${info.name || uid}: proxy started in netns ${netns.ino} (${proxy.listeners().join(', ')})`);
      return '';
    } catch (err) {
      const error = `failure to start proxy : ${(err as Error).message}`;
      this.#pending.set(uid, { info, netns, error, since: new Date() });
      this.#log(`pod ${info.name || uid}: ${error}`);
      return error;
    }
  }

  async #retryPending(): Promise<void> {
    if (this.#stopped) return;
    // A pod stays pending (as pods() shows it) while its retry runs: #start moves it to running.
    for (const [uid, p] of [...this.#pending]) {
      await this.#start(uid, p.info, p.netns);
    }
    this.#notify();
  }

  async #stopProxy(uid: string, why: string): Promise<void> {
    const proxy = this.#running.get(uid);
    if (!proxy) return;
    this.#running.delete(uid);
    await proxy.close();
    this.#log(`pod ${proxy.label}: proxy stopped (${why})`);
  }

  #dropPending(uid: string): void {
    this.#pending.get(uid)?.netns.close();
    this.#pending.delete(uid);
  }

  #clearPending(): void {
    for (const uid of [...this.#pending.keys()]) this.#dropPending(uid);
  }

  /** ztunnel exits on a protocol error: so does the stand-in (everything closed, no reconnect). */
  #fatal(conn: Connection, reason: string): void {
    this.fatalError = reason;
    this.#log(`zds: fatal: ${reason}; stopping (ztunnel exits here)`);
    this.#end(conn, reason, false);
    // stop() queues its teardown behind this request; do not await it from inside the queue.
    void this.stop().then(() => this.#opts.onFatal?.(reason));
  }

  #context(): ProxyContext {
    return {
      addon: this.#addon,
      raw: this.#raw,
      records: () => this.#records,
      upstreamTimeoutMs: this.#opts.upstreamConnectTimeoutMs ?? 10_000,
      emit: (e) => this.#emit(e),
      log: this.#log,
    };
  }

  #emit(partial: Omit<StandInEvent, 'at'>): void {
    const event: StandInEvent = { ...partial, at: new Date() };
    this.events.push(event);
    const max = MAX_EVENTS;
    if (this.events.length > max) this.events.splice(0, this.events.length - max);
    const detail =
      event.kind === 'dns'
        ? `${event.transport} ${event.name ?? '?'} -> ${event.answer ?? '?'}`
        : `${event.from} -> ${event.originalDst}${event.clientIp ? ` (client ${event.clientIp})` : ''}`;
    this.#log(`pod ${event.pod}: ${event.kind} via ${event.listener}: ${detail}${event.error ? ` FAILED: ${event.error}` : ''}`);
    try {
      this.onEvent?.(event);
    } catch (err) {
      this.#log(`onEvent threw: ${(err as Error).message}`);
    }
    this.#notify();
  }
}
