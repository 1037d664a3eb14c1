// /healthz (always 200 while the process serves), /readyz (200 only when every readiness
// condition holds; 503 listing what is missing), as Istio's health server on :8000, and
// /debug/pods for troubleshooting.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { PortServer } from '../util/http-server.js';

export class HealthServer extends PortServer {
  constructor(
    port: number,
    notReadyReasons: () => string[],
    host = '0.0.0.0',
    /** /debug/pods: every tracked pod with its netns, rule state and ZDS state. */
    debugPods?: () => Promise<unknown>,
  ) {
    super((req, res) => route(req, res, notReadyReasons, debugPods), port, host);
  }
}

function route(req: IncomingMessage, res: ServerResponse, notReadyReasons: () => string[], debugPods?: () => Promise<unknown>): void {
  if (req.url === '/healthz') return void res.writeHead(200).end('ok\n');
  if (req.url === '/readyz') {
    const reasons = notReadyReasons();
    return void res.writeHead(reasons.length === 0 ? 200 : 503).end(reasons.length === 0 ? 'ready\n' : `not ready: ${reasons.join('; ')}\n`);
  }
  if (req.url === '/debug/pods' && debugPods) {
    return void debugPods().then(
      (body) => res.writeHead(200, { 'Content-Type': 'application/json' }).end(`${JSON.stringify(body, null, 2)}\n`),
      (err: Error) => res.writeHead(500).end(`${err.message}\n`),
    );
  }
  res.writeHead(404).end('not found\n');
}
