// The agent's plugin-event HTTP server (<run dir>/pluginevent.sock) under hostile clients:
// arbitrary bytes and JSON as bodies, wrong methods and paths, bodies over the 64 KiB cap (with
// and without Content-Length), and raw non-HTTP bytes on the socket. Every request gets 200 or
// a 4xx with a message (never a 500, never an unhandled error), exactly the bodies the parser
// accepts reach the handlers, and the server keeps serving.
import { mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseAddEvent, parseDelEvent, PluginEventServer } from '../../src/agent/plugin-event-server.js';
import type { PluginAddEvent, PluginDelEvent } from '../../src/cni/protocol.js';
import { fuzzParams, fuzzTest } from '../helpers/fuzz.js';

const GOOD_ADD: PluginAddEvent = {
  Netns: '/var/run/netns/cni-1',
  PodName: 'web-1',
  PodNamespace: 'shop',
  PodUID: '0b6c9f3e-1111-4a5b-9c1d-2e3f4a5b6c7d',
  ContainerID: 'c0ffee',
  IPs: [{ Interface: 0, Address: { IP: '10.1.0.5', Mask: '////AA==' }, Gateway: '10.1.0.1' }],
};

interface Reply {
  status: number;
  body: string;
}

interface Send {
  method?: string;
  path: string;
  body: Uint8Array;
  /** false: chunked transfer coding (no Content-Length). */
  contentLength?: boolean;
}

function send(socketPath: string, { method = 'POST', path, body, contentLength = true }: Send): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string | number> = { 'Content-Type': 'application/json' };
    if (contentLength) headers['Content-Length'] = body.length;
    const req = request({ socketPath, path, method, headers, timeout: 10_000 }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.on('timeout', () => req.destroy(new Error('request timed out')));
    req.end(Buffer.from(body));
  });
}

const json = (v: unknown): Uint8Array => Buffer.from(JSON.stringify(v) ?? 'null');

/** What the handlers must have received for a body, or undefined when it must be a 400. */
function expectedEvent(route: string, body: Uint8Array): PluginAddEvent | PluginDelEvent | undefined {
  let parsed: unknown;
  try {
    const text = new TextDecoder('utf-8', { fatal: true }).decode(body);
    if (text.trim() === '') return undefined;
    parsed = JSON.parse(text);
  } catch {
    return undefined;
  }
  try {
    return route === '/cmddel' ? parseDelEvent(parsed) : parseAddEvent(parsed);
  } catch {
    return undefined;
  }
}

const fieldValue = fc.oneof(
  fc.jsonValue({ maxDepth: 2 }),
  fc.string({ unit: 'binary', maxLength: 30 }),
  fc.constantFrom('web;x', 'Web', '/var/run/netns/../x', 'rel/path', '10.0.0.1%eth0', 'a'.repeat(70), ''),
);
const mutatedEvent = fc
  .dictionary(fc.constantFrom('Netns', 'PodName', 'PodNamespace', 'PodUID', 'ContainerID', 'IPs', 'X'), fieldValue, { maxKeys: 2 })
  .map((changes) => json({ ...GOOD_ADD, ...changes }));
const bodyArb: fc.Arbitrary<Uint8Array> = fc.oneof(
  { arbitrary: fc.constant(json(GOOD_ADD)), weight: 1 },
  { arbitrary: mutatedEvent, weight: 4 },
  { arbitrary: fc.jsonValue({ maxDepth: 3 }).map(json), weight: 1 },
  { arbitrary: fc.uint8Array({ maxLength: 300 }), weight: 2 },
  // valid JSON text with invalid UTF-8 inside a string
  {
    arbitrary: fc
      .constantFrom([0xff], [0xc0, 0xaf], [0xed, 0xa0, 0x80])
      .map((b) => Buffer.concat([Buffer.from('{"PodName":"'), Buffer.from(b), Buffer.from('"}')])),
    weight: 1,
  },
  // truncated good bodies
  {
    arbitrary: fc.nat().map((n) => {
      const b = json(GOOD_ADD);
      return b.subarray(0, n % b.length);
    }),
    weight: 1,
  },
  { arbitrary: fc.integer({ min: 1_000, max: 20_000 }).map((n) => Buffer.from('['.repeat(n) + ']'.repeat(n))), weight: 1 },
);

describe('fuzz: the plugin-event server', () => {
  let dir: string;
  let socketPath: string;
  let server: PluginEventServer;
  const received: Array<{ route: string; event: PluginAddEvent | PluginDelEvent }> = [];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'fuzz-events-'));
    socketPath = join(dir, 'run', 'pluginevent.sock');
    server = new PluginEventServer(socketPath, {
      add: async (event) => void received.push({ route: '/cmdadd', event }),
      del: async (event) => void received.push({ route: '/cmddel', event }),
      check: async (event) => void received.push({ route: '/cmdcheck', event }),
    });
    await server.start();
  });

  afterAll(async () => {
    await server?.close(100);
    rmSync(dir, { recursive: true, force: true });
  });

  const stillServes = async (): Promise<void> => {
    received.length = 0;
    expect(await send(socketPath, { path: '/cmdadd', body: json(GOOD_ADD) })).toEqual({ status: 200, body: '' });
    expect(received).toEqual([{ route: '/cmdadd', event: GOOD_ADD }]);
    received.length = 0;
  };

  it(
    'arbitrary bodies: 200 exactly when the parser accepts them (and the handler got that event), else 400 with a reason',
    fuzzTest(),
    async () => {
      let ok = 0;
      await fc.assert(
        fc.asyncProperty(fc.constantFrom('/cmdadd', '/cmddel', '/cmdcheck'), bodyArb, fc.boolean(), async (path, body, contentLength) => {
          received.length = 0;
          const reply = await send(socketPath, { path, body, contentLength });
          const expected = expectedEvent(path, body);
          if (expected === undefined) {
            expect(reply.status, reply.body).toBe(400);
            expect(reply.body.length).toBeGreaterThan(0);
            expect(reply.body.length).toBeLessThan(400);
            expect(received).toEqual([]);
          } else {
            ok++;
            expect(reply).toEqual({ status: 200, body: '' });
            expect(received).toEqual([{ route: path, event: expected }]);
          }
        }),
        fuzzParams(400),
      );
      expect(ok).toBeGreaterThan(0);
      await stillServes();
    },
  );

  it('wrong methods and paths: 404/405, and the per-route counters do not grow with invented paths', fuzzTest(), async () => {
    const path = fc.oneof(
      fc.constantFrom('/cmdadd', '/cmddel', '/cmdcheck', '/', '/cmdadd/', '/CMDADD', '/cmdadd?x=1', '//cmdadd'),
      fc.webPath().map((p) => `/${p.replace(/^\/+/, '')}`),
    );
    const method = fc.constantFrom('GET', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'POST');
    await fc.assert(
      fc.asyncProperty(method, path, async (m, p) => {
        received.length = 0;
        const reply = await send(socketPath, { method: m, path: p, body: json(GOOD_ADD) });
        const known = ['/cmdadd', '/cmddel', '/cmdcheck'].includes(p);
        if (!known) expect(reply.status).toBe(404);
        else if (m !== 'POST') expect(reply.status).toBe(405);
        else expect(reply.status).toBe(200);
        if (reply.status !== 200) expect(received).toEqual([]);
      }),
      fuzzParams(150),
    );
    for (const key of server.requests.keys()) expect(['/cmdadd', '/cmddel', '/cmdcheck', 'other']).toContain(key.split(' ')[0]);
    await stillServes();
  });

  it('raw bytes on the socket (not HTTP) never take the server down', fuzzTest(), async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.uint8Array({ maxLength: 500 }),
          fc.string({ maxLength: 200 }).map((s) => Buffer.from(`POST /cmdadd HTTP/1.1\r\n${s}\r\n\r\n`)),
          fc
            .constantFrom(
              'POST /cmdadd HTTP/1.1\r\nContent-Length: -1\r\n\r\n',
              'POST /cmdadd HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n',
              'POST /cmdadd HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n',
            )
            .map((s) => Buffer.from(s)),
        ),
        async (bytes) => {
          await new Promise<void>((resolve) => {
            const socket = createConnection(socketPath);
            socket.on('error', () => resolve());
            socket.on('close', () => resolve());
            socket.on('data', () => {});
            socket.setTimeout(300, () => socket.destroy());
            socket.end(bytes);
          });
        },
      ),
      fuzzParams(100),
    );
    await stillServes();
  });

  describe('bodies over the 64 KiB cap', () => {
    it('a declared Content-Length over the cap is 413 without reading the body', async () => {
      const reply = await send(socketPath, { path: '/cmdadd', body: Buffer.alloc(64 * 1024 + 1, 0x20) });
      expect(reply.status).toBe(413);
      expect(reply.body).toMatch(/larger than 65536 bytes/);
      await stillServes();
    });

    it('a chunked body is cut off at the cap: 413 while the client is still sending', async () => {
      // 8 MiB in 64 KiB chunks, written only as fast as the server reads: the 413 must come back
      // long before the client is done, i.e. the server neither buffers nor waits for the rest.
      const total = 8 << 20;
      const reply = await new Promise<{ status: number; body: string; sentWhenAnswered: number }>((resolve, reject) => {
        let sent = 0;
        const req = request({ socketPath, path: '/cmdadd', method: 'POST', headers: { 'Content-Type': 'application/json' } }, (res) => {
          const chunks: Buffer[] = [];
          const sentWhenAnswered = sent;
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString(), sentWhenAnswered }));
        });
        // The server closes after its 413, so writing may fail once the reply is in: an error
        // only counts when no reply came.
        req.on('error', (err) => setTimeout(() => reject(err), 2_000).unref());
        const chunk = Buffer.alloc(64 * 1024, 0x5b);
        const pump = (): void => {
          while (sent < total) {
            sent += chunk.length;
            if (!req.write(chunk)) {
              req.once('drain', pump);
              return;
            }
          }
          req.end();
        };
        pump();
      });
      expect(reply.status).toBe(413);
      expect(reply.sentWhenAnswered).toBeLessThan(total);
      await stillServes();
    });

    it('exactly 64 KiB is still read (and judged on its content)', async () => {
      const body = Buffer.from(JSON.stringify({ ...GOOD_ADD, X: '' }));
      // {..., "X":"xxxx...x"}: the padding goes inside the last string
      const padded = Buffer.concat([
        body.subarray(0, body.length - 2),
        Buffer.alloc(64 * 1024 - body.length, 0x78),
        body.subarray(body.length - 2),
      ]);
      expect(padded.length).toBe(64 * 1024);
      expect((await send(socketPath, { path: '/cmdadd', body: padded })).status).toBe(200);
      expect((await send(socketPath, { path: '/cmdadd', body: padded, contentLength: false })).status).toBe(200);
    });
  });

  it('a handler that rejects with a non-Error is a 500 with its text, not an unhandled rejection', async () => {
    const odd = new PluginEventServer(join(dir, 'odd', 'pluginevent.sock'), {
      add: () => Promise.reject(undefined), // a careless handler
      del: () => Promise.reject('plain string'),
      check: async () => 'drifted: missing table',
    });
    await odd.start();
    try {
      const sock = join(dir, 'odd', 'pluginevent.sock');
      expect(await send(sock, { path: '/cmdadd', body: json(GOOD_ADD) })).toEqual({ status: 500, body: 'undefined' });
      expect(await send(sock, { path: '/cmddel', body: json(GOOD_ADD) })).toEqual({ status: 500, body: 'plain string' });
      expect(await send(sock, { path: '/cmdcheck', body: json(GOOD_ADD) })).toEqual({ status: 500, body: 'drifted: missing table' });
      // and a bad body never reaches the handler to begin with
      expect((await send(sock, { path: '/cmdadd', body: json({ ...GOOD_ADD, PodName: 'x;y' }) })).status).toBe(400);
    } finally {
      await odd.close(100);
    }
  });
});
