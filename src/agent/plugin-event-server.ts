// The plugin-event server: HTTP/1.1 over <run dir>/pluginevent.sock, where the istio-cni plugin
// posts CNI ADD/DEL/CHECK. Only root may connect (socket 0600 in a 0750 directory). Replies:
// 200 done, 400 unusable body (every field is validated), 413 body over 64 KiB, 404/405 wrong
// route or method, 500 with the reason (the plugin fails the sandbox with it).
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { http } from '../util/node-http.js';
import { silentLogger, type Logger } from '../ops/log.js';
import { closeServer, listenPrivateSocket } from '../util/http-server.js';
import { isCniIdentifier, isDnsLabel, isDnsSubdomain, isPlainIp, MAX_CONTAINER_ID_BYTES, netnsPathProblem } from '../cni/fields.js';
import {
  ADD_ANSWER_MS,
  ROUTE_ADD,
  ROUTE_CHECK,
  ROUTE_DEL,
  ROUTE_GC,
  type PluginAddEvent,
  type PluginDelEvent,
  type PluginGcEvent,
  type PluginIpConfig,
} from '../cni/protocol.js';
import { answerWithin } from '../util/deadline.js';

const MAX_BODY_BYTES = 64 * 1024;
/** Far more addresses than any pod has; only bounds the work a hostile body can cause. */
const MAX_IPS = 64;
/** Kubernetes UIDs are UUIDs; the bound leaves room for other runtimes' IDs (as the plugin). */
const MAX_POD_UID_BYTES = 128;
/** Values quoted in a 400 reply are cut here: the reply ends up in the plugin's error object. */
const MAX_SHOWN = 64;

export class BadRequest extends Error {}

/** 413: the body is over MAX_BODY_BYTES (what the plugin-log server answers too). */
class TooLarge extends BadRequest {
  readonly status = 413;
}

export interface PluginEventHandlers {
  add(event: PluginAddEvent): Promise<void>;
  del(event: PluginDelEvent): Promise<void>;
  /** Resolves with a problem description, or undefined when the pod is fine. */
  check(event: PluginAddEvent): Promise<string | undefined>;
  /** What an ADD still running at the answer deadline waits for ("ztunnel has not acknowledged it"). */
  pendingAdd?(event: PluginAddEvent): string | undefined;
  /** CNI GC; without a handler a GC is answered 200 and does nothing. */
  gc?(event: PluginGcEvent): Promise<void>;
}

export interface PluginEventServerOptions {
  /** Every ADD is answered within this (default ADD_ANSWER_MS); tests shorten it. */
  addAnswerMs?: number;
}

function shown(value: string): string {
  return JSON.stringify(value.length <= MAX_SHOWN ? value : `${value.slice(0, MAX_SHOWN)}...`);
}

type Check = (value: string) => string | undefined;

const podName: Check = (v) => (isDnsSubdomain(v) ? undefined : 'is not a Kubernetes pod name (DNS-1123 subdomain)');
const namespaceName: Check = (v) => (isDnsLabel(v) ? undefined : 'is not a Kubernetes namespace name (DNS-1123 label)');
const podUid: Check = (v) =>
  isCniIdentifier(v, MAX_POD_UID_BYTES) ? undefined : `is not a pod UID (at most ${MAX_POD_UID_BYTES} of [A-Za-z0-9_.-])`;
const containerId: Check = (v) => (isCniIdentifier(v, MAX_CONTAINER_ID_BYTES) ? undefined : 'is not a container ID');
const netnsPath: Check = netnsPathProblem;

/**
 * A string field: absent/null is '' (Go's zero value), and '' is accepted only when the field is
 * optional; any other value must pass `check`.
 */
function field(body: Record<string, unknown>, name: string, required: boolean, check: Check): string {
  const value = body[name];
  if (value === undefined || value === null || value === '') {
    if (required) throw new BadRequest(`missing ${name}`);
    return '';
  }
  if (typeof value !== 'string') throw new BadRequest(`${name} must be a string`);
  const problem = check(value);
  if (problem !== undefined) throw new BadRequest(`${name} ${shown(value)} ${problem}`);
  return value;
}

function object(value: unknown, what: string): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new BadRequest(`${what} must be a JSON object`);
  return value as Record<string, unknown>;
}

/** Go's JSON of a net.IPMask: the base64 of 4 (IPv4) or 16 (IPv6) bytes; '' when absent. */
function mask(value: unknown, where: string): string {
  if (value === undefined || value === null || value === '') return '';
  if (typeof value !== 'string') throw new BadRequest(`${where}.Address.Mask must be a string`);
  const bytes = Buffer.from(value, 'base64');
  if ((bytes.length !== 4 && bytes.length !== 16) || bytes.toString('base64') !== value) {
    throw new BadRequest(`${where}.Address.Mask ${shown(value)} is not the base64 of a 4- or 16-byte mask`);
  }
  return value;
}

function parseIp(raw: unknown, i: number): PluginIpConfig {
  const where = `IPs[${i}]`;
  const ip = object(raw, where);
  const address = object(ip['Address'], `${where}.Address`);
  if (typeof address['IP'] !== 'string' || !isPlainIp(address['IP'])) {
    throw new BadRequest(`${where}.Address.IP must be an IP address string`);
  }
  const iface = ip['Interface'];
  if (iface !== undefined && iface !== null && !(typeof iface === 'number' && Number.isSafeInteger(iface) && iface >= 0)) {
    throw new BadRequest(`${where}.Interface must be a non-negative integer or null`);
  }
  const gateway = ip['Gateway'];
  if (gateway !== undefined && gateway !== null && gateway !== '' && (typeof gateway !== 'string' || !isPlainIp(gateway))) {
    throw new BadRequest(`${where}.Gateway must be an IP address string or empty`);
  }
  return {
    Interface: typeof iface === 'number' ? iface : null,
    Address: { IP: address['IP'], Mask: mask(address['Mask'], where) },
    Gateway: typeof gateway === 'string' ? gateway : '',
  };
}

/**
 * Every field is checked: the names and paths reach the netns opener, the state files, ZDS and
 * the logs, so anything Kubernetes and the runtime cannot produce is a 400, never passed on.
 * Unknown fields are ignored (as Go's decoder does).
 */
export function parseAddEvent(body: unknown): PluginAddEvent {
  const b = object(body, 'body');
  const ips = b['IPs'] ?? [];
  if (!Array.isArray(ips)) throw new BadRequest('IPs must be an array');
  if (ips.length > MAX_IPS) throw new BadRequest(`IPs has ${ips.length} entries (at most ${MAX_IPS})`);
  return {
    Netns: field(b, 'Netns', true, netnsPath),
    PodName: field(b, 'PodName', true, podName),
    PodNamespace: field(b, 'PodNamespace', true, namespaceName),
    PodUID: field(b, 'PodUID', false, podUid),
    ContainerID: field(b, 'ContainerID', false, containerId),
    IPs: ips.map(parseIp),
  };
}

/** As parseAddEvent; Netns may be empty (DEL can come after the netns is gone). */
export function parseDelEvent(body: unknown): PluginDelEvent {
  const b = object(body, 'body');
  return {
    Netns: field(b, 'Netns', false, netnsPath),
    PodName: field(b, 'PodName', true, podName),
    PodNamespace: field(b, 'PodNamespace', true, namespaceName),
    PodUID: field(b, 'PodUID', false, podUid),
    ContainerID: field(b, 'ContainerID', false, containerId),
  };
}

/**
 * Every attachment the runtime still has. An entry whose container ID no ADD could have carried
 * is dropped rather than refused: it cannot match an enrolment, and refusing the whole GC would
 * keep every stale one.
 */
export function parseGcEvent(body: unknown): PluginGcEvent {
  const b = object(body, 'body');
  const list = b['ValidAttachments'] ?? [];
  if (!Array.isArray(list)) throw new BadRequest('ValidAttachments must be an array');
  const valid: PluginGcEvent['ValidAttachments'] = [];
  for (const a of list as unknown[]) {
    try {
      const entry = object(a, 'ValidAttachments[]');
      const ifname = typeof entry['IfName'] === 'string' ? entry['IfName'] : '';
      valid.push({ ContainerID: field(entry, 'ContainerID', true, containerId), IfName: ifname });
    } catch (err) {
      if (!(err instanceof BadRequest)) throw err;
    }
  }
  return { ValidAttachments: valid };
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * The body, at most MAX_BODY_BYTES of it: a declared larger one is refused before reading, and
 * a chunked one is refused as soon as it passes the cap (what follows is discarded unbuffered,
 * and the reply closes the connection).
 */
function readBody(req: IncomingMessage): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > MAX_BODY_BYTES)
    return Promise.reject(new TooLarge(`body larger than ${MAX_BODY_BYTES} bytes`));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    const settle = (fn: () => void): void => {
      if (settled) return;
      settled = true;
      fn();
    };
    req.on('data', (chunk: Buffer) => {
      if (settled) return; // discarding the rest of a refused body
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        chunks.length = 0;
        settle(() => reject(new TooLarge(`body larger than ${MAX_BODY_BYTES} bytes`)));
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => settle(() => resolve(Buffer.concat(chunks))));
    req.on('aborted', () => settle(() => reject(new BadRequest('request body incomplete (the client went away)'))));
    req.on('error', (err) => settle(() => reject(new BadRequest(`reading the body: ${err.message}`))));
    req.on('close', () => settle(() => reject(new BadRequest('request body incomplete (the connection closed)'))));
  });
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  let raw: string;
  try {
    raw = utf8.decode(await readBody(req));
  } catch (err) {
    if (err instanceof BadRequest) throw err;
    throw new BadRequest('body is not UTF-8');
  }
  if (raw.trim() === '') throw new BadRequest('empty body');
  try {
    return JSON.parse(raw) as unknown;
  } catch (err) {
    throw new BadRequest(`invalid JSON: ${(err as Error).message}`);
  }
}

/** Keys of the per-route counters: the three routes, everything else is one key. */
function routeKey(route: string): string {
  return route === ROUTE_ADD || route === ROUTE_DEL || route === ROUTE_CHECK || route === ROUTE_GC ? route : 'other';
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
  /** Called with the number of events in flight whenever it changes (an event arrived, one was answered). */
  onInFlight: (count: number) => void = () => {};

  readonly #addAnswerMs: number;

  constructor(
    private readonly socketPath: string,
    private readonly handlers: PluginEventHandlers,
    log: Logger = silentLogger,
    options: PluginEventServerOptions = {},
  ) {
    this.#log = log.child({ component: 'plugin-events' });
    this.#addAnswerMs = options.addAnswerMs ?? ADD_ANSWER_MS;
  }

  async start(): Promise<void> {
    const server = http.createServer((req, res) => void this.#handle(req, res));
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
    this.onInFlight(++this.#inFlight);
    try {
      await this.#serve(req, res);
    } catch (err) {
      // Only a throwing observer or a broken response can land here; never leave it unhandled.
      this.#log.error({ err: err instanceof Error ? err.message : String(err) }, 'plugin event handling failed');
      if (!res.headersSent) res.writeHead(500, { Connection: 'close' });
      res.end();
    } finally {
      if (--this.#inFlight === 0) for (const r of this.#drained.splice(0)) r();
      this.onInFlight(this.#inFlight);
    }
  }

  async #serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const started = process.hrtime.bigint();
    const route = req.url ?? '';
    let status = 200;
    let body: string;
    try {
      if (routeKey(route) === 'other') throw Object.assign(new BadRequest(`no route ${route.slice(0, MAX_SHOWN)}`), { status: 404 });
      if (req.method !== 'POST') throw Object.assign(new BadRequest(`method ${req.method} not allowed`), { status: 405 });
      body = (await this.#dispatch(route, await readJson(req))) ?? '';
    } catch (err) {
      // 400/404/405/413 are ours (BadRequest); anything else is the handler's failure.
      status = err instanceof BadRequest ? ((err as { status?: number }).status ?? 400) : 500;
      body = err instanceof Error ? err.message : String(err);
      this.#log.warn({ route, status, err: body }, 'plugin event failed');
    }
    // Counted by known route only: a client inventing paths must not grow the map.
    const key = `${routeKey(route)} ${status}`;
    this.requests.set(key, (this.requests.get(key) ?? 0) + 1);
    this.onRequest(route, status, Number(process.hrtime.bigint() - started) / 1e9);
    res.writeHead(status, { 'Content-Type': 'text/plain; charset=utf-8', Connection: 'close' }).end(body);
  }

  /**
   * The one ADD deadline: the answer goes out before the plugin gives up (PLUGIN_AGENT_TIMEOUT_MS),
   * naming what the enrolment still waits for; the enrolment carries on.
   */
  #addInTime(event: PluginAddEvent): Promise<void> {
    const ms = this.#addAnswerMs;
    // Only a late ADD logs: no child logger per pod on the common path.
    const log = (): Logger => this.#log.child({ pod: `${event.PodNamespace}/${event.PodName}`, uid: event.PodUID || undefined });
    return answerWithin(this.handlers.add(event), {
      ms,
      late: () => {
        const pending = this.handlers.pendingAdd?.(event) ?? 'it is still in progress';
        const err = new Error(`pod ${event.PodNamespace}/${event.PodName} not enrolled within ${ms} ms: ${pending}`);
        log().warn(
          { err: err.message },
          'answering the ADD before the plugin gives up; the enrolment carries on (a retried ADD completes it)',
        );
        return err;
      },
      settledLate: (err) =>
        err === undefined
          ? log().info('late enrolment finished after the ADD was answered')
          : log().warn({ err: (err as Error).message }, 'late enrolment failed after the ADD was answered'),
    });
  }

  async #dispatch(route: string, json: unknown): Promise<string | undefined> {
    switch (route) {
      case ROUTE_ADD:
        return void (await this.#addInTime(parseAddEvent(json)));
      case ROUTE_DEL:
        return void (await this.handlers.del(parseDelEvent(json)));
      case ROUTE_GC:
        return void (await this.handlers.gc?.(parseGcEvent(json)));
      case ROUTE_CHECK: {
        const problem = await this.handlers.check(parseAddEvent(json));
        if (problem) throw new Error(problem);
        return undefined;
      }
      default:
        throw Object.assign(new BadRequest(`no route ${route.slice(0, MAX_SHOWN)}`), { status: 404 });
    }
  }
}
