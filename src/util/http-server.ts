// Starting and stopping Node HTTP servers as promises (shared by the agent's small servers).
import type { Server } from 'node:http';

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
