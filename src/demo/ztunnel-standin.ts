// A small built-in ztunnel stand-in for the demo: a ZDS client with ztunnel's state rules
// (docs/zds-protocol.md §2.5), and per pod the in-pod listeners ztunnel binds (§3): 15001 outbound,
// 15006 inbound plaintext, 15053 DNS (UDP + TCP), all made INSIDE the pod netns by the addon
// with SO_MARK 0x539 and SO_REUSEPORT, then adopted by Node. It is a plaintext TCP relay, not
// a mesh proxy: no HBONE, no mTLS, no policy. What it proves is the plumbing: connections are
// captured by the node agent's rules, their original destination is readable, the upstream
// leaves with ztunnel's mark, and inbound upstreams keep the original client IP.
//
// The JS thread never changes namespace: every socket is born on an addon worker thread that
// setns'd into the pod (a socket keeps the namespace it was created in).
import dgram from 'node:dgram';
import { closeSync, fstatSync } from 'node:fs';
import net from 'node:net';

import { loadRawAddon, type RawAddon } from '../addon/binding.js';
import { adoptNetnsFd, NativeNetAddon, type NetAddon, type NetnsHandle } from '../addon/net-addon.js';
import { withDeadline } from '../util/deadline.js';
import { SeqpacketSocket, type Datagram } from '../addon/seqpacket.js';
import type { SocketStep } from '../addon/steps.js';
import {
  INPOD_MARK,
  ZTUNNEL_DNS_PORT,
  ZTUNNEL_INBOUND_PLAINTEXT_PORT,
  ZTUNNEL_OUTBOUND_PORT,
} from '../rules/constants.js';
import { decodeRequest, encodeHello, encodeResponse, requestKind, type WorkloadInfo, type WorkloadRequest } from '../zds/codec.js';

// ---------------------------------------------------------------------------------------------
// DNS: just enough of RFC 1035 for one question and one A answer.
// ---------------------------------------------------------------------------------------------

export const DNS_TYPE_A = 1;
export const DNS_TYPE_AAAA = 28;
export const DNS_CLASS_IN = 1;
export const DNS_RCODE = { NOERROR: 0, FORMERR: 1, SERVFAIL: 2, NXDOMAIN: 3, NOTIMP: 4, REFUSED: 5 } as const;
const RCODE_NAMES = ['NOERROR', 'FORMERR', 'SERVFAIL', 'NXDOMAIN', 'NOTIMP', 'REFUSED'];

const DNS_HEADER_BYTES = 12;
const FLAG_QR = 0x8000;
const FLAG_AA = 0x0400;
const FLAG_TC = 0x0200;
const FLAG_RD = 0x0100;
const MAX_NAME_BYTES = 255;

export interface DnsQuestion {
  /** Labels joined by '.', without the root dot; bytes outside printable ASCII (and '.', '\') as \DDD. */
  name: string;
  type: number;
  class: number;
}

export interface DnsQuery {
  id: number;
  flags: number;
  question: DnsQuestion;
}

export interface DnsAnswer {
  name: string;
  type: number;
  class: number;
  ttl: number;
  /** Dotted quad for A records, hex for anything else. */
  data: string;
}

export interface DnsResponse {
  id: number;
  flags: number;
  rcode: number;
  truncated: boolean;
  question: DnsQuestion | undefined;
  answers: DnsAnswer[];
}

/** A message that is not a well-formed query; `id` is known when the header was readable. */
export class DnsFormatError extends Error {
  override readonly name = 'DnsFormatError';
  constructor(
    message: string,
    readonly id: number | undefined,
    readonly flags: number | undefined,
    /** The rcode to answer with; undefined = do not answer at all. */
    readonly rcode: number | undefined,
  ) {
    super(message);
  }
}

export function rcodeName(rcode: number): string {
  return RCODE_NAMES[rcode] ?? `RCODE${rcode}`;
}

function labelText(bytes: Uint8Array): string {
  let out = '';
  for (const b of bytes) {
    if (b > 0x20 && b < 0x7f && b !== 0x2e && b !== 0x5c) out += String.fromCharCode(b);
    else out += `\\${b.toString().padStart(3, '0')}`;
  }
  return out;
}

/** Reads a (possibly compressed) name at `offset`; returns it and the offset after it. */
function readName(msg: Uint8Array, offset: number, allowPointers: boolean): { name: string; next: number } {
  const labels: string[] = [];
  let pos = offset;
  let next: number | undefined;
  let total = 0;
  for (let hops = 0; ; ) {
    const len = msg[pos];
    if (len === undefined) throw new Error('name runs past the end of the message');
    if (len === 0) {
      pos += 1;
      break;
    }
    if ((len & 0xc0) === 0xc0) {
      if (!allowPointers) throw new Error('compression pointer in the question');
      const low = msg[pos + 1];
      if (low === undefined) throw new Error('truncated compression pointer');
      if (++hops > 32) throw new Error('compression pointer loop');
      next ??= pos + 2;
      pos = ((len & 0x3f) << 8) | low;
      continue;
    }
    if ((len & 0xc0) !== 0) throw new Error(`unsupported label type 0x${len.toString(16)}`);
    if (pos + 1 + len > msg.length) throw new Error('label runs past the end of the message');
    total += len + 1;
    if (total + 1 > MAX_NAME_BYTES) throw new Error('name longer than 255 bytes');
    labels.push(labelText(msg.subarray(pos + 1, pos + 1 + len)));
    pos += 1 + len;
  }
  return { name: labels.join('.'), next: next ?? pos };
}

function encodeName(name: string): Buffer {
  const trimmed = name.endsWith('.') ? name.slice(0, -1) : name;
  const parts: Buffer[] = [];
  if (trimmed !== '') {
    for (const label of trimmed.split('.')) {
      const bytes = Buffer.from(label, 'ascii');
      if (bytes.length === 0 || bytes.length > 63 || !/^[\x21-\x7e]+$/.test(label)) throw new TypeError(`invalid DNS label in ${JSON.stringify(name)}`);
      parts.push(Buffer.from([bytes.length]), bytes);
    }
  }
  parts.push(Buffer.from([0]));
  const out = Buffer.concat(parts);
  if (out.length > MAX_NAME_BYTES) throw new TypeError(`DNS name too long: ${name}`);
  return out;
}

/**
 * Parses a query with exactly one question. Throws DnsFormatError: without `rcode` for what
 * must not be answered (shorter than a header, or a response), with FORMERR/NOTIMP otherwise.
 * Answer/authority/additional sections (EDNS OPT) are ignored.
 */
export function parseDnsQuery(msg: Uint8Array): DnsQuery {
  if (msg.length < DNS_HEADER_BYTES) throw new DnsFormatError(`${msg.length}-byte message is shorter than a DNS header`, undefined, undefined, undefined);
  const view = Buffer.from(msg.buffer, msg.byteOffset, msg.byteLength);
  const id = view.readUInt16BE(0);
  const flags = view.readUInt16BE(2);
  if (flags & FLAG_QR) throw new DnsFormatError('message is a response, not a query', id, flags, undefined);
  const opcode = (flags >> 11) & 0xf;
  if (opcode !== 0) throw new DnsFormatError(`opcode ${opcode} is not QUERY`, id, flags, DNS_RCODE.NOTIMP);
  const qdcount = view.readUInt16BE(4);
  if (qdcount !== 1) throw new DnsFormatError(`${qdcount} questions (exactly one supported)`, id, flags, DNS_RCODE.FORMERR);
  let name: string;
  let next: number;
  try {
    ({ name, next } = readName(msg, DNS_HEADER_BYTES, false));
  } catch (err) {
    throw new DnsFormatError(`bad question name: ${(err as Error).message}`, id, flags, DNS_RCODE.FORMERR);
  }
  if (next + 4 > msg.length) throw new DnsFormatError('question without type and class', id, flags, DNS_RCODE.FORMERR);
  return { id, flags, question: { name, type: view.readUInt16BE(next), class: view.readUInt16BE(next + 2) } };
}

function header(id: number, flags: number, qd: number, an: number): Buffer {
  const h = Buffer.alloc(DNS_HEADER_BYTES);
  h.writeUInt16BE(id, 0);
  h.writeUInt16BE(flags, 2);
  h.writeUInt16BE(qd, 4);
  h.writeUInt16BE(an, 6);
  return h;
}

function questionBytes(q: DnsQuestion): Buffer {
  const tail = Buffer.alloc(4);
  tail.writeUInt16BE(q.type, 0);
  tail.writeUInt16BE(q.class, 2);
  return Buffer.concat([encodeName(q.name), tail]);
}

function ipv4Bytes(ip: string): Buffer {
  if (net.isIPv4(ip)) return Buffer.from(ip.split('.').map(Number));
  throw new TypeError(`not an IPv4 address: ${ip}`);
}

/** A response to `query`: rcode, and at most one A record (name compressed to the question). */
export function buildDnsResponse(query: { id: number; flags: number; question?: DnsQuestion }, rcode: number, a?: { ip: string; ttl?: number }): Buffer {
  const flags = FLAG_QR | FLAG_AA | (query.flags & FLAG_RD) | (rcode & 0xf);
  const parts = [header(query.id, flags, query.question ? 1 : 0, a ? 1 : 0)];
  if (query.question) parts.push(questionBytes(query.question));
  if (a) {
    if (!query.question) throw new TypeError('an answer needs the question');
    const rr = Buffer.alloc(12);
    rr.writeUInt16BE(0xc000 | DNS_HEADER_BYTES, 0); // pointer to the question's name
    rr.writeUInt16BE(DNS_TYPE_A, 2);
    rr.writeUInt16BE(DNS_CLASS_IN, 4);
    rr.writeUInt32BE(a.ttl ?? 30, 6);
    rr.writeUInt16BE(4, 10);
    parts.push(rr, ipv4Bytes(a.ip));
  }
  return Buffer.concat(parts);
}

/** A recursion-desired query with one question (what a stub resolver sends). */
export function buildDnsQuery(id: number, name: string, type = DNS_TYPE_A): Buffer {
  return Buffer.concat([header(id & 0xffff, FLAG_RD, 1, 0), questionBytes({ name, type, class: DNS_CLASS_IN })]);
}

/** Parses a response (for clients): header, the question if any, and the answer records. */
export function parseDnsResponse(msg: Uint8Array): DnsResponse {
  if (msg.length < DNS_HEADER_BYTES) throw new Error(`${msg.length}-byte message is shorter than a DNS header`);
  const view = Buffer.from(msg.buffer, msg.byteOffset, msg.byteLength);
  const id = view.readUInt16BE(0);
  const flags = view.readUInt16BE(2);
  if (!(flags & FLAG_QR)) throw new Error('message is a query, not a response');
  const qdcount = view.readUInt16BE(4);
  const ancount = view.readUInt16BE(6);
  if (qdcount > 1) throw new Error(`${qdcount} questions in a response`);
  let pos = DNS_HEADER_BYTES;
  let question: DnsQuestion | undefined;
  if (qdcount === 1) {
    const { name, next } = readName(msg, pos, true);
    if (next + 4 > msg.length) throw new Error('truncated question');
    question = { name, type: view.readUInt16BE(next), class: view.readUInt16BE(next + 2) };
    pos = next + 4;
  }
  const answers: DnsAnswer[] = [];
  for (let i = 0; i < ancount; i++) {
    const { name, next } = readName(msg, pos, true);
    if (next + 10 > msg.length) throw new Error('truncated resource record');
    const type = view.readUInt16BE(next);
    const rdlen = view.readUInt16BE(next + 8);
    const start = next + 10;
    if (start + rdlen > msg.length) throw new Error('truncated rdata');
    const rdata = view.subarray(start, start + rdlen);
    answers.push({
      name,
      type,
      class: view.readUInt16BE(next + 2),
      ttl: view.readUInt32BE(next + 4),
      data: type === DNS_TYPE_A && rdlen === 4 ? [...rdata].join('.') : rdata.toString('hex'),
    });
    pos = start + rdlen;
  }
  return { id, flags, rcode: flags & 0xf, truncated: (flags & FLAG_TC) !== 0, question, answers };
}

export interface DnsVerdict {
  /** What to send back; undefined = drop silently. */
  response: Buffer | undefined;
  name?: string;
  /** The address answered, or the rcode name (NXDOMAIN, FORMERR, ...), or NODATA. */
  answer: string;
}

/**
 * The stand-in's resolver: A queries for a name under `suffix` found in `records` get that
 * address; a known name asked for another type gets NOERROR without answers (NODATA); every
 * other name gets NXDOMAIN. Malformed queries get FORMERR (or nothing, see parseDnsQuery).
 */
export function answerDnsQuery(msg: Uint8Array, records: ReadonlyMap<string, string>, suffix = '.demo'): DnsVerdict {
  let query: DnsQuery;
  try {
    query = parseDnsQuery(msg);
  } catch (err) {
    const e = err as DnsFormatError;
    if (e.rcode === undefined || e.id === undefined || e.flags === undefined) return { response: undefined, answer: 'dropped' };
    return { response: buildDnsResponse({ id: e.id, flags: e.flags }, e.rcode), answer: rcodeName(e.rcode) };
  }
  const { question } = query;
  const key = question.name.toLowerCase();
  const ip = key.endsWith(suffix.toLowerCase()) ? records.get(key) : undefined;
  if (ip === undefined || question.class !== DNS_CLASS_IN) {
    return { response: buildDnsResponse(query, DNS_RCODE.NXDOMAIN), name: question.name, answer: 'NXDOMAIN' };
  }
  if (question.type !== DNS_TYPE_A) return { response: buildDnsResponse(query, DNS_RCODE.NOERROR), name: question.name, answer: 'NODATA' };
  return { response: buildDnsResponse(query, DNS_RCODE.NOERROR, { ip }), name: question.name, answer: ip };
}

// ---------------------------------------------------------------------------------------------
// The stand-in
// ---------------------------------------------------------------------------------------------

export interface StandInEvent {
  kind: 'outbound' | 'inbound' | 'dns';
  /** The pod's workload name (its UID when the name is empty). */
  pod: string;
  uid: string;
  /** The stand-in listener that took it: proof that the rules sent it there. */
  listener: string;
  /** ip:port of the peer as the listener saw it. */
  from: string;
  /**
   * ip:port the client really addressed (SO_ORIGINAL_DST). Unknown ('unknown') for DNS over
   * UDP: reading it needs recvmsg with IP_RECVORIGDSTADDR, which Node's dgram does not expose.
   */
  originalDst: string;
  /** Inbound: the original client IP the upstream connection was bound to. */
  clientIp?: string;
  /** ip:port the upstream connection left from (inside the pod netns, mark 0x539). */
  upstreamFrom?: string;
  name?: string;
  answer?: string;
  transport?: 'udp' | 'tcp';
  /** Set when the upstream connection (or the lookup of the original destination) failed. */
  error?: string;
  at: Date;
}

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
  /** name → IPv4 answered for A queries of names ending in `dnsSuffix`. */
  dnsRecords?: Record<string, string> | ReadonlyMap<string, string>;
  /** Default '.demo'. */
  dnsSuffix?: string;
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
  /** Kept in `events` (oldest dropped first). Default 10 000. */
  maxEvents?: number;
}

const ACK_WRITE_MS = 5_000;
const HELLO_WRITE_MS = 5_000;
const CLOSE_WAIT_MS = 3_000;
const DNS_TCP_IDLE_MS = 10_000;
const RELAY_IDLE_MS = 120_000;
const LISTEN_BACKLOG = 128;


/**
 * The kernel fd behind an accepted net.Socket. `_handle` is Node's internal TCPWrap and `fd` its
 * getter of libuv's uv_fileno(): undocumented, but stable on POSIX for years, and the only way
 * to call getsockopt(SO_ORIGINAL_DST) (raw.originalDestination) on a socket Node accepted. The
 * fd stays owned by Node; it is only read here, synchronously, while the socket is open.
 */
function handleFd(sock: net.Socket): number {
  const fd = (sock as unknown as { _handle?: { fd?: unknown } })._handle?.fd;
  if (typeof fd !== 'number' || fd < 0) throw new Error('accepted socket has no fd (already closed?)');
  return fd;
}

function unmapped(address: string | undefined): string {
  const a = address ?? '';
  return a.startsWith('::ffff:') && net.isIPv4(a.slice(7)) ? a.slice(7) : a;
}

function hostPort(address: string, port: number | undefined): string {
  return address.includes(':') ? `[${address}]:${port ?? 0}` : `${address}:${port ?? 0}`;
}

/** Both directions, half-closes passed on; an error or a close on one side ends the other. */
function relay(a: net.Socket, b: net.Socket): void {
  a.pipe(b);
  b.pipe(a);
  const kill = (): void => {
    a.destroy();
    b.destroy();
  };
  a.on('error', kill);
  b.on('error', kill);
  a.on('close', () => (b.destroyed ? undefined : b.end()));
  b.on('close', () => (a.destroyed ? undefined : a.end()));
  a.setTimeout(RELAY_IDLE_MS, kill);
  b.setTimeout(RELAY_IDLE_MS, kill);
}

interface ProxyContext {
  addon: NetAddon;
  raw: RawAddon;
  records: () => ReadonlyMap<string, string>;
  dnsSuffix: string;
  upstreamTimeoutMs: number;
  emit: (event: Omit<StandInEvent, 'at'>) => void;
  log: (line: string) => void;
}

const LISTENERS = {
  dnsUdp: `127.0.0.1:${ZTUNNEL_DNS_PORT}`,
  dnsTcp: `127.0.0.1:${ZTUNNEL_DNS_PORT}`,
  inbound: `0.0.0.0:${ZTUNNEL_INBOUND_PLAINTEXT_PORT}`,
  outbound: `0.0.0.0:${ZTUNNEL_OUTBOUND_PORT}`,
};

/** One pod's proxy: the four in-pod sockets, the relayed connections, the netns fd. */
class PodProxy {
  readonly #servers: net.Server[] = [];
  readonly #udp: dgram.Socket[] = [];
  readonly #conns = new Set<net.Socket>();
  readonly #inflight = new Set<Promise<unknown>>();
  #closing: Promise<void> | undefined;
  readonly since = new Date();

  private constructor(
    readonly uid: string,
    readonly info: WorkloadInfo,
    readonly netns: NetnsHandle,
    private readonly ctx: ProxyContext,
  ) {}

  get label(): string {
    return this.info.name || this.uid;
  }

  get closing(): boolean {
    return this.#closing !== undefined;
  }

  /**
   * Binds DNS first, then 15006, then 15001 (ztunnel's order) in ONE addon job, so a failed
   * bind leaves nothing behind (the addon closes the fds of the earlier steps). Does not own
   * `netns` on failure: the caller keeps it (ztunnel's pending proxies keep their netns).
   */
  static async start(uid: string, info: WorkloadInfo, netns: NetnsHandle, ctx: ProxyContext): Promise<PodProxy> {
    const common = { family: 4, mark: INPOD_MARK, reusePort: true } as const;
    const steps = [
      { op: 'socket', type: 'udp', ...common, bindAddress: '127.0.0.1', bindPort: ZTUNNEL_DNS_PORT },
      { op: 'socket', type: 'tcp', ...common, bindAddress: '127.0.0.1', bindPort: ZTUNNEL_DNS_PORT, listen: LISTEN_BACKLOG },
      { op: 'socket', type: 'tcp', ...common, bindAddress: '0.0.0.0', bindPort: ZTUNNEL_INBOUND_PLAINTEXT_PORT, listen: LISTEN_BACKLOG },
      { op: 'socket', type: 'tcp', ...common, bindAddress: '0.0.0.0', bindPort: ZTUNNEL_OUTBOUND_PORT, listen: LISTEN_BACKLOG },
    ] as const satisfies readonly SocketStep[];
    const [dnsUdp, dnsTcp, inbound, outbound] = (await ctx.addon.run(netns, steps)).map((r) => r.fd) as [number, number, number, number];
    const proxy = new PodProxy(uid, info, netns, ctx);
    const unadopted = new Set([dnsUdp, dnsTcp, inbound, outbound]);
    try {
      // Bound and listening already (the kernel queues connections): adopt all four at once.
      const adopted = await Promise.allSettled([
        proxy.#adoptUdp(dnsUdp, unadopted),
        proxy.#adoptTcp(dnsTcp, unadopted, false, (s) => proxy.#onDnsTcp(s)),
        proxy.#adoptTcp(inbound, unadopted, true, (s) => void proxy.#onCaptured(s, 'inbound')),
        proxy.#adoptTcp(outbound, unadopted, true, (s) => void proxy.#onCaptured(s, 'outbound')),
      ]);
      const failed = adopted.find((r): r is PromiseRejectedResult => r.status === 'rejected');
      if (failed) throw failed.reason;
    } catch (err) {
      for (const fd of unadopted) closeSync(fd);
      await proxy.#closeSockets();
      throw err;
    }
    return proxy;
  }

  listeners(): string[] {
    return [`udp ${LISTENERS.dnsUdp}`, `tcp ${LISTENERS.dnsTcp}`, `tcp ${LISTENERS.inbound}`, `tcp ${LISTENERS.outbound}`];
  }

  /**
   * Closes listeners and relayed connections, then the netns fd. It first waits for in-flight
   * upstream connects (bounded by their own deadline): the addon runs each job on its own dup
   * of the netns fd, so this is not about fd reuse, but every late fd is closed (#upstreamFd)
   * before close() resolves, so an fd count taken afterwards is exact.
   */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      await this.#closeSockets();
      await withDeadline(Promise.allSettled([...this.#inflight]), this.ctx.upstreamTimeoutMs + CLOSE_WAIT_MS, `pod ${this.label}: in-flight connects`).catch(() => undefined);
      this.netns.close();
    })();
    return this.#closing;
  }

  async #closeSockets(): Promise<void> {
    for (const c of this.#conns) c.destroy();
    this.#conns.clear();
    const closing: Array<Promise<void>> = [];
    for (const s of this.#servers.splice(0)) closing.push(new Promise((resolve) => s.close(() => resolve())));
    for (const u of this.#udp.splice(0)) closing.push(new Promise((resolve) => u.close(() => resolve())));
    await withDeadline(Promise.all(closing), CLOSE_WAIT_MS, `pod ${this.label}: closing listeners`).catch(() => undefined);
  }

  async #adoptUdp(fd: number, unadopted: Set<number>): Promise<void> {
    const sock = dgram.createSocket({ type: 'udp4' });
    const ready = new Promise<void>((resolve, reject) => {
      sock.once('listening', resolve);
      sock.once('error', reject);
    });
    sock.bind({ fd }); // throws (fd still ours) when it is not a UDP socket
    unadopted.delete(fd);
    this.#udp.push(sock);
    await withDeadline(ready, CLOSE_WAIT_MS, 'adopting the DNS UDP socket');
    sock.on('error', (err) => this.ctx.log(`pod ${this.label}: dns udp error: ${err.message}`));
    sock.on('message', (msg, rinfo) => this.#onDnsUdp(sock, msg, rinfo));
  }

  async #adoptTcp(fd: number, unadopted: Set<number>, pause: boolean, onConnection: (s: net.Socket) => void): Promise<void> {
    // allowHalfOpen: a client's FIN must not cut the answer that is still on its way back.
    const server = net.createServer({ allowHalfOpen: true, pauseOnConnect: pause });
    const ready = new Promise<void>((resolve, reject) => {
      server.once('listening', resolve);
      server.once('error', reject);
    });
    server.listen({ fd });
    unadopted.delete(fd);
    this.#servers.push(server);
    await withDeadline(ready, CLOSE_WAIT_MS, `adopting listening fd ${fd}`);
    server.on('error', (err) => this.ctx.log(`pod ${this.label}: listener error: ${err.message}`));
    server.on('connection', (sock) => {
      if (this.closing) return void sock.destroy();
      this.#track(sock);
      onConnection(sock);
    });
  }

  #track(sock: net.Socket): void {
    this.#conns.add(sock);
    sock.on('close', () => this.#conns.delete(sock));
    sock.on('error', () => undefined);
  }

  #records(): ReadonlyMap<string, string> {
    return this.ctx.records();
  }

  #onDnsUdp(sock: dgram.Socket, msg: Buffer, rinfo: dgram.RemoteInfo): void {
    const verdict = answerDnsQuery(msg, this.#records(), this.ctx.dnsSuffix);
    if (verdict.response) sock.send(verdict.response, rinfo.port, rinfo.address, () => undefined);
    this.ctx.emit({
      kind: 'dns',
      pod: this.label,
      uid: this.uid,
      listener: `udp ${LISTENERS.dnsUdp}`,
      from: hostPort(rinfo.address, rinfo.port),
      originalDst: 'unknown',
      ...(verdict.name !== undefined ? { name: verdict.name } : {}),
      answer: verdict.answer,
      transport: 'udp',
    });
  }

  /** DNS over TCP: 2-byte length-prefixed messages, any number per connection (RFC 7766). */
  #onDnsTcp(sock: net.Socket): void {
    let originalDst: string;
    try {
      const dst = this.ctx.raw.originalDestination(handleFd(sock));
      originalDst = hostPort(dst.address, dst.port);
    } catch {
      originalDst = hostPort(sock.localAddress ?? '', sock.localPort); // reached directly, not redirected
    }
    const from = hostPort(unmapped(sock.remoteAddress), sock.remotePort);
    let buffered = Buffer.alloc(0);
    sock.setTimeout(DNS_TCP_IDLE_MS, () => sock.destroy());
    sock.on('end', () => sock.end());
    sock.on('data', (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      while (buffered.length >= 2) {
        const len = buffered.readUInt16BE(0);
        if (buffered.length < 2 + len) return;
        const msg = buffered.subarray(2, 2 + len);
        buffered = buffered.subarray(2 + len);
        const verdict = answerDnsQuery(msg, this.#records(), this.ctx.dnsSuffix);
        if (verdict.response) {
          const prefix = Buffer.alloc(2);
          prefix.writeUInt16BE(verdict.response.length, 0);
          sock.write(Buffer.concat([prefix, verdict.response]));
        }
        this.ctx.emit({
          kind: 'dns',
          pod: this.label,
          uid: this.uid,
          listener: `tcp ${LISTENERS.dnsTcp}`,
          from,
          originalDst,
          ...(verdict.name !== undefined ? { name: verdict.name } : {}),
          answer: verdict.answer,
          transport: 'tcp',
        });
        if (!verdict.response) return void sock.destroy(); // not worth talking to
      }
    });
  }

  /**
   * 15001 (outbound) and 15006 (inbound): read where the client was going, connect there from
   * the pod netns with ztunnel's mark (inbound: bound to the client's own IP with
   * IP_TRANSPARENT, so the app sees the original client), then relay bytes both ways.
   */
  async #onCaptured(sock: net.Socket, kind: 'outbound' | 'inbound'): Promise<void> {
    const listener = `tcp ${kind === 'outbound' ? LISTENERS.outbound : LISTENERS.inbound}`;
    const from = hostPort(unmapped(sock.remoteAddress), sock.remotePort);
    const clientIp = unmapped(sock.remoteAddress);
    const base = { kind, pod: this.label, uid: this.uid, listener, from, ...(kind === 'inbound' ? { clientIp } : {}) };
    let dst: { address: string; port: number };
    try {
      dst = this.ctx.raw.originalDestination(handleFd(sock));
    } catch (err) {
      this.ctx.emit({ ...base, originalDst: 'unknown', error: `SO_ORIGINAL_DST: ${(err as Error).message}` });
      return void sock.destroy();
    }
    const originalDst = hostPort(dst.address, dst.port);
    // Not redirected (someone connected to the listener itself): relaying would loop forever.
    if (dst.port === sock.localPort && (dst.address === unmapped(sock.localAddress) || dst.address === '0.0.0.0')) {
      this.ctx.emit({ ...base, originalDst, error: 'connection was not redirected (original destination is the listener)' });
      return void sock.destroy();
    }
    const step: SocketStep = {
      op: 'socket',
      family: dst.address.includes(':') ? 6 : 4,
      type: 'tcp',
      mark: INPOD_MARK,
      connectAddress: dst.address,
      connectPort: dst.port,
      timeoutMs: this.ctx.upstreamTimeoutMs,
      ...(kind === 'inbound' ? { transparent: true, bindAddress: clientIp, bindPort: 0 } : {}),
    };
    let upstream: net.Socket;
    try {
      const fd = await this.#upstreamFd(step);
      upstream = new net.Socket({ fd, readable: true, writable: true, allowHalfOpen: true });
    } catch (err) {
      this.ctx.emit({ ...base, originalDst, error: `upstream connect: ${(err as Error).message}` });
      return void sock.destroy();
    }
    if (sock.destroyed || this.closing) {
      upstream.destroy();
      return void sock.destroy();
    }
    this.#track(upstream);
    this.ctx.emit({ ...base, originalDst, upstreamFrom: hostPort(unmapped(upstream.localAddress), upstream.localPort) });
    relay(sock, upstream);
  }

  /** Runs the connect on an addon thread inside the pod; an fd arriving after close is closed. */
  async #upstreamFd(step: SocketStep): Promise<number> {
    if (this.closing || this.netns.closed) throw new Error('pod proxy is closing');
    const job = this.ctx.addon.run(this.netns, [step] as const).then(([r]) => {
      if (this.closing) {
        closeSync(r.fd);
        throw new Error('pod proxy closed during the connect');
      }
      return r.fd;
    });
    this.#inflight.add(job);
    try {
      return await job;
    } finally {
      this.#inflight.delete(job);
    }
  }
}

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
      out.set(uid, { uid, ...p.info, netns: { ino: p.netns.ino, dev: p.netns.dev }, state: 'running', listeners: p.listeners(), since: p.since });
    }
    for (const [uid, p] of this.#pending) {
      out.set(uid, { uid, ...p.info, netns: { ino: p.netns.ino, dev: p.netns.dev }, state: 'pending', error: p.error, listeners: [], since: p.since });
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
    const protocolError = (text: string): Nack => ({ error: `failure to process message : ProtocolError("${text}")`, end: true, fatal: true });
    switch (requestKind(req)) {
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
    for (const [uid, p] of [...this.#pending]) {
      this.#pending.delete(uid);
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
      dnsSuffix: this.#opts.dnsSuffix ?? '.demo',
      upstreamTimeoutMs: this.#opts.upstreamConnectTimeoutMs ?? 10_000,
      emit: (e) => this.#emit(e),
      log: this.#log,
    };
  }

  #emit(partial: Omit<StandInEvent, 'at'>): void {
    const event: StandInEvent = { ...partial, at: new Date() };
    this.events.push(event);
    const max = this.#opts.maxEvents ?? 10_000;
    if (this.events.length > max) this.events.splice(0, this.events.length - max);
    const detail = event.kind === 'dns'
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
