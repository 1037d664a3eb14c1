// The plugin log sink: HTTP/1.1 over <run dir>/log.sock, where the istio-cni plugin tees its log
// lines (Istio's cni/pkg/log UDS server, same wire format, so Istio's plugin can log here and our
// plugin can log to Istio's agent during an upgrade). `POST /log`, body = a JSON array of strings,
// each string one JSON log line (zap's encoding: {"time","level","scope","msg",...fields}).
// Every line is re-emitted in the agent's log under scope cni-plugin at the line's own level,
// which is where operators look: the runtime's copy of the plugin's stderr stays on the node.
// Only root may connect (socket 0600 in a 0750 directory). Replies: 200 (lines that are not
// JSON objects are skipped and counted, as Istio does), 400 when the body is not a JSON array,
// 404 for another path, 405 for another method, 413 past 1 MiB.
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { http } from '../util/node-http.js';
import type { ScopeLevels } from '../ops/log-levels.js';
import { scopeLogger, type Logger } from '../ops/log.js';
import { closeServer, listenPrivateSocket } from '../util/http-server.js';

/** Istio's constants.UDSLogPath. */
export const ROUTE_LOG = '/log';
/** The scope the plugin's lines carry in the agent log (Istio's pluginLog scope). */
export const PLUGIN_LOG_SCOPE = 'cni-plugin';

const MAX_BODY_BYTES = 1024 * 1024;

type AgentLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error';

// zap's level names (Istio's plugin), pino's names, and "warning" as Istio's scopes spell it.
// The panic and fatal levels become error: a plugin that died is an error in the agent's log,
// while fatal records there mean the agent itself is going down. The original name is kept
// under pluginLevel whenever the mapping is not one to one.
const LEVEL_BY_NAME: Readonly<Record<string, { level: AgentLevel; exact: boolean }>> = {
  trace: { level: 'trace', exact: true },
  debug: { level: 'debug', exact: true },
  info: { level: 'info', exact: true },
  warn: { level: 'warn', exact: true },
  warning: { level: 'warn', exact: true },
  error: { level: 'error', exact: true },
  dpanic: { level: 'error', exact: false },
  panic: { level: 'error', exact: false },
  fatal: { level: 'error', exact: false },
};

/** pino's numeric levels (10 trace ... 60 fatal), rounded down to the level they belong to. */
function levelFromNumber(n: number): { level: AgentLevel; exact: boolean } {
  const exact = n === 10 || n === 20 || n === 30 || n === 40 || n === 50;
  if (n < 20) return { level: 'trace', exact };
  if (n < 30) return { level: 'debug', exact };
  if (n < 40) return { level: 'info', exact };
  if (n < 50) return { level: 'warn', exact };
  return { level: 'error', exact };
}

/** A missing level is info (nothing to keep); an unknown one is info with the original kept. */
function mapLevel(raw: unknown): { level: AgentLevel; exact: boolean } {
  if (raw === undefined || raw === null) return { level: 'info', exact: true };
  if (typeof raw === 'number' && Number.isFinite(raw)) return levelFromNumber(raw);
  if (typeof raw === 'string') return LEVEL_BY_NAME[raw.trim().toLowerCase()] ?? { level: 'info', exact: false };
  return { level: 'info', exact: false };
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** One element of the batch: a string holding a JSON object, else undefined (skipped). */
function parseLine(element: unknown): Record<string, unknown> | undefined {
  if (typeof element !== 'string') return undefined;
  let value: unknown;
  try {
    value = JSON.parse(element);
  } catch {
    return undefined;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  return value as Record<string, unknown>;
}

/** "time" -> "pluginTime": where a plugin field goes when its name is the agent record's. */
function pluginKey(key: string): string {
  return `plugin${key.charAt(0).toUpperCase()}${key.slice(1)}`;
}

async function readBody(req: IncomingMessage): Promise<string> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > MAX_BODY_BYTES) throw new HttpError(413, `body larger than ${MAX_BODY_BYTES} bytes`);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) throw new HttpError(413, `body larger than ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

export interface PluginLogStats {
  /** POST /log requests answered 200. */
  batches: number;
  /** Lines re-emitted in the agent log (whether or not the agent's level let them through). */
  lines: number;
  /** Array elements that were not a string holding a JSON object. */
  skipped: number;
  /** Requests refused (400, 404, 405, 413). */
  rejected: number;
}

export class PluginLogServer {
  #server: Server | undefined;
  /** The server's own messages. */
  readonly #log: Logger;
  /** Where the plugin's lines go. */
  readonly #pluginLog: Logger;
  /** Record keys a plugin field must not take over (they are the agent's), renamed pluginX. */
  readonly #reserved: ReadonlySet<string>;
  readonly stats: PluginLogStats = { batches: 0, lines: 0, skipped: 0, rejected: 0 };

  constructor(
    private readonly socketPath: string,
    log: Logger,
    /** The plugin's lines pass at the cni-plugin scope's level (Istio's pluginLog scope). */
    levels?: ScopeLevels,
  ) {
    this.#log = log.child({ component: 'plugin-log' });
    this.#pluginLog = scopeLogger(log, PLUGIN_LOG_SCOPE, levels);
    // pino writes the level, time and bindings (scope, name, component...) first and the logged
    // object's fields after them, so a same-named field would win when the line is parsed.
    this.#reserved = new Set(['level', 'time', 'msg', 'pid', 'hostname', ...Object.keys(this.#pluginLog.bindings())]);
  }

  async start(): Promise<void> {
    const server = http.createServer((req, res) => void this.#handle(req, res));
    await listenPrivateSocket(server, this.socketPath);
    this.#server = server;
    this.#log.info({ socket: this.socketPath }, 'plugin log server listening');
  }

  async close(): Promise<void> {
    const server = this.#server;
    this.#server = undefined;
    await closeServer(server);
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '').split('?')[0];
    try {
      if (path !== ROUTE_LOG) throw new HttpError(404, `no route ${path}`);
      if (req.method !== 'POST') throw new HttpError(405, `method ${req.method} not allowed`);
      const raw = await readBody(req);
      let batch: unknown;
      try {
        batch = JSON.parse(raw);
      } catch (err) {
        throw new HttpError(400, `invalid JSON: ${(err as Error).message}`);
      }
      if (!Array.isArray(batch)) throw new HttpError(400, 'body must be a JSON array of log lines');
      this.#emitBatch(batch);
      this.stats.batches++;
      res.writeHead(200, { 'Content-Type': 'text/plain; charset=utf-8' }).end();
    } catch (err) {
      const status = err instanceof HttpError ? err.status : 400; // else: the request stream failed
      const message = (err as Error).message;
      this.stats.rejected++;
      this.#log.warn({ route: path, status, err: message }, 'plugin log request refused');
      if (res.headersSent || res.destroyed) return;
      const headers: Record<string, string> = { 'Content-Type': 'text/plain; charset=utf-8' };
      if (status === 405) headers['Allow'] = 'POST';
      // A body left unread (413) must not be parsed as the next request.
      if (status === 413) headers['Connection'] = 'close';
      res.writeHead(status, headers).end(message);
    }
  }

  #emitBatch(batch: unknown[]): void {
    let skipped = 0;
    for (const element of batch) {
      const line = parseLine(element);
      if (!line) {
        skipped++;
        continue;
      }
      try {
        this.#emit(line);
        this.stats.lines++;
      } catch {
        skipped++; // a field pino cannot serialize: drop the line, keep the batch
      }
    }
    if (skipped > 0) {
      this.stats.skipped += skipped;
      this.#log.debug({ skipped, total: batch.length }, 'skipped plugin log entries that are not JSON object strings');
    }
  }

  #emit(line: Record<string, unknown>): void {
    const { level, exact } = mapLevel(line['level']);
    const fields: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(line)) {
      if (key === 'msg' || key === '__proto__') continue;
      if (key === 'level' && exact) continue;
      if (key === 'scope' && value === PLUGIN_LOG_SCOPE) continue; // already the record's scope
      const target = this.#reserved.has(key) ? pluginKey(key) : key;
      if (Object.prototype.hasOwnProperty.call(fields, target)) continue; // a line with both "time" and "pluginTime": the first wins
      fields[target] = value;
    }
    const raw = line['msg'];
    // Istio's agent trims the message too (zap lines may carry a trailing newline in it).
    const msg = typeof raw === 'string' ? raw.trim() : raw === undefined || raw === null ? '' : JSON.stringify(raw);
    this.#pluginLog[level](fields, msg);
  }
}
