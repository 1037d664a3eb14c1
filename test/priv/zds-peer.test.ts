// The benchmarks' native ZDS peer against the agent's own ZDS server: it acks an add only after
// ztunnel's listeners exist inside the pod netns, closes them on del, and takes a snapshot after
// the server restarts.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { NativeNetAddon } from '../../src/addon/net-addon.js';
import { PodRegistry } from '../../src/zds/registry.js';
import { ZdsServer } from '../../src/zds/server.js';
import { NativeZdsPeer } from '../../bench/zds-peer.js';
import { createNetns, deleteAllNetns, execIn, privilegedSkipReason, requirePrivilegedInCi } from '../helpers/netns.js';

requirePrivilegedInCi();
const skip = privilegedSkipReason();

/** "proto port" of every listening socket in the namespace (ss, an independent witness). */
function listening(ns: string): string[] {
  const tcp = execIn(ns, ['ss', '-H', '-ltn'])
    .split('\n')
    .filter(Boolean)
    .map((l) => `tcp ${l.trim().split(/\s+/)[3]}`);
  const udp = execIn(ns, ['ss', '-H', '-lun'])
    .split('\n')
    .filter(Boolean)
    .map((l) => `udp ${l.trim().split(/\s+/)[3]}`);
  return [...tcp, ...udp].sort();
}

const LISTENERS = ['tcp 0.0.0.0:15001', 'tcp 0.0.0.0:15006', 'tcp 0.0.0.0:15008', 'tcp 127.0.0.1:15053', 'udp 127.0.0.1:15053'];

describe.skipIf(skip)(`native ZDS peer${skip ? ` — skipped: ${skip}` : ''}`, () => {
  afterAll(() => deleteAllNetns());

  it('binds the listeners in the pod netns before acking, closes them on del, resyncs after a restart', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'zds-peer-'));
    const socketPath = join(dir, 'z.sock');
    const addon = new NativeNetAddon();
    let server: ZdsServer = new ZdsServer({ socketPath, snapshot: () => registry.snapshot() });
    const registry: PodRegistry = new PodRegistry(server);
    server.start();
    const peer = NativeZdsPeer.start(socketPath);
    const [a, b] = [createNetns('peer'), createNetns('peer')];
    try {
      await peer.waitFor(() => peer.ready, 5000, 'the first snapshot');
      await registry.add({ uid: 'uid-a', name: 'a', namespace: 'bench', serviceAccount: 'sa' }, addon.openNetns(a.path));
      expect(listening(a.name)).toEqual(LISTENERS);
      await registry.add({ uid: 'uid-b', name: 'b', namespace: 'bench', serviceAccount: 'sa' }, addon.openNetns(b.path));
      expect(listening(b.name)).toEqual(LISTENERS);
      // The peer reports each pod on its stdout after acking it: that line may trail the ack.
      await peer.waitFor(() => peer.pods.size === 2, 5000, 'both pods reported by the peer');
      expect([...peer.pods.keys()].sort()).toEqual(['uid-a', 'uid-b']);
      expect(peer.addAckMs).toHaveLength(2);
      expect(peer.addAckMs.every((ms) => ms > 0 && ms < 1000)).toBe(true);

      await registry.delete('uid-a');
      await peer.waitFor(() => !peer.pods.has('uid-a'), 2000, 'the del');
      expect(listening(a.name)).toEqual([]);

      // A new server whose snapshot still has b: the peer reconnects and keeps b only.
      server.close();
      server = new ZdsServer({ socketPath, snapshot: () => registry.snapshot() });
      server.start();
      await peer.waitFor(() => peer.connectionCount === 2 && peer.ready, 5000, 'the second snapshot');
      expect([...peer.pods.keys()]).toEqual(['uid-b']);
      expect(listening(b.name)).toEqual(LISTENERS);
      expect(peer.nacks).toEqual([]);
    } finally {
      await peer.stop();
      server.close();
      registry.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
