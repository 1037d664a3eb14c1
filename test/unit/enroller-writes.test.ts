// The ADD path's state-file work: exactly one write per ADD (with the rules' stamp, as soon as the
// rules are in, so before the ADD is answered and while ztunnel's ack is still due), a failed
// write undoes the enrolment, and a DEL naming only the pod finds it
// through the store's index instead of a scan.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { PodEnroller, type CniPod } from '../../src/standalone/enroller.js';
import { PodStateStore } from '../../src/standalone/state-store.js';
import { NftablesInpodRules } from '../../src/rules/nftables-manager.js';
import { defaultRuleSettings } from '../../src/rules/settings.js';
import { PodRegistry } from '../../src/zds/registry.js';
import type { ZdsSink } from '../../src/zds/server.js';
import { FakeNetAddon } from '../fakes/fake-net-addon.js';

const POD: CniPod = { uid: 'uid-1', name: 'web', namespace: 'shop', netnsPath: '/var/run/netns/web', containerId: 'c1', ips: ['10.0.0.5'] };

class CountingStore extends PodStateStore {
  puts = 0;
  failNext = false;
  /** Fails this many writes, then writes again. */
  failTimes = 0;
  override put(pod: Parameters<PodStateStore['put']>[0]): void {
    this.puts++;
    if (this.failNext || this.failTimes-- > 0) throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
    super.put(pod);
  }
}

describe('PodEnroller state writes', () => {
  let dir: string;
  let addon: FakeNetAddon;
  let store: CountingStore;
  let zds: { added: string[]; deleted: string[]; ack?: Promise<void> } & ZdsSink;
  let enroller: PodEnroller;
  let registry: PodRegistry;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'enroller-'));
    addon = new FakeNetAddon();
    addon.addNetns(POD.netnsPath);
    store = new CountingStore(dir);
    zds = {
      added: [],
      deleted: [],
      async podAdded(uid) {
        zds.added.push(uid);
        await zds.ack;
      },
      async podDeleted(uid) {
        zds.deleted.push(uid);
      },
    };
    registry = new PodRegistry(zds);
    const rules = new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: false }));
    enroller = new PodEnroller({ addon, rules, registry, store, netnsRoot: '', excludeNamespaces: [] });
  });
  afterEach(() => {
    registry.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('writes the state file once per ADD, with the rules stamp in it', async () => {
    await enroller.add(POD);
    expect(store.puts).toBe(1);
    const saved = JSON.parse(readFileSync(join(store.dir, readdirName(store)), 'utf8')) as { uid: string; nftGeneration?: number };
    expect(saved).toMatchObject({ uid: 'uid-1', nftGeneration: 2 });
    await enroller.add(POD); // a repeated ADD: one more write, still one file
    expect(store.puts).toBe(2);
    expect(store.list()).toHaveLength(1);
  });

  it('records the pod as soon as its rules are in, while the ack from ztunnel is still due', async () => {
    let ack!: () => void;
    zds.ack = new Promise<void>((resolve) => (ack = resolve));
    let answered = false;
    const added = enroller.add(POD).then(() => (answered = true));
    await vi.waitFor(() => expect(store.puts).toBe(1), { timeout: 2_000, interval: 1 });
    expect(store.get('uid-1')).toMatchObject({ uid: 'uid-1', nftGeneration: 2 });
    expect(zds.added).toEqual(['uid-1']);
    expect(answered).toBe(false);
    ack();
    await added;
    expect(store.puts).toBe(1); // the answer does not write again
  });

  it('an early write that failed is tried again before the answer', async () => {
    store.failTimes = 1;
    await enroller.add(POD);
    expect(store.puts).toBe(2);
    expect(store.get('uid-1')).toMatchObject({ uid: 'uid-1' });
    expect(zds.deleted).toEqual([]);
  });

  it('a failed write fails the ADD and takes the new pod back out of ztunnel and its netns', async () => {
    store.failNext = true;
    await expect(enroller.add(POD)).rejects.toThrow(/cannot record the pod .*ENOSPC/);
    expect(zds.added).toEqual(['uid-1']);
    expect(zds.deleted).toEqual(['uid-1']);
    expect(registry.has('uid-1')).toBe(false);
    expect(addon.stepsIn(POD.netnsPath).map((s) => s.op)).toContain('deleteNftTables');
    expect(store.get('uid-1')).toBeUndefined();
  });

  it('finds a pod by namespace and name through the index, and forgets it on remove', async () => {
    await enroller.add(POD);
    expect(enroller.uidOf('shop', 'web')).toBe('uid-1');
    expect(enroller.uidOf('shop', 'other')).toBeUndefined();
    await enroller.remove('uid-1');
    expect(enroller.uidOf('shop', 'web')).toBeUndefined();
  });
});

function readdirName(store: PodStateStore): string {
  return readdirSync(store.dir).find((n) => n.endsWith('.json')) ?? '';
}
