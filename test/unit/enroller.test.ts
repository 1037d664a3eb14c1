// The standalone enroller's state machine (ADD, DEL, CHECK, restart) against the fake addon, a
// fake ZDS sink and a state store in a temp dir: fast, no root, no sockets. The end-to-end
// versions of these run in test/integration/agent.test.ts and test/priv/.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { systemError } from '../../src/addon/errors.js';
import { NftablesInpodRules } from '../../src/rules/nftables-manager.js';
import { defaultRuleSettings } from '../../src/rules/settings.js';
import { PodEnroller, type CniPod } from '../../src/standalone/enroller.js';
import { PodStateStore } from '../../src/standalone/state-store.js';
import { PodRegistry } from '../../src/zds/registry.js';
import { FakeNetAddon } from '../fakes/fake-net-addon.js';
import { FakeZdsSink } from '../fakes/fake-zds-sink.js';

const listing = readFileSync(new URL('../fixtures/default-inpod.listing.nft', import.meta.url), 'utf8');

function cniPod(name: string, namespace = 'shop'): CniPod {
  return { uid: `uid-${name}`, name, namespace, netnsPath: `/var/run/netns/${name}`, containerId: `c-${name}`, ips: ['10.0.0.7'] };
}

describe('PodEnroller (standalone mode)', () => {
  let dir: string;
  let addon: FakeNetAddon;
  let zds: FakeZdsSink;
  let registry: PodRegistry;
  let store: PodStateStore;

  const enroller = (): PodEnroller =>
    new PodEnroller({
      addon,
      rules: new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: false })),
      registry,
      store,
      netnsRoot: '',
      excludeNamespaces: ['kube-system'],
    });

  /** What a restarted agent has: the same run dir and namespaces, a fresh registry and store. */
  const restart = (): PodEnroller => {
    registry.close();
    zds = new FakeZdsSink();
    registry = new PodRegistry(zds);
    store = new PodStateStore(dir);
    return enroller();
  };

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'enroller-'));
    addon = new FakeNetAddon();
    addon.fresh.listing = listing;
    zds = new FakeZdsSink();
    registry = new PodRegistry(zds);
    store = new PodStateStore(dir);
  });

  afterEach(() => {
    registry.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('ADD: rules installed, ztunnel gets it with service account default, and the pod is recorded once (with the stamp) before the ADD is answered', async () => {
    const ns = addon.addNetns('/var/run/netns/a');
    let recordedBeforeAck = true;
    zds.failAdd = (uid) => {
      recordedBeforeAck = store.get(uid) !== undefined;
      return undefined;
    };
    await enroller().add(cniPod('a'));
    // One state write per ADD (issue 14): after the rules and ztunnel's ack, not before them.
    expect(recordedBeforeAck).toBe(false);
    expect(ns.nftScripts).toHaveLength(1);
    expect(zds.calls).toEqual([
      { op: 'add', uid: 'uid-a', info: { name: 'a', namespace: 'shop', serviceAccount: 'default' }, fdOpen: true },
    ]);
    expect(store.get('uid-a')).toMatchObject({
      netnsPath: '/var/run/netns/a',
      netnsIno: ns.ino,
      ips: ['10.0.0.7'],
      nftGeneration: ns.nftGeneration,
    });
  });

  it('ADD in an excluded namespace does nothing', async () => {
    addon.addNetns('/var/run/netns/dns');
    await enroller().add(cniPod('dns', 'kube-system'));
    expect(addon.runs).toEqual([]);
    expect(zds.calls).toEqual([]);
    expect(store.list()).toEqual([]);
  });

  it('a second ADD of the same pod is idempotent: one record, one registered netns, the rules re-applied', async () => {
    const ns = addon.addNetns('/var/run/netns/a');
    const e = enroller();
    await e.add(cniPod('a'));
    await e.add(cniPod('a'));
    expect(store.list()).toHaveLength(1);
    expect(registry.size).toBe(1);
    expect(addon.openFds).toBe(1);
    expect(ns.rules).toHaveLength(1);
    expect(zds.ops()).toEqual(['add uid-a', 'add uid-a']);
  });

  it('ADD whose rules fail: the error names the rules, the new pod is forgotten everywhere', async () => {
    addon.addNetns('/var/run/netns/a');
    addon.failOn = (step) => (step.op === 'nft' ? systemError('EPERM', -1, 'nft', 'EPERM: operation not permitted') : undefined);
    await expect(enroller().add(cniPod('a'))).rejects.toThrow(/^applying in-pod rules: .*EPERM/);
    expect(store.get('uid-a')).toBeUndefined();
    expect(registry.has('uid-a')).toBe(false);
    expect(zds.ops()).toEqual(['add uid-a', 'del uid-a']);
  });

  it('ADD that ztunnel refuses: retryable, and the pod stays recorded and registered for the next snapshot', async () => {
    addon.addNetns('/var/run/netns/a');
    zds.failAdd = () => FakeZdsSink.noConnection();
    await expect(enroller().add(cniPod('a'))).rejects.toMatchObject({ code: 'ZDS_NO_CONNECTION', retryable: true });
    expect(store.get('uid-a')).toBeDefined();
    expect(registry.snapshot().map((e) => e.uid)).toEqual(['uid-a']);
  });

  it('ADD with a netns path the agent refuses, or one that does not exist, fails and records nothing', async () => {
    const e = enroller();
    await expect(e.add({ ...cniPod('a'), netnsPath: '/tmp/../proc/1/ns/net' })).rejects.toThrow(/refusing netns path/);
    await expect(e.add(cniPod('gone'))).rejects.toThrow(/does not exist \(the sandbox is gone\?\)/);
    expect(store.list()).toEqual([]);
    expect(zds.calls).toEqual([]);
  });

  it('DEL removes the rules, tells ztunnel and forgets the pod; a DEL for an unknown pod succeeds', async () => {
    const ns = addon.addNetns('/var/run/netns/a');
    const e = enroller();
    await e.add(cniPod('a'));
    await e.remove('uid-a');
    expect(ns.nftScripts.at(-1)).toMatch(/^delete table inet/);
    expect(ns.rules).toEqual([]);
    expect(zds.ops()).toEqual(['add uid-a', 'del uid-a']);
    expect(store.get('uid-a')).toBeUndefined();
    expect(addon.openFds).toBe(0);
    await expect(e.remove('uid-nobody')).resolves.toBeUndefined();
  });

  it('CHECK reports drift of an enrolled pod and nothing for an unknown one', async () => {
    const ns = addon.addNetns('/var/run/netns/a');
    const e = enroller();
    await e.add(cniPod('a'));
    ns.listing = listing;
    expect(await e.check('uid-a')).toMatchObject({ inSync: true });
    ns.listing = listing.replace(/\n.*redirect to :15006/, '');
    const drift = await e.check('uid-a');
    expect(drift?.inSync).toBe(false);
    expect(drift?.missing.map((d) => d.kind)).toEqual(['rule']);
    expect(await e.check('uid-nobody')).toBeUndefined();
    expect(e.uidOf('shop', 'a')).toBe('uid-a');
  });

  it('after a restart: live pods are registered for the first snapshot, pods whose sandbox is gone or was replaced are dropped', async () => {
    addon.addNetns('/var/run/netns/live');
    addon.addNetns('/var/run/netns/gone');
    addon.addNetns('/var/run/netns/reused');
    const before = enroller();
    for (const name of ['live', 'gone', 'reused']) await before.add(cniPod(name));
    addon.namespaces.delete('/var/run/netns/gone');
    addon.addNetns('/var/run/netns/reused'); // same path, another namespace (new inode)

    const after = restart();
    expect(after.reopen()).toEqual({ restored: 1, repaired: 0, dropped: 2 });
    expect(registry.snapshot().map((e) => [e.uid, e.netns !== undefined])).toEqual([['uid-live', true]]);
    expect(store.list().map((p) => p.uid)).toEqual(['uid-live']);
    expect(zds.calls).toEqual([]); // the snapshot goes out when ztunnel connects
  });

  it('after a restart: unchanged rules are verified by their stamp (no listing), drifted ones are re-applied', async () => {
    const kept = addon.addNetns('/var/run/netns/kept');
    const drifted = addon.addNetns('/var/run/netns/drifted');
    const before = enroller();
    await before.add(cniPod('kept'));
    await before.add(cniPod('drifted'));
    drifted.nftGeneration++; // another writer committed in that netns ...
    drifted.listing = ''; // ... and our tables are gone

    const after = restart();
    after.reopen();
    addon.runs.length = 0;
    expect(await after.verifyReopened()).toEqual({ restored: 2, repaired: 1, dropped: 0 });
    expect(addon.stepsIn('/var/run/netns/kept').map((s) => s.op)).not.toContain('nft');
    expect(drifted.nftScripts).toHaveLength(2); // the first apply and the repair
    expect(kept.nftScripts).toHaveLength(1);
    expect(store.get('uid-drifted')?.nftGeneration).toBe(drifted.nftGeneration); // the new stamp
  });
});
