// The plugin-event server: HTTP/1.1 over <run dir>/pluginevent.sock, where the istio-cni plugin
// posts CNI ADD/DEL/CHECK. Only root may connect (socket 0600 in a 0750 directory). Replies:
// 200 done, 400 unusable body, 500 with the reason (the plugin fails the sandbox with it).
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { silentLogger, type Logger } from '../ops/log.js';
import { closeServer, listenPrivateSocket } from '../util/http-server.js';
import { ROUTE_ADD, ROUTE_CHECK, ROUTE_DEL, type PluginAddEvent, type PluginDelEvent } from '../cni/protocol.js';

const MAX_BODY_BYTES = 64 * 1024;

export class BadRequest extends Error {}

export interface PluginEventHandlers {
  add(event: PluginAddEvent): Promise<void>;
  del(event: PluginDelEvent): Promise<void>;
  /** Resolves with a problem description, or undefined when the pod is fine. */
  check(event: PluginAddEvent): Promise<string | undefined>;
}

function text(field: unknown, name: string, required: boolean): string {
  if (field === undefined || field === null) {
    if (required) throw new BadRequest(`missing ${name}`);
    return '';
  }
  if (typeof field !== 'string') throw new BadRequest(`${name} must be a string`);
  return field;
}

export function parseAddEvent(body: unknown): PluginAddEvent {
  if (typeof body !== 'object' || body === null) throw new BadRequest('body must be a JSON object');
  const b = body as Record<string, unknown>;
  const ips = b['IPs'] ?? [];
  if (!Array.isArray(ips)) throw new BadRequest('IPs must be an array');
  return {
    Netns: text(b['Netns'], 'Netns', true),
    PodName: text(b['PodName'], 'PodName', true),
    PodNamespace: text(b['PodNamespace'], 'PodNamespace', true),
    PodUID: text(b['PodUID'], 'PodUID', false),
    ContainerID: text(b['ContainerID'], 'ContainerID', false),
    IPs: ips.map((ip: unknown, i) => {
      const address = (ip as { Address?: { IP?: unknown; Mask?: unknown } } | null)?.Address;
      if (typeof address?.IP !== 'string') throw new BadRequest(`IPs[${i}].Address.IP must be a string`);
      const iface = (ip as { Interface?: unknown }).Interface;
      return {
        Interface: typeof iface === 'number' ? iface : null,
        Address: { IP: address.IP, Mask: typeof address.Mask === 'string' ? address.Mask : '' },
        Gateway: typeof (ip as { Gateway?: unknown }).Gateway === 'string' ? ((ip as { Gateway: string }).Gateway) : '',
      };
    }),
  };
}

export function parseDelEvent(body: unknown): PluginDelEvent {
  if (typeof body !== 'object' || body === null) throw new BadRequest('body must be a JSON object');
  const b = body as Record<string, unknown>;
  return {
    Netns: text(b['Netns'], 'Netns', false),
    PodName: text(b['PodName'], 'PodName', true),
    PodNamespace: text(b['PodNamespace'], 'PodNamespace', true),
    PodUID: text(b['PodUID'], 'PodUID', false),
    ContainerID: text(b['ContainerID'], 'ContainerID', false),
  };
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) throw new BadRequest(`body larger than ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk as Buffer);
  }
  const raw = Buffer.concat(chunks).toString('utf8');
  if (raw.trim() === '') throw new BadRequest('empty body');
  try {
    return JSON.parse(raw) as unknown;
  } catch (err) {
    throw new BadRequest(`invalid JSON: ${(err as Error).message}`);
  }
}

/** Called after each request with its route, status and duration (metrics). */
export type RequestObserver = (route: string, status: number, seconds: number) => void;

export class PluginEventServer {
  #server: Server | undefined;
  readonly #log: Logger;
  /** Counts by route and status code. */
  readonly requests = new Map<string, number>();
  #inFlight = 0;
  #drained: Array<() => void> = [];
  onRequest: RequestObserver = () => {};

  constructor(
    private readonly socketPath: string,
    private readonly handlers: PluginEventHandlers,
    log: Logger = silentLogger,
  ) {
    this.#log = log.child({ component: 'plugin-events' });
  }

  async start(): Promise<void> {
    const server = createServer((req, res) => void this.#handle(req, res));
    await listenPrivateSocket(server, this.socketPath);
    this.#server = server;
    this.#log.info({ socket: this.socketPath }, 'plugin-event server listening');
  }

  /**
   * Graceful: stops accepting, lets in-flight events finish (a sandbox being set up gets its
   * answer) for up to `drainMs`, then closes whatever is left.
   */
  async close(drainMs = 8_000): Promise<void> {
    const server = this.#server;
    this.#server = undefined;
    if (!server) return;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeIdleConnections();
    if (this.#inFlight > 0) {
      this.#log.info({ inFlight: this.#inFlight }, 'waiting for in-flight plugin events');
      await Promise.race([new Promise<void>((r) => this.#drained.push(r)), new Promise((r) => setTimeout(r, drainMs).unref())]);
    }
    await closeServer(server);
    await closed;
  }

  get inFlight(): number {
    return this.#inFlight;
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    this.#inFlight++;
    try {
      await this.#serve(req, res);
    } finally {
      if (--this.#inFlight === 0) for (const r of this.#drained.splice(0)) r();
    }
  }

  async #serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const started = process.hrtime.bigint();
    const route = req.url ?? '';
    let status = 200;
    let body = '';
    try {
      if (req.method !== 'POST') throw Object.assign(new BadRequest(`method ${req.method} not allowed`), { status: 405 });
      body = (await this.#dispatch(route, await readJson(req))) ?? '';
    } catch (err) {
      status = (err as { status?: number }).status ?? (err instanceof BadRequest ? 400 : 500);
      body = (err as Error).message;
      this.#log.warn({ route, status, err: body }, 'plugin event failed');
    }
    const key = `${route} ${status}`;
    this.requests.set(key, (this.requests.get(key) ?? 0) + 1);
    this.onRequest(route, status, Number(process.hrtime.bigint() - started) / 1e9);
    res.writeHead(status, { 'Content-Type': 'text/plain; charset=utf-8', Connection: 'close' }).end(body);
  }

  async #dispatch(route: string, json: unknown): Promise<string | undefined> {
    switch (route) {
      case ROUTE_ADD:
        return void (await this.handlers.add(parseAddEvent(json)));
      case ROUTE_DEL:
        return void (await this.handlers.del(parseDelEvent(json)));
      case ROUTE_CHECK: {
        const problem = await this.handlers.check(parseAddEvent(json));
        if (problem) throw new Error(problem);
        return undefined;
      }
      default:
        throw Object.assign(new BadRequest(`no route ${route}`), { status: 404 });
    }
  }
}
