// The host side in a real namespace standing in for the node: the golden probe SNAT rule over
// the probe sets, pod IPs coming and going with their UIDs, IP reuse, a restart (flush, then
// re-add and prune), drift, cleanup and the missing-kubelet failure. The nft binary, run through
// `ip netns exec`, is the independent witness of what the kernel holds.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { NativeNetAddon, type NetnsHandle } from '../../src/addon/net-addon.js';
import { currentThreadNetns, fdCount } from '../helpers/netns-files.js';
import { HostDataplane } from '../../src/host/host-dataplane.js';
import { defaultRuleSettings } from '../../src/rules/settings.js';
import {
  createNetns,
  deleteAllNetns,
  deleteNetns,
  execIn,
  nftRuleset,
  privilegedSkipReason,
  requirePrivilegedInCi,
  type TestNetns,
} from '../helpers/netns.js';

requirePrivilegedInCi();
const skip = privilegedSkipReason();

const TABLE = ['inet', 'istio-ambient-nat'];
const V4 = 'istio-inpod-probes-v4';
const V6 = 'istio-inpod-probes-v6';

/** What `nft -j list set` shows: IP → comment ('' without one). */
function setContents(node: TestNetns, set: string): Record<string, string> {
  const doc = JSON.parse(execIn(node.name, ['nft', '-j', 'list', 'set', ...TABLE, set])) as {
    nftables: Array<{ set?: { elem?: Array<string | { elem: { val: string; comment?: string } }> } }>;
  };
  const out: Record<string, string> = {};
  for (const e of doc.nftables.find((i) => i.set)?.set?.elem ?? []) {
    if (typeof e === 'string') out[e] = '';
    else out[e.elem.val] = e.elem.comment ?? '';
  }
  return out;
}

describe.skipIf(skip)(`host probe SNAT and probe sets in a real namespace${skip ? ` — skipped: ${skip}` : ''}`, () => {
  const addon = skip ? (undefined as never) : new NativeNetAddon();
  const jsThreadNetns = currentThreadNetns();
  const settings = defaultRuleSettings({ ipv6: true });
  let node: TestNetns;
  let hostNetns: NetnsHandle;
  let fdsBefore = 0;
  const tmpDirs: string[] = [];

  beforeAll(() => {
    addon.warmUp();
    fdsBefore = fdCount();
  });

  afterEach(() => {
    hostNetns?.close();
    if (node) deleteNetns(node);
    for (const d of tmpDirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  afterAll(() => {
    deleteAllNetns();
    expect(currentThreadNetns()).toEqual(jsThreadNetns);
    expect(fdCount()).toBe(fdsBefore);
  });

  function newNode(): void {
    node = createNetns('host');
    hostNetns = addon.openNetns(node.path);
  }

  function dataplane(opts: { ipv6?: boolean; kubeletUid?: number; procDir?: string; intervalMs?: number } = {}): HostDataplane {
    return new HostDataplane({
      addon,
      hostNetns,
      settings: opts.ipv6 === false ? defaultRuleSettings({ ipv6: false }) : settings,
      procDir: opts.procDir ?? '/nonexistent-proc',
      ...(opts.kubeletUid !== undefined || opts.procDir === undefined ? { kubeletUid: opts.kubeletUid ?? 1000 } : {}),
      ...(opts.intervalMs !== undefined ? { kubeletLookupIntervalMs: opts.intervalMs } : {}),
    });
  }

  it('start: the golden SNAT rule over empty sets; verify in sync; flushes what a previous run left', async () => {
    newNode();
    // A previous agent left a set with an element (and no rules).
    execIn(node.name, [
      'nft',
      `add table inet istio-ambient-nat; add set inet istio-ambient-nat ${V4} { type ipv4_addr; }; add element inet istio-ambient-nat ${V4} { 10.9.9.9 comment "old-pod" }`,
    ]);
    const host = dataplane();
    await host.start();
    const ruleset = nftRuleset(node);
    expect(ruleset).toMatch(
      /meta l4proto tcp meta skuid 1000 ip daddr @istio-inpod-probes-v4 counter packets 0 bytes 0 snat ip to 169\.254\.7\.127/,
    );
    expect(ruleset).toMatch(
      /meta l4proto tcp meta skuid 1000 ip6 daddr @istio-inpod-probes-v6 counter packets 0 bytes 0 snat ip6 to fd16:9254:7127:1337:ffff:ffff:ffff:ffff/,
    );
    expect(ruleset).toContain('type nat hook postrouting priority srcnat; policy accept;');
    expect(setContents(node, V4)).toEqual({});
    expect(setContents(node, V6)).toEqual({});
    expect(await host.verify()).toEqual({ inSync: true, missing: [], extra: [] });
    // Starting again (the agent restarted) keeps exactly one rule per family.
    await host.start();
    expect(nftRuleset(node).match(/skuid 1000/g)).toHaveLength(2);
  });

  it('pods enrolled and removed: UIDs as comments, IP reuse, UID-checked removal', async () => {
    newNode();
    const host = dataplane();
    await host.start();
    await host.podEnrolled('uid-a', ['10.1.0.5', 'fd00:1::5']);
    await host.podEnrolled('uid-b', ['10.1.0.6']);
    expect(setContents(node, V4)).toEqual({ '10.1.0.5': 'uid-a', '10.1.0.6': 'uid-b' });
    expect(setContents(node, V6)).toEqual({ 'fd00:1::5': 'uid-a' });
    expect(await host.probeSets.list()).toEqual(
      new Map([
        ['10.1.0.5', 'uid-a'],
        ['10.1.0.6', 'uid-b'],
        ['fd00:1::5', 'uid-a'],
      ]),
    );

    // uid-a is gone without a removal and its IP is reused by uid-c: the new UID wins.
    await host.podEnrolled('uid-c', ['10.1.0.5']);
    expect(setContents(node, V4)['10.1.0.5']).toBe('uid-c');

    // The late removal of uid-a must not take uid-c's entry.
    await host.podRemoved('uid-a', ['10.1.0.5', 'fd00:1::5']);
    expect(setContents(node, V4)).toEqual({ '10.1.0.5': 'uid-c', '10.1.0.6': 'uid-b' });
    expect(setContents(node, V6)).toEqual({});
    await host.podRemoved('uid-c', ['10.1.0.5']);
    await host.podRemoved('uid-c', ['10.1.0.5']); // twice: absent is fine
    expect(setContents(node, V4)).toEqual({ '10.1.0.6': 'uid-b' });
  });

  it('restart: a new dataplane flushes the sets, syncEnrolled re-adds and prunes (only when every pod has an IP)', async () => {
    newNode();
    const first = dataplane();
    await first.start();
    await first.podEnrolled('uid-a', ['10.1.0.5']);
    await first.podEnrolled('uid-gone', ['10.1.0.7', 'fd00:1::7']);

    const second = dataplane();
    await second.start();
    expect(setContents(node, V4)).toEqual({});
    // Something re-added between the flush and the kube sync (or a stale entry): pruned later.
    execIn(node.name, ['nft', `add element inet istio-ambient-nat ${V4} { 10.1.0.99 comment "stale" }`]);

    await second.syncEnrolled([
      { uid: 'uid-a', ips: ['10.1.0.5', 'fd00:1::5'] },
      { uid: 'uid-pending', ips: [] },
    ]);
    expect(second.lastSync).toMatchObject({ pruneApplied: false, added: 2 });
    expect(setContents(node, V4)).toEqual({ '10.1.0.5': 'uid-a', '10.1.0.99': 'stale' });

    await second.syncEnrolled([
      { uid: 'uid-a', ips: ['10.1.0.5', 'fd00:1::5'] },
      { uid: 'uid-pending', ips: ['10.1.0.8'] },
    ]);
    expect(second.lastSync).toMatchObject({ pruneApplied: true, added: 1, pruned: 1, transactions: 1 });
    expect(setContents(node, V4)).toEqual({ '10.1.0.5': 'uid-a', '10.1.0.8': 'uid-pending' });
    expect(setContents(node, V6)).toEqual({ 'fd00:1::5': 'uid-a' });
    expect(await second.verify()).toMatchObject({ inSync: true });
  });

  it('startup sync of 300 pods is one transaction and the kernel holds all of them', async () => {
    newNode();
    const host = dataplane();
    await host.start();
    const pods = Array.from({ length: 300 }, (_, i) => ({ uid: `pod-${i}`, ips: [`10.2.${i >> 8}.${i & 0xff}`] }));
    await host.syncEnrolled(pods);
    expect(host.lastSync).toMatchObject({ added: 300, transactions: 1 });
    const v4 = setContents(node, V4);
    expect(Object.keys(v4)).toHaveLength(300);
    expect(v4['10.2.1.43']).toBe('pod-299');
  });

  it('IPv6 off: no v6 set or rule, IPv6 pod IPs skipped', async () => {
    newNode();
    const host = dataplane({ ipv6: false });
    await host.start();
    expect(nftRuleset(node)).not.toContain(V6);
    await host.podEnrolled('uid-a', ['10.1.0.5', 'fd00:1::5']);
    expect(setContents(node, V4)).toEqual({ '10.1.0.5': 'uid-a' });
    expect(await host.verify()).toMatchObject({ inSync: true });
  });

  it('verify finds drift after tampering with the rules and with the sets', async () => {
    newNode();
    const host = dataplane();
    await host.start();
    await host.podEnrolled('uid-a', ['10.1.0.5']);
    execIn(node.name, ['nft', 'flush chain inet istio-ambient-nat postrouting']);
    const rulesGone = await host.verify();
    expect(rulesGone.inSync).toBe(false);
    expect(rulesGone.missing.filter((d) => d.kind === 'rule')).toHaveLength(2);

    execIn(node.name, ['nft', 'delete table inet istio-ambient-nat; add table inet istio-ambient-nat']);
    const setsGone = await host.verify();
    expect(setsGone.inSync).toBe(false);
    expect(setsGone.missing.map((d) => d.text)).toEqual(
      expect.arrayContaining([`set ${V4} { type ipv4_addr ; }`, `set ${V6} { type ipv6_addr ; }`]),
    );

    await host.start(); // repairs
    expect(await host.verify()).toMatchObject({ inSync: true });
  });

  it('cleanup removes the table with the rules and the sets; twice is fine; other tables stay', async () => {
    newNode();
    execIn(node.name, ['nft', 'add table inet keep-me']);
    const host = dataplane();
    await host.start();
    await host.podEnrolled('uid-a', ['10.1.0.5']);
    await host.cleanup();
    await host.cleanup();
    const tables = execIn(node.name, ['nft', 'list', 'tables']);
    expect(tables).not.toContain('istio-ambient-nat');
    expect(tables).toContain('keep-me');
  });

  it('the kubelet UID from a procDir; no kubelet there gives the clear error after the retries', async () => {
    newNode();
    const procDir = mkdtempSync(join(tmpdir(), 'ana-proc-'));
    tmpDirs.push(procDir);
    mkdirSync(join(procDir, '1'));
    writeFileSync(join(procDir, '1', 'comm'), 'systemd\n');
    writeFileSync(join(procDir, '1', 'status'), 'Name:\tsystemd\nUid:\t0\t0\t0\t0\n');
    const t0 = Date.now();
    await expect(dataplane({ procDir, intervalMs: 5 }).start()).rejects.toThrow(
      `no kubelet process (kubelet, kubelite, k3s) found in ${procDir}`,
    );
    expect(Date.now() - t0).toBeLessThan(5_000);
    expect(execIn(node.name, ['nft', 'list', 'tables'])).not.toContain('istio-ambient-nat');

    mkdirSync(join(procDir, '4242'));
    writeFileSync(join(procDir, '4242', 'comm'), 'kubelite\n');
    writeFileSync(join(procDir, '4242', 'status'), 'Name:\tkubelite\nUid:\t4321\t4321\t4321\t4321\n');
    const host = dataplane({ procDir, intervalMs: 5 });
    await host.start();
    expect(host.kubeletUid).toBe(4321);
    expect(nftRuleset(node)).toContain('meta skuid 4321 ip daddr @istio-inpod-probes-v4');
  });
});
