// Troubleshooting endpoints, on a Unix socket only root can use (<run dir>/debug.sock, 0600 in the
// 0750 run dir, like the plugin sockets), never on the network: /debug/pods names every pod with
// its netns and verifies each pod's rules on request (a ruleset listing per pod), which nobody
// outside the node should see or be able to trigger. `ambient-node-agent pods` reads it.
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { http } from '../util/node-http.js';
import { join } from 'node:path';
import { closeServer, listenPrivateSocket } from '../util/http-server.js';

export const DEBUG_SOCKET = 'debug.sock';
export const ROUTE_DEBUG_PODS = '/debug/pods';

export function debugSocketPath(runDir: string): string {
  return join(runDir, DEBUG_SOCKET);
}

export class DebugServer {
  #server: Server | undefined;

  constructor(
    private readonly socketPath: string,
    /** /debug/pods: every tracked pod with its netns, rule state and ZDS state. */
    private readonly debugPods: () => Promise<unknown>,
  ) {}

  async start(): Promise<void> {
    const server = http.createServer((req, res) => this.#route(req, res));
    await listenPrivateSocket(server, this.socketPath);
    this.#server = server;
  }

  async close(): Promise<void> {
    const server = this.#server;
    this.#server = undefined;
    await closeServer(server);
  }

  #route(req: IncomingMessage, res: ServerResponse): void {
    if ((req.url ?? '').split('?')[0] !== ROUTE_DEBUG_PODS) return void res.writeHead(404).end('not found\n');
    if (req.method !== 'GET') return void res.writeHead(405, { Allow: 'GET' }).end('method not allowed\n');
    this.debugPods().then(
      (body) => res.writeHead(200, { 'Content-Type': 'application/json' }).end(`${JSON.stringify(body, null, 2)}\n`),
      (err: Error) => res.writeHead(500).end(`${err.message}\n`),
    );
  }
}

/** GET <path> on the debug socket: status and body (for `ambient-node-agent pods`). */
export function getDebug(socketPath: string, path: string, timeoutMs = 30_000): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ socketPath, path, method: 'GET', timeout: timeoutMs }, (res) => {
      let text = '';
      res.setEncoding('utf8').on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end();
  });
}
