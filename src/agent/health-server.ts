// The health port (:8000), as Istio's: /healthz (200 while the process serves) and /readyz (200
// only when every readiness condition holds; 503 listing what is missing), and nothing else. It
// listens on the pod's address, reachable from the cluster, so nothing about pods is served here
// (that is the debug socket's job, src/agent/debug-server.ts).
import type { IncomingMessage, ServerResponse } from 'node:http';
import { PortServer } from '../util/http-server.js';

/** Every path the health port answers; anything else is 404. */
export const HEALTH_ROUTES = ['/healthz', '/readyz'] as const;

export class HealthServer extends PortServer {
  constructor(port: number, notReadyReasons: () => string[], host = '0.0.0.0') {
    super((req, res) => route(req, res, notReadyReasons), port, host);
  }
}

function route(req: IncomingMessage, res: ServerResponse, notReadyReasons: () => string[]): void {
  const path = (req.url ?? '').split('?')[0];
  if (path === '/healthz') return void res.writeHead(200).end('ok\n');
  if (path === '/readyz') {
    const reasons = notReadyReasons();
    return void res
      .writeHead(reasons.length === 0 ? 200 : 503)
      .end(reasons.length === 0 ? 'ready\n' : `not ready: ${reasons.join('; ')}\n`);
  }
  res.writeHead(404).end('not found\n');
}
