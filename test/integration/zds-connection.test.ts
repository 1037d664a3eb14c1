// ZdsConnection never sends what ztunnel would reject (docs/zds-protocol.md §6), and keeps working.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SeqpacketListener } from '../../src/addon/seqpacket.js';
import { ISTIO_TIMEOUTS, ZdsConnection } from '../../src/zds/connection.js';
import type { WorkloadRequest } from '../../src/zds/codec.js';
import { silentLogger } from '../../src/ops/log.js';
import { FakeZtunnel } from '../helpers/fake-ztunnel.js';
import { openOwnNamespace } from '../helpers/netns-files.js';

describe('ZdsConnection guards', () => {
  let dir: string;
  let listener: SeqpacketListener;
  let conn: ZdsConnection;
  let client: FakeZtunnel;

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'zds-conn-'));
    const accepted = new Promise<ZdsConnection>((resolve) => {
      listener = SeqpacketListener.listen(join(dir, 's'), (socket) => resolve(new ZdsConnection(socket, ISTIO_TIMEOUTS, silentLogger)));
    });
    client = await FakeZtunnel.connect(join(dir, 's'));
    conn = await accepted;
    await conn.handshake(() => []);
  });

  afterEach(() => {
    client.close();
    conn.close('test done');
    listener.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const info = { name: 'n', namespace: 'ns', serviceAccount: 'sa' };
  const refused: [string, WorkloadRequest, boolean, RegExp][] = [
    ['keep after snapshot_sent', { keep: { uid: 'k' } }, false, /keep after snapshot_sent/],
    ['a second snapshot_sent', { snapshotSent: {} }, false, /second snapshot_sent/],
    ['add without workload_info', { add: { uid: 'a' } }, true, /add without workload_info/],
    ['add without an fd', { add: { uid: 'a', workloadInfo: info } }, false, /add without exactly one netns fd/],
    ['del with an fd', { del: { uid: 'd' } }, true, /fd with del/],
  ];
  it.each(refused)('refuses %s before sending anything', async (_name, req, withFd, message) => {
    const netns = withFd ? openOwnNamespace() : undefined;
    await expect(conn.request(req, netns)).rejects.toMatchObject({
      code: 'ZDS_INVALID_MESSAGE',
      retryable: false,
      message: expect.stringMatching(message),
    });
    netns?.close();
    expect(client.messages.map((m) => m.kind)).toEqual(['snapshotSent']);
    expect(conn.state).toBe('ready');
    expect(await conn.request({ del: { uid: 'still-works' } })).toBe('');
  });

  it('refuses a netns handle that was closed while the request waited', async () => {
    const netns = openOwnNamespace();
    netns.close();
    await expect(conn.request({ add: { uid: 'a', workloadInfo: info } }, netns)).rejects.toMatchObject({ code: 'ZDS_INVALID_MESSAGE' });
  });

  it('answers queued requests strictly in order', async () => {
    const uids = Array.from({ length: 20 }, (_, i) => `q${i}`);
    const handles = uids.map(() => openOwnNamespace());
    const results = await Promise.all(uids.map((uid, i) => conn.request({ add: { uid, workloadInfo: info } }, handles[i])));
    for (const h of handles) h.close();
    expect(results.every((r) => r === '')).toBe(true);
    expect(client.messages.slice(1).map((m) => m.uid)).toEqual(uids);
  });
});

describe('ZdsConnection pipelining', () => {
  const info = { name: 'n', namespace: 'ns', serviceAccount: 'sa' };

  it('writes queued requests (and the snapshot) ahead of their acks, at most 32 in flight, and matches acks in order', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'zds-pipe-'));
    let conn: ZdsConnection | undefined;
    let listener: SeqpacketListener | undefined;
    const accepted = new Promise<ZdsConnection>((resolve) => {
      listener = SeqpacketListener.listen(join(dir, 's'), (socket) => resolve(new ZdsConnection(socket, ISTIO_TIMEOUTS, silentLogger)));
    });
    // A ztunnel that takes 40 ms per ack: without pipelining 40 requests take 1.6 s of round trips.
    const client = await FakeZtunnel.connect(join(dir, 's'), { ackDelayMs: 40 });
    const handles = Array.from({ length: 40 }, () => openOwnNamespace());
    try {
      conn = await accepted;
      const snapshot = handles.slice(0, 3).map((netns, i) => ({ uid: `s${i}`, workloadInfo: info, netns }));
      const handshake = conn.handshake(() => snapshot);
      await client.waitFor(() => client.received === 4, 30); // 3 adds + snapshot_sent before the first ack (40 ms)
      await handshake;
      const uids = Array.from({ length: 37 }, (_, i) => `q${i}`);
      const results = Promise.all(uids.map((uid, i) => conn!.request({ add: { uid, workloadInfo: info } }, handles[i + 3])));
      await client.waitFor(() => client.received === 4 + 32, 30); // 32 in flight before the first of them is acked
      await new Promise((resolve) => setTimeout(resolve, 15));
      expect(client.received).toBe(4 + 32); // the 33rd waits for an ack
      expect((await results).every((r) => r === '')).toBe(true);
      expect(client.messages.slice(4).map((m) => m.uid)).toEqual(uids);
      expect(conn.state).toBe('ready');
    } finally {
      for (const h of handles) h.close();
      client.close();
      conn?.close('test done');
      listener?.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
