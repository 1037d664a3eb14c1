// The demo's workloads and clients: a TCP echo app that tells each client the peer address it
// saw, a client that talks to it, and a DNS client (UDP or TCP). Every socket is made by the
// addon inside the pod namespace (no mark: these are the application's sockets, the ones the
// rules capture) and then adopted by Node; the JS thread never changes namespace. Every wait is
// bounded and every socket is closed, also on failure.
import dgram from 'node:dgram';
import { closeSync } from 'node:fs';
import net from 'node:net';

import { socketInNetns, type NetAddon, type NetnsHandle } from '../addon/net-addon.js';
import { withDeadline } from '../util/deadline.js';
import type { SocketStep } from '../addon/steps.js';
import { buildDnsQuery, DNS_TYPE_A, parseDnsResponse, type DnsResponse } from './ztunnel/dns.js';

export const DEMO_APP_PORT = 8080;
const DEFAULT_TIMEOUT_MS = 5_000;

function socketIn(addon: NetAddon, ns: NetnsHandle, step: SocketStep, what: string): Promise<number> {
  return socketInNetns(addon, ns, { timeoutMs: DEFAULT_TIMEOUT_MS, ...step }, what);
}

function unmapped(address: string | undefined): string {
  const a = address ?? '';
  return a.startsWith('::ffff:') && net.isIPv4(a.slice(7)) ? a.slice(7) : a;
}

export interface EchoPeer {
  /** The client address as the app saw it: with the stand-in, the ORIGINAL client's IP. */
  remoteAddress: string;
  remotePort: number;
  localAddress: string;
  localPort: number;
  at: Date;
}

/**
 * A TCP echo app. Each connection first gets one line, `<label> saw <ip>:<port>\n` (the peer
 * address the app's accept() returned), and then every byte it sends, echoed back.
 */
export class EchoApp {
  readonly peers: EchoPeer[] = [];
  readonly #sockets = new Set<net.Socket>();

  private constructor(
    readonly label: string,
    private readonly server: net.Server,
  ) {
    server.on('error', () => undefined);
    server.on('connection', (sock) => this.#onConnection(sock));
  }

  /** Listens in `ns` (socket made there by the addon, no mark) on address:port. */
  static async start(addon: NetAddon, ns: NetnsHandle, opts: { label: string; address?: string; port?: number }): Promise<EchoApp> {
    const address = opts.address ?? '0.0.0.0';
    const port = opts.port ?? DEMO_APP_PORT;
    const fd = await socketIn(
      addon,
      ns,
      {
        op: 'socket',
        family: address.includes(':') ? 6 : 4,
        type: 'tcp',
        bindAddress: address,
        bindPort: port,
        listen: 128,
      },
      `${opts.label}: listen on ${address}:${port}`,
    );
    const server = net.createServer({ allowHalfOpen: true });
    const app = new EchoApp(opts.label, server);
    const listening = new Promise<void>((resolve, reject) => {
      server.once('listening', resolve);
      server.once('error', reject);
    });
    try {
      server.listen({ fd });
    } catch (err) {
      closeSync(fd); // refused before libuv took it
      throw err;
    }
    try {
      await withDeadline(listening, DEFAULT_TIMEOUT_MS, `${opts.label}: adopting fd ${fd}`);
    } catch (err) {
      await app.close();
      throw err;
    }
    return app;
  }

  address(): net.AddressInfo {
    return this.server.address() as net.AddressInfo;
  }

  /** Closes the listener and every connection; bounded. */
  async close(): Promise<void> {
    for (const s of this.#sockets) s.destroy();
    this.#sockets.clear();
    await withDeadline(
      new Promise<void>((resolve) => this.server.close(() => resolve())),
      DEFAULT_TIMEOUT_MS,
      `${this.label}: close`,
    ).catch(() => undefined);
  }

  #onConnection(sock: net.Socket): void {
    this.#sockets.add(sock);
    sock.on('close', () => this.#sockets.delete(sock));
    sock.on('error', () => undefined);
    sock.setTimeout(30_000, () => sock.destroy());
    const peer: EchoPeer = {
      remoteAddress: unmapped(sock.remoteAddress),
      remotePort: sock.remotePort ?? 0,
      localAddress: unmapped(sock.localAddress),
      localPort: sock.localPort ?? 0,
      at: new Date(),
    };
    this.peers.push(peer);
    sock.write(`${this.label} saw ${peer.remoteAddress}:${peer.remotePort}\n`);
    sock.pipe(sock); // echo; the client's FIN ends our side after the echo
  }
}

export interface TcpExchange {
  /** The app's first line: `<label> saw <ip>:<port>`. */
  banner: string;
  /** The ip the app saw, parsed from the banner. */
  peerSeen: string;
  /** What came back after the banner (the echo). */
  echoed: string;
  /** The client's own view of the connection (what the application believes). */
  localAddress: string;
  localPort: number;
  remoteAddress: string;
  remotePort: number;
}

/**
 * Connects from inside `ns` (no mark, so the rules capture it) to address:port, sends
 * `payload`, and reads the banner plus the echo of the payload.
 */
export async function tcpExchange(
  addon: NetAddon,
  ns: NetnsHandle,
  opts: { address: string; port: number; payload: string; timeoutMs?: number; mark?: number },
): Promise<TcpExchange> {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const fd = await socketIn(
    addon,
    ns,
    {
      op: 'socket',
      family: opts.address.includes(':') ? 6 : 4,
      type: 'tcp',
      connectAddress: opts.address,
      connectPort: opts.port,
      timeoutMs,
      ...(opts.mark === undefined ? {} : { mark: opts.mark }),
    },
    `connect to ${opts.address}:${opts.port}`,
  );
  let sock: net.Socket;
  try {
    sock = new net.Socket({ fd, readable: true, writable: true, allowHalfOpen: true });
  } catch (err) {
    closeSync(fd);
    throw err;
  }
  const view = {
    localAddress: unmapped(sock.localAddress),
    localPort: sock.localPort ?? 0,
    remoteAddress: unmapped(sock.remoteAddress),
    remotePort: sock.remotePort ?? 0,
  };
  try {
    const text = await withDeadline(
      new Promise<string>((resolve, reject) => {
        let data = '';
        sock.setEncoding('utf8');
        const done = (): void => {
          const nl = data.indexOf('\n');
          if (nl >= 0 && data.length - nl - 1 >= opts.payload.length) resolve(data);
        };
        sock.on('data', (chunk: string) => {
          data += chunk;
          done();
        });
        sock.once('end', () => resolve(data));
        sock.once('error', reject);
        sock.write(opts.payload);
      }),
      timeoutMs,
      `exchange with ${opts.address}:${opts.port}`,
    );
    const nl = text.indexOf('\n');
    const banner = nl >= 0 ? text.slice(0, nl) : text;
    const seen = /saw (\S+):\d+$/.exec(banner)?.[1] ?? '';
    return { banner, peerSeen: seen, echoed: nl >= 0 ? text.slice(nl + 1) : '', ...view };
  } finally {
    sock.destroy();
  }
}

/**
 * One DNS query from inside `ns` to server:port (default 53), over UDP or TCP (2-byte length
 * prefix). With the rules applied, both are redirected to the stand-in's 15053.
 */
export async function dnsQuery(
  addon: NetAddon,
  ns: NetnsHandle,
  opts: { server: string; port?: number; name: string; type?: number; transport: 'udp' | 'tcp'; timeoutMs?: number },
): Promise<DnsResponse> {
  const timeoutMs = opts.timeoutMs ?? 3_000;
  const port = opts.port ?? 53;
  const id = Math.floor(Math.random() * 0x10000);
  const query = buildDnsQuery(id, opts.name, opts.type ?? DNS_TYPE_A);
  const reply =
    opts.transport === 'udp'
      ? await udpRoundTrip(addon, ns, opts.server, port, query, timeoutMs)
      : await tcpRoundTrip(addon, ns, opts.server, port, query, timeoutMs);
  const response = parseDnsResponse(reply);
  if (response.id !== id) throw new Error(`DNS answer id ${response.id} does not match query id ${id}`);
  return response;
}

async function udpRoundTrip(
  addon: NetAddon,
  ns: NetnsHandle,
  server: string,
  port: number,
  query: Buffer,
  timeoutMs: number,
): Promise<Buffer> {
  const family = server.includes(':') ? 6 : 4;
  const fd = await socketIn(
    addon,
    ns,
    { op: 'socket', family, type: 'udp', bindAddress: family === 6 ? '::' : '0.0.0.0', bindPort: 0 },
    'DNS client UDP socket',
  );
  const sock = dgram.createSocket({ type: family === 6 ? 'udp6' : 'udp4' });
  try {
    sock.bind({ fd });
  } catch (err) {
    closeSync(fd);
    throw err;
  }
  try {
    return await withDeadline(
      new Promise<Buffer>((resolve, reject) => {
        sock.once('error', reject);
        sock.on('message', (msg) => resolve(msg));
        sock.send(query, port, server, (err) => (err ? reject(err) : undefined));
      }),
      timeoutMs,
      `DNS over UDP to ${server}:${port}`,
    );
  } finally {
    await new Promise<void>((resolve) => sock.close(() => resolve()));
  }
}

async function tcpRoundTrip(
  addon: NetAddon,
  ns: NetnsHandle,
  server: string,
  port: number,
  query: Buffer,
  timeoutMs: number,
): Promise<Buffer> {
  const fd = await socketIn(
    addon,
    ns,
    {
      op: 'socket',
      family: server.includes(':') ? 6 : 4,
      type: 'tcp',
      connectAddress: server,
      connectPort: port,
      timeoutMs,
    },
    `DNS over TCP: connect to ${server}:${port}`,
  );
  let sock: net.Socket;
  try {
    sock = new net.Socket({ fd, readable: true, writable: true });
  } catch (err) {
    closeSync(fd);
    throw err;
  }
  try {
    return await withDeadline(
      new Promise<Buffer>((resolve, reject) => {
        let buffered = Buffer.alloc(0);
        sock.on('data', (chunk: Buffer) => {
          buffered = Buffer.concat([buffered, chunk]);
          if (buffered.length >= 2 && buffered.length >= 2 + buffered.readUInt16BE(0))
            resolve(buffered.subarray(2, 2 + buffered.readUInt16BE(0)));
        });
        sock.once('end', () => reject(new Error('DNS over TCP: connection closed before a full answer')));
        sock.once('error', reject);
        const prefix = Buffer.alloc(2);
        prefix.writeUInt16BE(query.length, 0);
        sock.write(Buffer.concat([prefix, query]));
      }),
      timeoutMs,
      `DNS over TCP to ${server}:${port}`,
    );
  } finally {
    sock.destroy();
  }
}
