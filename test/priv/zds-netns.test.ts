// Privileged: what ztunnel receives over ZDS is the pod's own network namespace.
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { NativeNetAddon } from '../../src/addon/net-addon.js';
import { PodRegistry } from '../../src/zds/registry.js';
import { ZdsServer } from '../../src/zds/server.js';
import { FakeZtunnel } from '../helpers/fake-ztunnel.js';
import { createNetns, deleteAllNetns, privilegedSkipReason, requirePrivilegedInCi } from '../helpers/netns.js';

requirePrivilegedInCi();
const skip = privilegedSkipReason();

describe.skipIf(skip)(`ZDS hands over the pod netns${skip ? ` — skipped: ${skip}` : ''}`, () => {
  afterAll(() => deleteAllNetns());

  it('the fd ztunnel receives is a netns whose inode equals the pod netns', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'zds-priv-'));
    const addon = new NativeNetAddon();
    const server: ZdsServer = new ZdsServer({ socketPath: join(dir, 'z.sock'), snapshot: () => registry.snapshot() });
    const registry: PodRegistry = new PodRegistry(server);
    server.start();
    const pods = [createNetns('zds'), createNetns('zds')];
    const client = await FakeZtunnel.connect(join(dir, 'z.sock'));
    try {
      await client.waitFor(() => client.snapshotSent);
      for (const [i, ns] of pods.entries()) {
        await registry.add({ uid: `pod-${i}`, name: ns.name, namespace: 'test', serviceAccount: 'sa' }, addon.openNetns(ns.path));
      }
      for (const [i, ns] of pods.entries()) {
        expect(client.running.get(`pod-${i}`)?.inode).toBe(statSync(ns.path).ino);
      }
      expect(pods[0] && statSync(pods[0].path).ino).not.toBe(pods[1] && statSync(pods[1].path).ino);
    } finally {
      client.close();
      server.close();
      registry.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
