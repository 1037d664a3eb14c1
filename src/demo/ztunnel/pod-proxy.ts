// One pod's proxy in the ztunnel stand-in: the in-pod listeners ztunnel binds
// (docs/zds-protocol.md §3): 15001 outbound, 15006 inbound plaintext, 15053 DNS (UDP + TCP), all
// made INSIDE the pod netns by the addon with SO_MARK 0x539 and SO_REUSEPORT, then adopted by
// Node; a plaintext TCP relay for each captured connection (outbound to the original destination,
// inbound from the original client IP), and the DNS answers.
//
// The JS thread never changes namespace: every socket is born on an addon worker thread that
// setns'd into the pod (a socket keeps the namespace it was created in).
import dgram from 'node:dgram';
import { closeSync } from 'node:fs';
import net from 'node:net';
import type { RawAddon } from '../../addon/binding.js';
import type { NetAddon, NetnsHandle } from '../../addon/net-addon.js';
import type { SocketStep } from '../../addon/steps.js';
import { INPOD_MARK, ZTUNNEL_DNS_PORT, ZTUNNEL_INBOUND_PLAINTEXT_PORT, ZTUNNEL_OUTBOUND_PORT } from '../../rules/constants.js';
import { withDeadline } from '../../util/deadline.js';
import type { WorkloadInfo } from '../../zds/codec.js';
import { answerDnsQuery } from './dns.js';

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

export interface ProxyContext {
  addon: NetAddon;
  raw: RawAddon;
  records: () => ReadonlyMap<string, string>;
  upstreamTimeoutMs: number;
  emit: (event: Omit<StandInEvent, 'at'>) => void;
  log: (line: string) => void;
}

export const LISTENERS = {
  dnsUdp: `127.0.0.1:${ZTUNNEL_DNS_PORT}`,
  dnsTcp: `127.0.0.1:${ZTUNNEL_DNS_PORT}`,
  inbound: `0.0.0.0:${ZTUNNEL_INBOUND_PLAINTEXT_PORT}`,
  outbound: `0.0.0.0:${ZTUNNEL_OUTBOUND_PORT}`,
};

/** One pod's proxy: the four in-pod sockets, the relayed connections, the netns fd. */
export class PodProxy {
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
      await withDeadline(
        Promise.allSettled([...this.#inflight]),
        this.ctx.upstreamTimeoutMs + CLOSE_WAIT_MS,
        `pod ${this.label}: in-flight connects`,
      ).catch(() => undefined);
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
    const verdict = answerDnsQuery(msg, this.#records());
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
        const verdict = answerDnsQuery(msg, this.#records());
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
