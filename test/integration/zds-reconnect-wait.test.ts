// Issue 17 over real SOCK_SEQPACKET sockets: pod adds wait for a restarting ztunnel and are
// answered by the next connection's snapshot acks (or an add right after the snapshot), each pod
// handed to each ztunnel once.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PodRegistry } from '../../src/zds/registry.js';
import { ZdsServer } from '../../src/zds/server.js';
import { FakeZtunnel, type FakeZtunnelOptions } from '../helpers/fake-ztunnel.js';
import { openOwnNamespace } from '../helpers/netns-files.js';

const pod = (uid: string) => ({ uid, name: `pod-${uid}`, namespace: 'default', serviceAccount: 'sa' });
const outcome = (p: Promise<unknown>): Promise<string> =>
  p.then(
    () => 'ok',
    (e: Error) => e.message,
  );

describe('ZDS server: adds wait for a restarting ztunnel', () => {
  let dir: string;
  let socketPath: string;
  let server: ZdsServer;
  let registry: PodRegistry;
  const clients: FakeZtunnel[] = [];
  const waits: boolean[] = [];

  async function connect(options: FakeZtunnelOptions = {}): Promise<FakeZtunnel> {
    const client = await FakeZtunnel.connect(socketPath, options);
    clients.push(client);
    return client;
  }

  const adds = (ztunnel: FakeZtunnel, uid: string): number => ztunnel.messages.filter((m) => m.kind === 'add' && m.uid === uid).length;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'zds-wait-'));
    socketPath = join(dir, 'ztunnel.sock');
    waits.length = 0;
    server = new ZdsServer({
      socketPath,
      snapshot: () => registry.snapshot(),
      ztunnelWaitMs: 2000,
      onWaited: (_s, enrolled) => waits.push(enrolled),
    });
    registry = new PodRegistry(server);
    server.start();
  });

  afterEach(() => {
    for (const c of clients.splice(0)) c.close();
    server.close();
    registry.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("no ztunnel: the adds are answered by the new connection's snapshot acks, one add each and no add after it", async () => {
    const pending = ['a', 'b', 'c'].map((uid) => outcome(registry.add(pod(uid), openOwnNamespace())));
    await new Promise((r) => setTimeout(r, 100));
    const z = await connect();
    expect(await Promise.all(pending)).toEqual(['ok', 'ok', 'ok']);
    await z.waitFor(() => z.snapshotSent);
    expect(z.messages.map((m) => `${m.kind}:${m.uid ?? ''}`)).toEqual(['add:a', 'add:b', 'add:c', 'snapshotSent:']);
    expect(waits).toEqual([true, true, true]);
  });

  it('a pod registered while the snapshot is under way goes out as an add after snapshot_sent', async () => {
    registry.adopt(pod('early'), openOwnNamespace()); // registered without an announcement: in the snapshot
    const z = await connect({ ackDelayMs: 50 });
    await z.waitFor(() => z.messages.length >= 1);
    const late = registry.add(pod('late'), openOwnNamespace());
    await late;
    expect(z.messages.map((m) => `${m.kind}:${m.uid ?? ''}`)).toEqual(['add:early', 'snapshotSent:', 'add:late']);
  });

  it('a pod deleted while the snapshot is under way: its entry was already written (ahead of the acks), the del follows snapshot_sent', async () => {
    registry.adopt(pod('a'), openOwnNamespace());
    registry.adopt(pod('b'), openOwnNamespace());
    const z = await connect({ ackDelayMs: 80 });
    await z.waitFor(() => z.messages.length >= 1);
    await registry.delete('b'); // closes b's handle while the snapshot's acks are still due
    await z.waitFor(() => z.snapshotSent);
    await z.waitFor(() => z.messages.length >= 4);
    expect(z.messages.map((m) => `${m.kind}:${m.uid ?? ''}`)).toEqual(['add:a', 'add:b', 'snapshotSent:', 'del:b']);
    expect(z.closed).toBe(false);
  });

  it('a connection that dies mid-burst of 30 adds, replaced 0.3 s later: all 30 succeed, each added once to the new ztunnel', async () => {
    const first = await connect({ dieOnRequest: 12, ackDelayMs: 2 });
    await first.waitFor(() => first.snapshotSent);
    const uids = Array.from({ length: 30 }, (_, i) => `p${i}`);
    const burst = uids.map((uid) => outcome(registry.add(pod(uid), openOwnNamespace())));
    await first.waitFor(() => first.closed, 3000);
    await new Promise((r) => setTimeout(r, 300));
    const second = await connect();
    expect(await Promise.all(burst)).toEqual(Array(30).fill('ok'));
    for (const uid of uids) expect(adds(second, uid), uid).toBe(1);
    expect(second.running.size).toBe(30);
    expect(waits.filter(Boolean).length).toBe(waits.length);
    expect(waits.length).toBeGreaterThan(0);
  });

  it("an error ack for a pod in the new snapshot fails that pod's waiting add with ztunnel's text; the others succeed", async () => {
    const ok = outcome(registry.add(pod('ok'), openOwnNamespace()));
    const bad = outcome(registry.add(pod('bad'), openOwnNamespace()));
    await connect({ ackError: (req) => ('add' in req && req.add.uid === 'bad' ? 'failure to start proxy : Bind' : undefined) });
    expect(await Promise.all([ok, bad])).toEqual(['ok', 'ztunnel rejected pod bad: failure to start proxy : Bind']);
  });

  it('adds go to the newest ztunnel only; deletes of other pods are not held up by a waiting add', async () => {
    const older = await connect();
    await older.waitFor(() => older.snapshotSent);
    await registry.add(pod('kept'), openOwnNamespace());
    older.close();
    await new Promise((r) => setTimeout(r, 50));
    const waiting = outcome(registry.add(pod('w'), openOwnNamespace()));
    const started = Date.now();
    await registry.delete('kept');
    expect(Date.now() - started).toBeLessThan(200);
    const newer = await connect();
    expect(await waiting).toBe('ok');
    expect(adds(newer, 'w')).toBe(1);
    expect(adds(older, 'w')).toBe(0);
  });
});
