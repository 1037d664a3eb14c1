// node:http for the agent's servers and clients, loaded with require(): on Node 24 an ES import
// of node:http evaluates every one of its exports, and one of them (a lazy getter) loads Node's
// bundled undici, ~35 ms of a restarted agent's start before it serves ztunnel (require leaves
// it lazy, ~4 ms; the ES import costs ~5 ms on Node 20). Types come from `import type`.
import { createRequire } from 'node:module';
import type * as NodeHttp from 'node:http';

export const http = createRequire(import.meta.url)('node:http') as typeof NodeHttp;
