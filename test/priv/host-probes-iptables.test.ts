// The iptables backend's host side in a real namespace standing in for the node: Istio's golden
// ISTIO_POSTRT chain over kernel ip sets written through netlink (no ipset binary at runtime;
// the `ipset`, `iptables-save` and `nft` binaries are only the independent witnesses here), the
// UID-tagged membership, restarts, drift, cleanup, and taking over a node Istio's agent ran on
// (in both backends): exactly one of everything afterwards, the membership reconciled.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { NativeNetAddon, type NetnsHandle } from '../../src/addon/net-addon.js';
import { currentThreadNetns, fdCount } from '../helpers/netns-files.js';
import { main } from '../../src/cli/main.js';
import { HostDataplane } from '../../src/host/host-dataplane.js';
import { IptablesHostRules } from '../../src/rules/iptables-host-manager.js';
import { defaultRuleSettings } from '../../src/rules/settings.js';
import { readIstioGolden } from '../fixtures/istio-golden.js';
import {
  createNetns,
  deleteAllNetns,
  deleteNetns,
  execIn,
  privilegedSkipReason,
  requirePrivilegedInCi,
  type TestNetns,
} from '../helpers/netns.js';

requirePrivilegedInCi();
const skip = privilegedSkipReason();

const V4 = 'istio-inpod-probes-v4';
const V6 = 'istio-inpod-probes-v6';
const V6_SNAT = 'fd16:9254:7127:1337:ffff:ffff:ffff:ffff';
const SAVED_V4_RULE = `-A ISTIO_POSTRT -p tcp -m owner --socket-exists -m set --match-set ${V4} dst -j SNAT --to-source 169.254.7.127`;
const SAVED_V6_RULE = `-A ISTIO_POSTRT -p tcp -m owner --socket-exists -m set --match-set ${V6} dst -j SNAT --to-source ${V6_SNAT}`;

/** `ipset save <set>` members: IP → comment. */
function members(node: TestNetns, set: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of execIn(node.name, ['ipset', 'save', set]).split('\n')) {
    const m = /^add \S+ (\S+)(?: comment "([^"]*)")?$/.exec(line);
    if (m) out[m[1]!] = m[2] ?? '';
  }
  return out;
}

/** The ISTIO lines of `iptables-save -t nat` (or ip6tables-save). */
function natLines(node: TestNetns, family: 4 | 6 = 4): string[] {
  const save = execIn(node.name, [family === 4 ? 'iptables-save' : 'ip6tables-save', '-t', 'nat']);
  return save.split('\n').filter((l) => l.includes('ISTIO'));
}

const createLines = (node: TestNetns): string[] =>
  execIn(node.name, ['ipset', 'save'])
    .split('\n')
    .filter((l) => l.startsWith('create '));

describe.skipIf(skip)(`iptables host probe rules and ip sets in a real namespace${skip ? ` — skipped: ${skip}` : ''}`, () => {
  const addon = skip ? (undefined as never) : new NativeNetAddon();
  const jsThreadNetns = skip ? undefined : currentThreadNetns();
  const settings = defaultRuleSettings({ ipv6: true });
  let node: TestNetns | undefined;
  let hostNetns: NetnsHandle | undefined;
  let fdsBefore = 0;

  beforeAll(() => {
    addon.warmUp();
    fdsBefore = fdCount();
  });

  afterEach(() => {
    hostNetns?.close();
    hostNetns = undefined;
    if (node) deleteNetns(node);
    node = undefined;
  });

  afterAll(() => {
    deleteAllNetns();
    expect(currentThreadNetns()).toEqual(jsThreadNetns);
    expect(fdCount()).toBe(fdsBefore);
  });

  function newNode(): TestNetns {
    node = createNetns('iptnode');
    hostNetns = addon.openNetns(node.path);
    return node;
  }

  const dataplane = (opts: { ipv6?: boolean; backend?: 'iptables' | 'nftables' } = {}): HostDataplane =>
    new HostDataplane({
      addon,
      hostNetns: hostNetns!,
      settings: opts.ipv6 === false ? defaultRuleSettings({ ipv6: false }) : settings,
      backend: opts.backend ?? 'iptables',
      procDir: '/nonexistent-proc', // iptables needs no kubelet UID: no lookup
      ...(opts.backend === 'nftables' ? { kubeletUid: 1000 } : {}),
    });

  it('the restore input is byte for byte the golden hostprobe text (v4, v6)', () => {
    const inputs = new IptablesHostRules(addon, settings).restoreInputs();
    const golden = readIstioGolden('iptables/hostprobe_ipv6.golden').replace(/^iptables-save\nip6tables-save\n/, '');
    expect(`${inputs.v4}${inputs.v6}`).toBe(`${golden}\n`);
  });

  it('start: Istio ip sets (hash:ip, comments) and one ISTIO_POSTRT chain first in POSTROUTING, per family; no kubelet needed', async () => {
    const n = newNode();
    const host = dataplane();
    await host.start();
    expect(createLines(n)).toEqual([
      `create ${V4} hash:ip family inet hashsize 1024 maxelem 65536 comment`,
      `create ${V6} hash:ip family inet6 hashsize 1024 maxelem 65536 comment`,
    ]);
    expect(natLines(n)).toEqual([':ISTIO_POSTRT - [0:0]', '-A POSTROUTING -j ISTIO_POSTRT', SAVED_V4_RULE]);
    expect(natLines(n, 6)).toEqual([':ISTIO_POSTRT - [0:0]', '-A POSTROUTING -j ISTIO_POSTRT', SAVED_V6_RULE]);
    expect(execIn(n.name, ['nft', 'list', 'tables'])).not.toContain('istio-ambient');
    expect(await host.verify()).toEqual({ inSync: true, missing: [], extra: [] });
    // Again (a restart): the rules are adopted as they are, nothing is duplicated.
    await host.start();
    expect(natLines(n)).toEqual([':ISTIO_POSTRT - [0:0]', '-A POSTROUTING -j ISTIO_POSTRT', SAVED_V4_RULE]);
    expect(createLines(n)).toHaveLength(2);
  });

  it('pods enrolled and removed: UIDs as comments, IP reuse replaces the UID, UID-checked removal', async () => {
    const n = newNode();
    const host = dataplane();
    await host.start();
    await host.podEnrolled('uid-a', ['10.1.0.5', 'fd00:1::5']);
    await host.podEnrolled('uid-b', ['10.1.0.6']);
    expect(members(n, V4)).toEqual({ '10.1.0.5': 'uid-a', '10.1.0.6': 'uid-b' });
    expect(members(n, V6)).toEqual({ 'fd00:1::5': 'uid-a' });
    await host.podEnrolled('uid-c', ['10.1.0.5']); // the IP reused before uid-a's removal
    expect(members(n, V4)['10.1.0.5']).toBe('uid-c');
    await host.podRemoved('uid-a', ['10.1.0.5', 'fd00:1::5']);
    expect(members(n, V4)).toEqual({ '10.1.0.5': 'uid-c', '10.1.0.6': 'uid-b' });
    expect(members(n, V6)).toEqual({});
    await host.podRemoved('uid-c', ['10.1.0.5']);
    await host.podRemoved('uid-c', ['10.1.0.5']);
    expect(members(n, V4)).toEqual({ '10.1.0.6': 'uid-b' });
  });

  it('restart: sets flushed, syncEnrolled re-adds in one batch and prunes only when every pod has an IP', async () => {
    const n = newNode();
    const first = dataplane();
    await first.start();
    await first.podEnrolled('uid-a', ['10.1.0.5']);
    const second = dataplane();
    await second.start();
    expect(members(n, V4)).toEqual({});
    execIn(n.name, ['ipset', 'add', V4, '10.1.0.99', 'comment', 'stale']);
    await second.syncEnrolled([
      { uid: 'uid-a', ips: ['10.1.0.5'] },
      { uid: 'uid-pending', ips: [] },
    ]);
    expect(members(n, V4)).toEqual({ '10.1.0.5': 'uid-a', '10.1.0.99': 'stale' });
    await second.syncEnrolled([
      { uid: 'uid-a', ips: ['10.1.0.5'] },
      { uid: 'uid-pending', ips: ['10.1.0.8'] },
    ]);
    expect(second.lastSync).toMatchObject({ pruneApplied: true, added: 1, pruned: 1, transactions: 1 });
    expect(members(n, V4)).toEqual({ '10.1.0.5': 'uid-a', '10.1.0.8': 'uid-pending' });
  });

  it('verify finds drift (rule gone, jump duplicated or not first) and start repairs it', async () => {
    const n = newNode();
    const host = dataplane();
    await host.start();
    execIn(n.name, ['iptables', '-t', 'nat', '-F', 'ISTIO_POSTRT']);
    expect((await host.verify()).missing.map((d) => d.text)).toEqual([expect.stringContaining('--match-set istio-inpod-probes-v4 dst')]);
    execIn(n.name, ['iptables', '-t', 'nat', '-I', 'POSTROUTING', '1', '-j', 'MASQUERADE']);
    execIn(n.name, ['iptables', '-t', 'nat', '-A', 'POSTROUTING', '-j', 'ISTIO_POSTRT']);
    const drift = await host.verify();
    expect(drift.extra.map((d) => d.text)).toEqual([
      'nat POSTROUTING -j ISTIO_POSTRT (2 copies)',
      'nat POSTROUTING: -j ISTIO_POSTRT is not the first rule',
    ]);
    await host.start();
    expect(natLines(n)).toEqual([':ISTIO_POSTRT - [0:0]', '-A POSTROUTING -j ISTIO_POSTRT', SAVED_V4_RULE]);
    expect(execIn(n.name, ['iptables-save', '-t', 'nat'])).toContain('-A POSTROUTING -j MASQUERADE'); // others' rules stay
    expect(await host.verify()).toMatchObject({ inSync: true });
  });

  it('cleanup: chain, jumps and ip sets gone; twice is fine; other rules stay', async () => {
    const n = newNode();
    execIn(n.name, ['iptables', '-t', 'nat', '-A', 'POSTROUTING', '-j', 'MASQUERADE']);
    const host = dataplane();
    await host.start();
    await host.podEnrolled('uid-a', ['10.1.0.5']);
    await host.cleanup();
    await host.cleanup();
    expect(natLines(n)).toEqual([]);
    expect(natLines(n, 6)).toEqual([]);
    expect(execIn(n.name, ['ipset', 'list', '-n']).trim()).toBe('');
    expect(execIn(n.name, ['iptables-save', '-t', 'nat'])).toContain('-A POSTROUTING -j MASQUERADE');
  });

  it('IPv6 off: no v6 set or ip6tables rule', async () => {
    const n = newNode();
    const host = dataplane({ ipv6: false });
    await host.start();
    expect(createLines(n)).toEqual([`create ${V4} hash:ip family inet hashsize 1024 maxelem 65536 comment`]);
    expect(natLines(n, 6)).toEqual([]);
    expect(await host.verify()).toMatchObject({ inSync: true });
  });

  it('startup sync of 3000 pods: the kernel holds all of them, listed back through a multi-part dump', async () => {
    const n = newNode();
    const host = dataplane({ ipv6: false });
    await host.start();
    const pods = Array.from({ length: 3000 }, (_, i) => ({ uid: `pod-${i}`, ips: [`10.3.${i >> 8}.${i & 0xff}`] }));
    await host.syncEnrolled(pods);
    expect(host.lastSync).toMatchObject({ added: 3000 });
    expect(Object.keys(members(n, V4))).toHaveLength(3000);
    expect((await host.probeSets.list()).get('10.3.11.183')).toBe('pod-2999');
    await host.syncEnrolled(pods);
    expect(host.lastSync).toMatchObject({ added: 0, unchanged: 3000, transactions: 0 });
  });

  it('`rules --backend iptables --host --apply/--verify/--delete NETNS`: the sets and the golden rules, by hand', async () => {
    const n = newNode();
    const io = { out: (): void => undefined, err: (): void => undefined };
    const run = (action: string): Promise<number> =>
      main(['rules', '--backend', 'iptables', '--host', '--ipv6', action, n.path], io, addon);
    expect(await run('--verify')).toBe(1);
    expect(await run('--apply')).toBe(0);
    expect(createLines(n)).toHaveLength(2);
    expect(natLines(n)).toEqual([':ISTIO_POSTRT - [0:0]', '-A POSTROUTING -j ISTIO_POSTRT', SAVED_V4_RULE]);
    expect(await run('--apply')).toBe(0);
    expect(natLines(n)).toHaveLength(3);
    expect(await run('--verify')).toBe(0);
    expect(await run('--delete')).toBe(0);
    expect(natLines(n)).toEqual([]);
    expect(await run('--verify')).toBe(1);
  });

  describe("taking over a node Istio's agent ran on", () => {
    const enrolled = [
      { uid: 'uid-a', ips: ['10.1.0.5', 'fd00:1::5'] }, // present, right UID
      { uid: 'uid-b', ips: ['10.1.0.6'] }, // present under an old pod's UID (IP reused)
      { uid: 'uid-c', ips: ['10.1.0.7'] }, // missing
    ];

    it('iptables: the ip sets and the ISTIO_POSTRT chain are adopted, never duplicated; the membership reconciled', async () => {
      const n = newNode();
      // What Istio's agent leaves: its sets with UID comments, the golden chain and jump (v4, v6).
      execIn(n.name, ['ipset', 'create', V4, 'hash:ip', 'family', 'inet', 'comment']);
      execIn(n.name, ['ipset', 'create', V6, 'hash:ip', 'family', 'inet6', 'comment']);
      for (const [set, ip, uid] of [
        [V4, '10.1.0.5', 'uid-a'],
        [V4, '10.1.0.6', 'uid-old'],
        [V4, '10.1.0.99', 'uid-gone'],
        [V6, 'fd00:1::5', 'uid-a'],
        [V6, 'fd00:1::99', 'uid-gone'],
      ] as const) {
        execIn(n.name, ['ipset', 'add', set, ip, 'comment', uid]);
      }
      const golden = readIstioGolden('iptables/hostprobe_ipv6.golden')
        .replace(/^iptables-save\nip6tables-save\n/, '')
        .split('COMMIT\n');
      execIn(n.name, ['iptables-restore', '--noflush'], `${golden[0]}COMMIT\n`);
      execIn(n.name, ['ip6tables-restore', '--noflush'], `${golden[1]}\n`);
      expect(natLines(n)).toEqual([':ISTIO_POSTRT - [0:0]', '-A POSTROUTING -j ISTIO_POSTRT', SAVED_V4_RULE]);

      const host = dataplane();
      await host.start();
      await host.syncEnrolled(enrolled);

      expect(natLines(n)).toEqual([':ISTIO_POSTRT - [0:0]', '-A POSTROUTING -j ISTIO_POSTRT', SAVED_V4_RULE]);
      expect(natLines(n, 6)).toEqual([':ISTIO_POSTRT - [0:0]', '-A POSTROUTING -j ISTIO_POSTRT', SAVED_V6_RULE]);
      expect(createLines(n)).toHaveLength(2);
      expect(members(n, V4)).toEqual({ '10.1.0.5': 'uid-a', '10.1.0.6': 'uid-b', '10.1.0.7': 'uid-c' });
      expect(members(n, V6)).toEqual({ 'fd00:1::5': 'uid-a' });
      expect(await host.verify()).toMatchObject({ inSync: true });
    });

    it('iptables: leftovers of several runs (duplicated jumps, a stale rule) end as exactly one of each', async () => {
      const n = newNode();
      execIn(n.name, ['ipset', 'create', V4, 'hash:ip', 'family', 'inet', 'comment']);
      const golden = readIstioGolden('iptables/hostprobe.golden').replace(/^iptables-save\nip6tables-save\n/, '');
      execIn(n.name, ['iptables-restore', '--noflush'], `${golden}\n`);
      execIn(n.name, ['iptables', '-t', 'nat', '-I', 'POSTROUTING', '1', '-j', 'ISTIO_POSTRT']);
      execIn(n.name, ['iptables', '-t', 'nat', '-A', 'ISTIO_POSTRT', '-p', 'tcp', '-j', 'SNAT', '--to-source', '169.254.1.1']);
      const host = dataplane({ ipv6: false });
      await host.start();
      expect(natLines(n)).toEqual([':ISTIO_POSTRT - [0:0]', '-A POSTROUTING -j ISTIO_POSTRT', SAVED_V4_RULE]);
    });

    it('nftables: the table, chain and sets are adopted, never duplicated; the membership reconciled', async () => {
      const n = newNode();
      const table = 'inet istio-ambient-nat';
      // What Istio's agent leaves (its golden host transaction plus its sets with UID elements).
      execIn(
        n.name,
        ['nft', '-f', '-'],
        [
          `add table ${table}`,
          `add set ${table} ${V4} { type ipv4_addr ; comment "UUID of the pods that are part of ambient mesh" ; }`,
          `add set ${table} ${V6} { type ipv6_addr ; comment "UUID of the pods that are part of ambient mesh" ; }`,
          `add element ${table} ${V4} { 10.1.0.5 comment "uid-a", 10.1.0.6 comment "uid-old", 10.1.0.99 comment "uid-gone" }`,
          `add element ${table} ${V6} { fd00:1::5 comment "uid-a" }`,
          readIstioGolden('nftables/hostprobe_ipv6.golden').replace('e9ac:1e77:90ca:399f:4d6d:ece2:2f9b:3164', V6_SNAT),
        ].join('\n'),
      );
      const host = dataplane({ backend: 'nftables' });
      await host.start();
      await host.syncEnrolled(enrolled);

      const ruleset = execIn(n.name, ['nft', 'list', 'ruleset']);
      expect(ruleset.match(/^table /gm)).toHaveLength(1);
      expect(ruleset.match(/set istio-inpod-probes-v4 \{/g)).toHaveLength(1);
      expect(ruleset.match(/skuid 1000 ip daddr @istio-inpod-probes-v4/g)).toHaveLength(1);
      expect(ruleset.match(/skuid 1000 ip6 daddr @istio-inpod-probes-v6/g)).toHaveLength(1);
      expect(await host.probeSets.list()).toEqual(
        new Map([
          ['10.1.0.5', 'uid-a'],
          ['10.1.0.6', 'uid-b'],
          ['10.1.0.7', 'uid-c'],
          ['fd00:1::5', 'uid-a'],
        ]),
      );
      expect(await host.verify()).toMatchObject({ inSync: true });
      expect(execIn(n.name, ['ipset', 'list', '-n']).trim()).toBe('');
    });
  });
});
