// Starting and stopping Node HTTP servers as promises (shared by the agent's small servers).
import { chmodSync, lstatSync, mkdirSync, rmSync } from 'node:fs';
import type { RequestListener, Server } from 'node:http';
import { http } from './node-http.js';
import { dirname } from 'node:path';

/** Listens on a TCP port (with host) or a Unix socket path (without), rejecting on error. */
export function listen(server: Server, where: number | string, host?: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    const done = (): void => {
      server.off('error', reject);
      resolve();
    };
    if (typeof where === 'string') server.listen(where, done);
    else server.listen(where, host, done);
  });
}

/** Closes the server and every open connection; resolves once it is fully closed. */
export async function closeServer(server: Server | undefined): Promise<void> {
  if (!server) return;
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}

/** A stale socket from a previous agent is removed; any other kind of file is left alone. */
function removeStaleSocket(path: string): void {
  try {
    if (!lstatSync(path).isSocket()) throw new Error(`${path} exists and is not a socket`);
    rmSync(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
}

/**
 * Listens on a Unix socket only root may use: the socket 0600 in a 0750 directory (created if
 * needed), replacing a stale socket file from a previous agent.
 */
export async function listenPrivateSocket(server: Server, socketPath: string): Promise<void> {
  const dir = dirname(socketPath);
  mkdirSync(dir, { recursive: true, mode: 0o750 });
  chmodSync(dir, 0o750);
  removeStaleSocket(socketPath);
  await listen(server, socketPath);
  chmodSync(socketPath, 0o600);
}

/** A small HTTP server on a TCP port (health, metrics): start, close, the port it got. */
export class PortServer {
  #server: Server | undefined;

  constructor(
    private readonly handler: RequestListener,
    private readonly port: number,
    private readonly host = '0.0.0.0',
  ) {}

  get address(): { port: number } | undefined {
    const a = this.#server?.address();
    return a && typeof a === 'object' ? { port: a.port } : undefined;
  }

  async start(): Promise<void> {
    const server = http.createServer(this.handler);
    await listen(server, this.port, this.host);
    this.#server = server;
  }

  async close(): Promise<void> {
    const server = this.#server;
    this.#server = undefined;
    await closeServer(server);
  }
}
