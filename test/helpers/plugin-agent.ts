// A fake node agent for the istio-cni plugin binary: an HTTP server on <run dir>/pluginevent.sock
// that records every request and answers with whatever the test sets. Runs in the test process,
// so the plugin must be spawned asynchronously (spawnSync would block the event loop it answers on).
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import { createServer as createNetServer, type Server as NetServer, type Socket } from 'node:net';
import { join } from 'node:path';
import { PLUGIN_EVENT_SOCKET } from '../../src/cni/protocol.js';

export interface RecordedRequest {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  rawBody: string;
  /** The parsed JSON body, or undefined when it was not JSON. */
  body: unknown;
}

export type Responder = (req: RecordedRequest, res: ServerResponse) => void;

/** Answers with a fixed status and text; Node frames it with Content-Length. */
export const reply =
  (status: number, text = ''): Responder =>
  (_req, res) => {
    res.writeHead(status, { 'Content-Type': 'text/plain' });
    res.end(text);
  };

/** Same, but written in two pieces so Node uses chunked transfer coding. */
export const replyChunked =
  (status: number, text: string): Responder =>
  (_req, res) => {
    res.writeHead(status, { 'Content-Type': 'text/plain' });
    const half = Math.floor(text.length / 2);
    res.write(text.slice(0, half));
    setTimeout(() => res.end(text.slice(half)), 20);
  };

/** Never answers: the plugin has to give up on its own deadline. */
export const neverReply: Responder = () => {};

export class FakePluginAgent {
  readonly requests: RecordedRequest[] = [];
  readonly socketPath: string;
  #respond: Responder;
  readonly #server: Server;

  private constructor(runDir: string, respond: Responder) {
    this.socketPath = join(runDir, PLUGIN_EVENT_SOCKET);
    this.#respond = respond;
    this.#server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const rawBody = Buffer.concat(chunks).toString('utf8');
        let body: unknown;
        try {
          body = JSON.parse(rawBody);
        } catch {
          body = undefined;
        }
        const recorded = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, rawBody, body };
        this.requests.push(recorded);
        this.#respond(recorded, res);
      });
    });
  }

  static async start(runDir: string, respond: Responder = reply(200)): Promise<FakePluginAgent> {
    const agent = new FakePluginAgent(runDir, respond);
    await new Promise<void>((resolve, reject) => {
      agent.#server.once('error', reject);
      agent.#server.listen(agent.socketPath, () => resolve());
    });
    return agent;
  }

  respondWith(respond: Responder): void {
    this.#respond = respond;
  }

  async close(): Promise<void> {
    // Requests left hanging by neverReply would otherwise keep close() waiting.
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

/**
 * A bare stream server on the socket that writes `response` verbatim after the request head
 * arrives and then closes: for framings Node's http server never produces (a body delimited
 * only by the connection closing) and for replies that are not HTTP at all.
 */
export class RawPluginAgent {
  readonly socketPath: string;
  readonly #server: NetServer;
  readonly #sockets = new Set<Socket>();

  private constructor(runDir: string, response: string) {
    this.socketPath = join(runDir, PLUGIN_EVENT_SOCKET);
    this.#server = createNetServer((socket) => {
      this.#sockets.add(socket);
      socket.on('close', () => this.#sockets.delete(socket));
      let seen = '';
      socket.on('data', (d: Buffer) => {
        seen += d.toString('latin1');
        if (seen.includes('\r\n\r\n')) socket.end(response);
      });
      socket.on('error', () => {});
    });
  }

  static async start(runDir: string, response: string): Promise<RawPluginAgent> {
    const agent = new RawPluginAgent(runDir, response);
    await new Promise<void>((resolve, reject) => {
      agent.#server.once('error', reject);
      agent.#server.listen(agent.socketPath, () => resolve());
    });
    return agent;
  }

  async close(): Promise<void> {
    for (const s of this.#sockets) s.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}
