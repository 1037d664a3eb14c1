// Real TCP traffic for privileged tests: sockets are made by the addon inside a namespace
// (a socket keeps the namespace it was born in) and then adopted by Node, so the JS thread
// never leaves its own namespace. Every wait is bounded; every socket is closed on cleanup.
import { closeSync } from 'node:fs';
import net from 'node:net';

import { socketInNetns, type NetAddon, type NetnsHandle } from '../../src/addon/net-addon.js';
import { withDeadline } from '../../src/util/deadline.js';
import type { Family, SocketStep } from '../../src/addon/steps.js';

/** Deadline of one connect (on the addon thread) and of one request/reply exchange. */
export const TRAFFIC_TIMEOUT_MS = 3_000;

/** Rejects with a clear message when `promise` does not settle within `ms`. */
export const withTimeout = withDeadline;

function addonSocket(addon: NetAddon, ns: NetnsHandle, step: SocketStep, what: string): Promise<number> {
  return socketInNetns(addon, ns, { timeoutMs: TRAFFIC_TIMEOUT_MS, ...step }, what);
}

export interface AcceptedConnection {
  localAddress: string;
  localPort: number;
  remoteAddress: string;
  remotePort: number;
  /** Everything the client sent before its newline. */
  received: string;
}

/**
 * A Node server on a listening fd made by the addon. Each connection gets one line in and
 * answers `<label> <line>` before closing, so a client learns who really accepted it.
 */
export class TrafficServer {
  readonly accepted: AcceptedConnection[] = [];
  readonly #sockets = new Set<net.Socket>();
  readonly #waiters = new Set<() => void>();

  private constructor(
    readonly label: string,
    private readonly server: net.Server,
  ) {
    server.on('connection', (sock) => this.#onConnection(sock));
    server.on('error', () => undefined);
  }

  /** Creates the listening socket in `ns` through the addon and adopts it. */
  static async listen(
    addon: NetAddon,
    ns: NetnsHandle,
    label: string,
    opts: { family?: Family; address: string; port: number; mark?: number },
  ): Promise<TrafficServer> {
    const step: SocketStep = {
      op: 'socket',
      family: opts.family ?? 4,
      type: 'tcp',
      bindAddress: opts.address,
      bindPort: opts.port,
      listen: 64,
      ...(opts.mark === undefined ? {} : { mark: opts.mark }),
    };
    const fd = await addonSocket(addon, ns, step, `${label}: listening socket`);
    return TrafficServer.adopt(label, fd);
  }

  static async adopt(label: string, fd: number): Promise<TrafficServer> {
    const server = net.createServer();
    const traffic = new TrafficServer(label, server);
    const listening = new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.once('listening', () => {
        server.off('error', reject);
        resolve();
      });
    });
    try {
      server.listen({ fd });
    } catch (err) {
      // Thrown before libuv took the fd (e.g. not a TCP socket): it is still ours to close.
      closeSync(fd);
      throw err;
    }
    try {
      await withTimeout(listening, TRAFFIC_TIMEOUT_MS, `${label}: adopting listening fd ${fd}`);
    } catch (err) {
      await traffic.close();
      throw err;
    }
    return traffic;
  }

  address(): net.AddressInfo {
    return this.server.address() as net.AddressInfo;
  }

  /** The connection that sent `token`, once its line has arrived. */
  waitFor(token: string, ms = TRAFFIC_TIMEOUT_MS): Promise<AcceptedConnection> {
    const find = (): AcceptedConnection | undefined => this.accepted.find((c) => c.received === token);
    const found = find();
    if (found) return Promise.resolve(found);
    let waiter: (() => void) | undefined;
    const arrived = new Promise<AcceptedConnection>((resolve) => {
      waiter = () => {
        const c = find();
        if (c) resolve(c);
      };
      this.#waiters.add(waiter);
    });
    return withTimeout(arrived, ms, `${this.label}: waiting for ${token}`).finally(() => {
      if (waiter) this.#waiters.delete(waiter);
    });
  }

  tokens(): string[] {
    return this.accepted.map((c) => c.received);
  }

  /** Closes the listener and every accepted connection. Never waits longer than the timeout. */
  async close(): Promise<void> {
    for (const sock of this.#sockets) sock.destroy();
    this.#sockets.clear();
    if (!this.server.listening) return;
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    await withTimeout(closed, TRAFFIC_TIMEOUT_MS, `${this.label}: close`).catch(() => undefined);
  }

  #onConnection(sock: net.Socket): void {
    this.#sockets.add(sock);
    sock.on('close', () => this.#sockets.delete(sock));
    sock.on('error', () => undefined);
    sock.setTimeout(TRAFFIC_TIMEOUT_MS * 2, () => sock.destroy());
    const conn: AcceptedConnection = {
      localAddress: sock.localAddress ?? '',
      localPort: sock.localPort ?? 0,
      remoteAddress: sock.remoteAddress ?? '',
      remotePort: sock.remotePort ?? 0,
      received: '',
    };
    this.accepted.push(conn);
    let buffered = '';
    sock.setEncoding('utf8');
    sock.on('data', (chunk: string) => {
      buffered += chunk;
      const nl = buffered.indexOf('\n');
      if (nl < 0) return;
      conn.received = buffered.slice(0, nl);
      sock.end(`${this.label} ${conn.received}\n`);
      for (const w of [...this.#waiters]) w();
    });
  }
}

const clients = new Set<net.Socket>();

export interface ExchangeResult {
  /** The first line the server answered: `<server label> <token>`. */
  reply: string;
  /** The client's view of the connection (what the application sees). */
  localAddress: string;
  localPort: number;
  remoteAddress: string;
  remotePort: number;
}

/**
 * Connects from inside `ns` through the addon (optionally with SO_MARK), adopts the connected
 * fd as a net.Socket, sends `token` and returns the server's answer. Rejects with the addon's
 * system error (ECONNREFUSED, ETIMEDOUT, ...) when the connect itself fails.
 */
export async function exchangeFrom(
  addon: NetAddon,
  ns: NetnsHandle,
  opts: { family?: Family; address: string; port: number; mark?: number; token: string },
): Promise<ExchangeResult> {
  const step: SocketStep = {
    op: 'socket',
    family: opts.family ?? 4,
    type: 'tcp',
    connectAddress: opts.address,
    connectPort: opts.port,
    timeoutMs: TRAFFIC_TIMEOUT_MS,
    ...(opts.mark === undefined ? {} : { mark: opts.mark }),
  };
  const fd = await addonSocket(addon, ns, step, `connect to ${opts.address}:${opts.port}`);
  let sock: net.Socket;
  try {
    sock = new net.Socket({ fd, readable: true, writable: true });
  } catch (err) {
    closeSync(fd);
    throw err;
  }
  clients.add(sock);
  sock.on('close', () => clients.delete(sock));
  const view = {
    localAddress: sock.localAddress ?? '',
    localPort: sock.localPort ?? 0,
    remoteAddress: sock.remoteAddress ?? '',
    remotePort: sock.remotePort ?? 0,
  };
  const replied = new Promise<string>((resolve, reject) => {
    let data = '';
    sock.setEncoding('utf8');
    sock.on('data', (chunk: string) => {
      data += chunk;
    });
    sock.once('end', () => resolve(data));
    sock.once('error', reject);
  });
  sock.write(`${opts.token}\n`);
  try {
    const data = await withTimeout(replied, TRAFFIC_TIMEOUT_MS, `reply on ${opts.address}:${opts.port}`);
    return { reply: data.split('\n')[0] ?? '', ...view };
  } finally {
    sock.destroy();
  }
}

/** Destroys every client socket still open (after a failed or timed-out exchange). */
export function destroyTrafficClients(): void {
  for (const sock of clients) sock.destroy();
  clients.clear();
}

let tokenCounter = 0;
/** A payload no other connection of this process sends. */
export function uniqueToken(tag: string): string {
  tokenCounter += 1;
  return `${tag}-${process.pid}-${tokenCounter}-${Math.random().toString(36).slice(2, 8)}`;
}

export interface ConntrackTuple {
  src: string;
  dst: string;
  sport: number;
  dport: number;
}

export interface ConntrackEntry {
  protocol: string;
  /** The connection as the client sent it (before NAT): its `dst` is the original destination. */
  original: ConntrackTuple;
  /** The connection as the reply comes back (after NAT): its `src` is where it really went. */
  reply: ConntrackTuple;
  line: string;
}

/**
 * Parses /proc/net/nf_conntrack. Each line holds two tuples (original, then reply) of
 * src=/dst=/sport=/dport=, possibly with other key=value fields (packets=, bytes=) between.
 */
export function parseConntrack(text: string): ConntrackEntry[] {
  const entries: ConntrackEntry[] = [];
  for (const line of text.split('\n')) {
    const words = line.trim().split(/\s+/);
    const protocol = words[2];
    if (protocol === undefined) continue;
    const tuples: Partial<Record<keyof ConntrackTuple, string>>[] = [];
    for (const word of words) {
      const m = /^(src|dst|sport|dport)=(.+)$/.exec(word);
      if (!m) continue;
      const key = m[1] as keyof ConntrackTuple;
      let current = tuples[tuples.length - 1];
      if (current === undefined || key in current) {
        current = {};
        tuples.push(current);
      }
      current[key] = m[2];
    }
    const [o, r] = tuples;
    if (!o?.src || !o.dst || !o.sport || !o.dport || !r?.src || !r.dst || !r.sport || !r.dport) continue;
    entries.push({
      protocol,
      original: { src: o.src, dst: o.dst, sport: Number(o.sport), dport: Number(o.dport) },
      reply: { src: r.src, dst: r.dst, sport: Number(r.sport), dport: Number(r.dport) },
      line,
    });
  }
  return entries;
}
