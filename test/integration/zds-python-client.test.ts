// The agent's ZDS server against shared/tools/zds_client.py, an independent ztunnel stand-in.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PodRegistry } from '../../src/zds/registry.js';
import { ZdsServer } from '../../src/zds/server.js';
import { openOwnNamespace } from '../helpers/netns-files.js';

const CLIENT = fileURLToPath(new URL('../../../shared/tools/zds_client.py', import.meta.url));

interface Line {
  event?: string;
  action?: string;
  type?: string;
  uid?: string;
  name?: string;
  namespace?: string;
  service_account?: string;
  fd?: boolean;
  netns?: boolean;
  inode?: number;
  ack?: string;
}

class PythonZtunnel {
  readonly lines: Line[] = [];
  readonly exited: Promise<number | null>;
  #child: ChildProcessWithoutNullStreams;
  #buffer = '';

  constructor(socketPath: string, extraArgs: string[] = []) {
    this.#child = spawn('python3', [CLIENT, '--socket', socketPath, '--timeout', '10', ...extraArgs]);
    this.#child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      this.#buffer += chunk;
      const parts = this.#buffer.split('\n');
      this.#buffer = parts.pop() ?? '';
      for (const p of parts) if (p.trim()) this.lines.push(JSON.parse(p) as Line);
    });
    this.exited = new Promise((resolve) => this.#child.on('exit', (code) => resolve(code)));
  }

  messages(): Line[] {
    return this.lines.filter((l) => l.event === undefined || l.event === 'message');
  }

  async waitFor(predicate: (lines: Line[]) => boolean, ms = 5000): Promise<void> {
    const deadline = Date.now() + ms;
    while (!predicate(this.lines)) {
      if (Date.now() > deadline) throw new Error(`zds_client.py: condition not met; output: ${JSON.stringify(this.lines)}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  kill(): void {
    this.#child.kill('SIGKILL');
  }
}

describe.skipIf(!existsSync(CLIENT))('ZDS server against zds_client.py', () => {
  let dir: string;
  let socketPath: string;
  let server: ZdsServer;
  let registry: PodRegistry;
  let client: PythonZtunnel | undefined;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'zds-py-'));
    socketPath = join(dir, 'ztunnel.sock');
    server = new ZdsServer({ socketPath, snapshot: () => registry.snapshot() });
    registry = new PodRegistry(server);
    server.start();
  });

  afterEach(() => {
    client?.kill();
    server.close();
    registry.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('done-when: one add per pod with its netns and identity, then snapshot_sent; exits 0 on EOF', async () => {
    const pods = [
      { uid: '11111111-aaaa', name: 'web-0', namespace: 'shop', serviceAccount: 'web' },
      { uid: '22222222-bbbb', name: 'db-0', namespace: 'shop', serviceAccount: 'db' },
    ];
    for (const p of pods) await registry.add(p, openOwnNamespace()).catch(() => {}); // no ztunnel yet
    await registry.add({ uid: '33333333-cccc', name: 'lost', namespace: 'shop', serviceAccount: 'x' }); // no netns: keep
    client = new PythonZtunnel(socketPath);
    await client.waitFor((lines) => lines.some((l) => l.type === 'snapshot_sent'));
    const messages = client.messages();
    expect(messages.map((m) => [m.type, m.uid, m.name, m.namespace, m.service_account, m.fd, m.netns, m.ack])).toEqual([
      ['add', '11111111-aaaa', 'web-0', 'shop', 'web', true, true, ''],
      ['add', '22222222-bbbb', 'db-0', 'shop', 'db', true, true, ''],
      ['keep', '33333333-cccc', null, null, null, false, null, ''],
      ['snapshot_sent', '', null, null, null, false, null, ''],
    ]);
    expect(messages[0]!.inode).toBe(registry.netnsOf('11111111-aaaa')!.ino);

    await registry.add({ uid: '44444444-dddd', name: 'live', namespace: 'shop', serviceAccount: 'live' }, openOwnNamespace());
    await registry.delete('22222222-bbbb');
    await client.waitFor((lines) => lines.some((l) => l.type === 'del'));
    expect(client.messages().slice(4).map((m) => [m.type, m.uid, m.action])).toEqual([
      ['add', '44444444-dddd', 'started'],
      ['del', '22222222-bbbb', 'stopped'],
    ]);

    server.close(); // EOF for the client
    expect(await client.exited).toBe(0);
    expect(client.lines.at(-1)).toMatchObject({ event: 'eof' });
  });

  it('turns the client nack into a retryable error carrying its text', async () => {
    client = new PythonZtunnel(socketPath, ['--ack-error', 'failure to start proxy : Bind(AddrInUse)', '--ack-error-types', 'add']);
    await client.waitFor((lines) => lines.some((l) => l.type === 'snapshot_sent'));
    await expect(registry.add({ uid: 'u1', name: 'n', namespace: 'ns', serviceAccount: 'sa' }, openOwnNamespace())).rejects.toMatchObject({
      code: 'ZDS_ACK_ERROR',
      retryable: true,
      message: 'ztunnel rejected pod u1: failure to start proxy : Bind(AddrInUse)',
    });
  });

  it('times out when the client never acks', async () => {
    server.close();
    server = new ZdsServer({ socketPath, snapshot: () => registry.snapshot(), timeouts: { ackMs: 300 } });
    registry = new PodRegistry(server);
    server.start();
    client = new PythonZtunnel(socketPath, ['--no-ack']);
    await client.waitFor((lines) => lines.some((l) => l.type === 'snapshot_sent'));
    // snapshot_sent was never acked either: the handshake failed and the connection is gone
    await new Promise((r) => setTimeout(r, 400));
    expect(server.connections()).toHaveLength(0);
    await expect(registry.add({ uid: 'u', name: 'n', namespace: 'ns', serviceAccount: 'sa' }, openOwnNamespace())).rejects.toMatchObject({
      code: 'ZDS_NO_CONNECTION',
    });
  });
});
