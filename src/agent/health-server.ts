// /healthz (always 200 while the process serves) and /readyz (200 only when every readiness
// condition holds; 503 listing what is missing), as Istio's health server on :8000.
import { createServer, type Server } from 'node:http';
import { closeServer, listen } from '../util/http-server.js';

export class HealthServer {
  #server: Server | undefined;

  constructor(
    private readonly port: number,
    private readonly notReadyReasons: () => string[],
    private readonly host = '0.0.0.0',
    /** /debug/pods: every tracked pod with its netns, rule state and ZDS state. */
    private readonly debugPods?: () => Promise<unknown>,
  ) {}

  get address(): { port: number } | undefined {
    const a = this.#server?.address();
    return a && typeof a === 'object' ? { port: a.port } : undefined;
  }

  async start(): Promise<void> {
    const server = createServer((req, res) => {
      if (req.url === '/healthz') return void res.writeHead(200).end('ok\n');
      if (req.url === '/readyz') {
        const reasons = this.notReadyReasons();
        return void res.writeHead(reasons.length === 0 ? 200 : 503).end(reasons.length === 0 ? 'ready\n' : `not ready: ${reasons.join('; ')}\n`);
      }
      if (req.url === '/debug/pods' && this.debugPods) {
        return void this.debugPods().then(
          (body) => res.writeHead(200, { 'Content-Type': 'application/json' }).end(`${JSON.stringify(body, null, 2)}\n`),
          (err: Error) => res.writeHead(500).end(`${err.message}\n`),
        );
      }
      res.writeHead(404).end('not found\n');
    });
    await listen(server, this.port, this.host);
    this.#server = server;
  }

  async close(): Promise<void> {
    const server = this.#server;
    this.#server = undefined;
    await closeServer(server);
  }
}
