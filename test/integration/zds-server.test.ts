// The ZDS server over real SOCK_SEQPACKET sockets (no root needed), against a ztunnel-like client.
import { lstatSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SeqpacketSocket } from '../../src/addon/seqpacket.js';
import { ZdsError } from '../../src/zds/errors.js';
import { PodRegistry } from '../../src/zds/registry.js';
import { ZdsServer } from '../../src/zds/server.js';
import { FakeZtunnel, type FakeZtunnelOptions } from '../helpers/fake-ztunnel.js';
import { fdCount, openOwnNamespace } from '../helpers/netns-files.js';

const pod = (uid: string) => ({ uid, name: `pod-${uid}`, namespace: 'default', serviceAccount: `sa-${uid}` });

describe('ZDS server with a ztunnel-like client', () => {
  let dir: string;
  let socketPath: string;
  let server: ZdsServer;
  let registry: PodRegistry;
  const clients: FakeZtunnel[] = [];

  async function connect(options: FakeZtunnelOptions = {}): Promise<FakeZtunnel> {
    const client = await FakeZtunnel.connect(socketPath, options);
    clients.push(client);
    return client;
  }

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'zds-'));
    socketPath = join(dir, 'run', 'ztunnel', 'ztunnel.sock');
    server = new ZdsServer({ socketPath, snapshot: () => registry.snapshot(), timeouts: { helloMs: 300, ackMs: 300, writeMs: 300 } });
    registry = new PodRegistry(server);
    server.start();
  });

  afterEach(() => {
    for (const c of clients.splice(0)) c.close();
    server.close();
    registry.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('creates the directory and a 0600 socket, and replaces a stale socket file', () => {
    expect(lstatSync(socketPath).isSocket()).toBe(true);
    expect(statSync(socketPath).mode & 0o777).toBe(0o600);
    server.close();
    const again = new ZdsServer({ socketPath, snapshot: () => [] });
    again.start(); // the old socket file is still there: it must be replaced, not an error
    expect(lstatSync(socketPath).isSocket()).toBe(true);
    again.close();
  });

  it('refuses to remove a file that is not a socket', () => {
    const notSocket = join(dir, 'file');
    writeFileSync(notSocket, 'keep me');
    const other = new ZdsServer({ socketPath: notSocket, snapshot: () => [] });
    expect(() => other.start()).toThrow(expect.objectContaining({ code: 'EEXIST', message: expect.stringContaining('not a socket') }));
  });

  it('sends the snapshot: add with the netns for pods it holds, keep for the others, then snapshot_sent', async () => {
    const netns = openOwnNamespace();
    await expect(registry.add(pod('a'), netns)).rejects.toMatchObject({ code: 'ZDS_NO_CONNECTION', retryable: true });
    await registry.add(pod('b')); // no netns known: goes out as keep
    const client = await connect();
    await client.waitFor(() => client.snapshotSent);
    expect(client.messages).toEqual([
      {
        kind: 'add',
        uid: 'a',
        info: { name: 'pod-a', namespace: 'default', serviceAccount: 'sa-a' },
        fds: 1,
        inode: netns.ino,
        netns: true,
        ack: '',
      },
      { kind: 'keep', uid: 'b', fds: 0, ack: '' },
      { kind: 'snapshotSent', fds: 0, ack: '' },
    ]);
    await waitUntil(() => server.connections()[0]?.state === 'ready');
    expect(server.connections()).toMatchObject([{ state: 'ready', helloVersion: 1, requestsSent: 3 }]);
  });

  it('sends live adds and deletes one at a time, resolving adds only after the ack', async () => {
    const client = await connect();
    await client.waitFor(() => client.snapshotSent);
    const handles = ['c1', 'c2', 'c3'].map(() => openOwnNamespace());
    await Promise.all(handles.map((h, i) => registry.add(pod(`c${i + 1}`), h)));
    expect([...client.running.keys()].sort()).toEqual(['c1', 'c2', 'c3']);
    await registry.delete('c2');
    expect(handles[1]!.closed).toBe(true);
    expect(client.messages.map((m) => `${m.kind}:${m.uid ?? ''}`)).toEqual(['snapshotSent:', 'add:c1', 'add:c2', 'add:c3', 'del:c2']);
    expect([...client.running.keys()].sort()).toEqual(['c1', 'c3']);
  });

  it('reports an error ack as a retryable error with ztunnel text, and keeps the pod for the next snapshot', async () => {
    const client = await connect({ ackError: (req) => ('add' in req ? 'failure to start proxy : Bind(AddrInUse)' : undefined) });
    await client.waitFor(() => client.snapshotSent);
    const err = await registry.add(pod('x'), openOwnNamespace()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ZdsError);
    expect(err).toMatchObject({
      code: 'ZDS_ACK_ERROR',
      retryable: true,
      message: 'ztunnel rejected pod x: failure to start proxy : Bind(AddrInUse)',
    });
    expect(registry.snapshot().map((e) => e.uid)).toEqual(['x']);
    expect(server.connections()).toHaveLength(1); // an error ack does not end the connection
  });

  it('times out a missing ack as retryable, and drops that connection (acks are matched by order)', async () => {
    const client = await connect({ silent: (req) => 'add' in req });
    await client.waitFor(() => client.snapshotSent);
    const started = Date.now();
    await expect(registry.add(pod('slow'), openOwnNamespace())).rejects.toMatchObject({ code: 'ZDS_ACK_TIMEOUT', retryable: true });
    expect(Date.now() - started).toBeGreaterThanOrEqual(290);
    await client.waitFor(() => client.closed);
    expect(server.connections()).toHaveLength(0);
  });

  it('notices a dead ztunnel without any traffic (no keepalive round trip needed)', async () => {
    const counts: number[] = [];
    server.onConnectionCount = (n) => counts.push(n);
    const client = await connect();
    await client.waitFor(() => client.snapshotSent);
    await waitUntil(() => server.connections()[0]?.state === 'ready');
    client.close();
    const started = Date.now();
    await waitUntil(() => server.connections().length === 0);
    expect(Date.now() - started).toBeLessThan(200);
    expect(counts).toEqual([1, 0]);
  });

  it('closes a connection whose client never says hello', async () => {
    const mute = SeqpacketSocket.connect(socketPath);
    let eof = false;
    mute.handlers = { onDatagram: (d) => (eof ||= d.eof), onError: () => {} };
    await new Promise((r) => setTimeout(r, 400));
    expect(server.connections()).toHaveLength(0);
    expect(eof).toBe(true);
    mute.close();
  });

  it('survives a client that dies mid-snapshot, and sends the whole snapshot to the next one', async () => {
    for (const uid of ['s1', 's2', 's3']) await registry.add(pod(uid), openOwnNamespace()).catch(() => {});
    const dying = await connect({ dieOnRequest: 1 });
    await dying.waitFor(() => dying.closed);
    await waitUntil(() => server.connections().length === 0);
    const next = await connect();
    await next.waitFor(() => next.snapshotSent);
    expect(next.messages.map((m) => m.uid ?? m.kind)).toEqual(['s1', 's2', 's3', 'snapshotSent']);
    expect([...next.running.keys()].sort()).toEqual(['s1', 's2', 's3']);
  });

  it('gives a reconnecting ztunnel a fresh snapshot without the pods deleted meanwhile', async () => {
    await registry.add(pod('keep-me'), openOwnNamespace()).catch(() => {});
    await registry.add(pod('delete-me'), openOwnNamespace()).catch(() => {});
    const first = await connect();
    await first.waitFor(() => first.snapshotSent);
    first.close();
    await waitUntil(() => server.connections().length === 0);
    await registry.delete('delete-me'); // nobody connected: succeeds, the next snapshot omits it
    const second = await connect();
    await second.waitFor(() => second.snapshotSent);
    expect(second.messages.map((m) => m.uid ?? m.kind)).toEqual(['keep-me', 'snapshotSent']);
  });

  it('with two ztunnels sends adds only to the newest and deletes to both', async () => {
    const old = await connect();
    await old.waitFor(() => old.snapshotSent);
    const fresh = await connect();
    await fresh.waitFor(() => fresh.snapshotSent);
    await registry.add(pod('new-pod'), openOwnNamespace());
    expect(fresh.running.has('new-pod')).toBe(true);
    expect(old.messages.some((m) => m.kind === 'add')).toBe(false);
    await registry.delete('new-pod');
    expect(old.messages.at(-1)).toMatchObject({ kind: 'del', uid: 'new-pod' });
    expect(fresh.messages.at(-1)).toMatchObject({ kind: 'del', uid: 'new-pod' });
  });

  it('treats an unsolicited datagram from ztunnel as a protocol error and closes that connection', async () => {
    const client = await connect();
    await client.waitFor(() => client.snapshotSent);
    await client.sendUnsolicited();
    await client.waitFor(() => client.closed);
    expect(server.connections()).toHaveLength(0);
    await expect(registry.add(pod('after'), openOwnNamespace())).rejects.toMatchObject({ code: 'ZDS_NO_CONNECTION' });
  });

  it('rejects an oversized message at the source, without sending anything or dropping the connection', async () => {
    const client = await connect();
    await client.waitFor(() => client.snapshotSent);
    const huge = { uid: 'u'.repeat(2000), name: 'n', namespace: 'ns', serviceAccount: 'sa' };
    await expect(registry.add(huge, openOwnNamespace())).rejects.toMatchObject({ code: 'ZDS_MESSAGE_TOO_LARGE', retryable: false });
    expect(client.messages).toHaveLength(1); // only snapshot_sent
    expect(server.connections()).toMatchObject([{ state: 'ready' }]);
  });

  it('owns netns handles: same namespace keeps the old handle, a new sandbox replaces it', async () => {
    const client = await connect();
    await client.waitFor(() => client.snapshotSent);
    const first = openOwnNamespace('net');
    const same = openOwnNamespace('net');
    const other = openOwnNamespace('uts'); // a different inode, standing in for a new sandbox
    await registry.add(pod('p'), first);
    await registry.add(pod('p'), same);
    expect(same.closed).toBe(true);
    expect(first.closed).toBe(false);
    await registry.add(pod('p'), other);
    expect(first.closed).toBe(true);
    expect(client.running.get('p')?.inode).toBe(other.ino);
    await registry.delete('p');
    expect(other.closed).toBe(true);
  });

  it('1000 adds and deletes leak no fds', async () => {
    const client = await connect();
    await client.waitFor(() => client.snapshotSent);
    const before = fdCount();
    for (let i = 0; i < 1000; i++) await registry.add(pod(`leak-${i}`), openOwnNamespace());
    expect(client.running.size).toBe(1000);
    for (let i = 0; i < 1000; i++) await registry.delete(`leak-${i}`);
    expect(client.running.size).toBe(0);
    expect(fdCount()).toBe(before);
  }, 30_000);
});

async function waitUntil(predicate: () => boolean, ms = 2000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}
