// In-pod redirection applied in-process in real namespaces: what the kernel holds afterwards
// must equal what `nft -f <Istio's golden file>` produces, and delete must undo exactly that.
import { closeSync, readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NativeNetAddon } from '../../src/addon/net-addon.js';
import { currentThreadNetns, fdCount } from '../helpers/netns-files.js';
import { main } from '../../src/cli/main.js';
import { NftablesHostRules } from '../../src/rules/host-manager.js';
import { IptablesInpodRules } from '../../src/rules/iptables-manager.js';
import { NftablesInpodRules } from '../../src/rules/nftables-manager.js';
import { defaultRuleSettings, NO_OVERRIDES, type PodOverrides } from '../../src/rules/settings.js';
import { istioGoldenPath } from '../fixtures/istio-golden.js';
import {
  createNetns,
  deleteAllNetns,
  deleteNetns,
  execIn,
  nftRuleset,
  privilegedSkipReason,
  requirePrivilegedInCi,
} from '../helpers/netns.js';

requirePrivilegedInCi();
const skip = privilegedSkipReason();
const TEST_SNAT_V6 = 'e9ac:1e77:90ca:399f:4d6d:ece2:2f9b:3164'; // the value Istio's nft goldens use
const goldenPath = (name: string): string => istioGoldenPath(`nftables/${name}`);

const CASES: { file: string; dnsCapture: boolean; overrides: PodOverrides }[] = [
  { file: 'default', dnsCapture: true, overrides: NO_OVERRIDES },
  { file: 'ingress', dnsCapture: false, overrides: { ...NO_OVERRIDES, ingressMode: true } },
  { file: 'virtual_interfaces', dnsCapture: false, overrides: { ...NO_OVERRIDES, virtualInterfaces: ['fake1s0f0', 'fake1s0f1'] } },
  { file: 'dns_pod_disabled_and_on_globally', dnsCapture: true, overrides: { ...NO_OVERRIDES, dnsProxy: 'disabled' } },
];

/** The kernel's view of the golden file, loaded by the nft binary into a namespace of its own. */
function goldenListing(file: string): string {
  const witness = createNetns('golden');
  try {
    execIn(witness.name, ['nft', '-f', goldenPath(file)]);
    return execIn(witness.name, ['nft', '-s', 'list', 'ruleset']);
  } finally {
    deleteNetns(witness);
  }
}

function countLines(text: string, needle: string): number {
  return text.split('\n').filter((l) => l.includes(needle)).length;
}

describe.skipIf(skip)(`in-pod rules in real namespaces${skip ? ` — skipped: ${skip}` : ''}`, () => {
  const addon = skip ? (undefined as never) : new NativeNetAddon();
  const jsThreadNetns = currentThreadNetns();
  beforeAll(() => addon.warmUp());
  afterAll(() => {
    deleteAllNetns();
    expect(currentThreadNetns()).toEqual(jsThreadNetns);
  });

  for (const ipv6 of [false, true]) {
    for (const c of CASES) {
      const file = `${c.file}${ipv6 ? '_ipv6' : ''}.golden`;
      it(`apply leaves exactly what nft -f ${file} leaves, and verify agrees`, async () => {
        const settings = defaultRuleSettings({ ipv6, dnsCapture: c.dnsCapture, hostProbeSnatIpv6: TEST_SNAT_V6 });
        const manager = new NftablesInpodRules(addon, settings);
        const pod = createNetns('pod');
        const ns = addon.openNetns(pod.path);
        try {
          await manager.apply(ns, c.overrides);
          expect(nftRuleset(pod).replace(/counter packets \d+ bytes \d+/g, 'counter')).toBe(goldenListing(file));
          expect(await manager.verify(ns, c.overrides)).toMatchObject({
            inSync: true,
            missing: [],
            extra: [],
            stamp: { nftGeneration: expect.any(Number) },
          }); // in sync, with the stamp of that listing
          await manager.apply(ns, c.overrides); // twice: still exactly one copy of everything
          expect(await manager.verify(ns, c.overrides)).toMatchObject({ inSync: true });
          const rules = execIn(pod.name, ['ip', 'rule']) + (ipv6 ? execIn(pod.name, ['ip', '-6', 'rule']) : '');
          expect(countLines(rules, 'fwmark 0x111/0xfff lookup 100')).toBe(ipv6 ? 2 : 1);
          expect(execIn(pod.name, ['ip', 'route', 'show', 'table', '100']).trim()).toBe('local default dev lo scope host');
          if (ipv6) expect(execIn(pod.name, ['ip', '-6', 'route', 'show', 'table', '100'])).toContain('local default dev lo');
        } finally {
          ns.close();
          deleteNetns(pod);
        }
      });
    }
  }

  it('delete removes everything apply added and nothing else; deleting twice succeeds', async () => {
    const settings = defaultRuleSettings({ ipv6: true });
    const manager = new NftablesInpodRules(addon, settings);
    const pod = createNetns('del');
    execIn(pod.name, ['nft', 'add table inet keep-me; add chain inet keep-me c; add rule inet keep-me c counter']);
    execIn(pod.name, ['ip', 'rule', 'add', 'fwmark', '0x5', 'lookup', '55', 'pref', '40000']);
    execIn(pod.name, ['ip', 'route', 'add', 'local', '0.0.0.0/0', 'dev', 'lo', 'table', '55']);
    const before = {
      nft: nftRuleset(pod),
      rules: execIn(pod.name, ['ip', 'rule']),
      routes: execIn(pod.name, ['ip', 'route', 'show', 'table', 'all']),
    };
    const ns = addon.openNetns(pod.path);
    try {
      await manager.apply(ns, NO_OVERRIDES);
      expect(nftRuleset(pod)).toContain('istio-ambient-raw');
      await manager.remove(ns);
      await manager.remove(ns);
      expect(nftRuleset(pod)).toBe(before.nft);
      expect(execIn(pod.name, ['ip', 'rule'])).toBe(before.rules);
      expect(execIn(pod.name, ['ip', 'route', 'show', 'table', 'all'])).toBe(before.routes);
      const report = await manager.verify(ns, NO_OVERRIDES);
      expect(report.missing.map((d) => d.kind).sort()).toEqual(['ip-rule', 'ip-rule', 'route', 'route', 'table', 'table', 'table']);
    } finally {
      ns.close();
      deleteNetns(pod);
    }
  });

  it('verify reports drift: a deleted rule, an extra rule, a removed ip rule', async () => {
    const manager = new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: false }));
    const pod = createNetns('drift');
    const ns = addon.openNetns(pod.path);
    try {
      await manager.apply(ns, NO_OVERRIDES);
      const handles = execIn(pod.name, ['nft', '-a', 'list', 'chain', 'inet', 'istio-ambient-nat', 'istio-output']);
      const handle = /redirect to :15001 # handle (\d+)/.exec(handles)?.[1];
      expect(handle).toBeDefined();
      execIn(pod.name, ['nft', 'delete', 'rule', 'inet', 'istio-ambient-nat', 'istio-output', 'handle', handle!]);
      execIn(pod.name, ['nft', 'add', 'rule', 'inet', 'istio-ambient-mangle', 'istio-output', 'counter', 'drop']);
      execIn(pod.name, ['ip', 'rule', 'del', 'fwmark', '0x111/0xfff', 'lookup', '100']);
      const report = await manager.verify(ns, NO_OVERRIDES);
      expect(report.inSync).toBe(false);
      expect(report.missing).toEqual([
        expect.objectContaining({
          kind: 'rule',
          where: 'inet istio-ambient-nat/istio-output',
          text: expect.stringContaining('redirect to :15001'),
        }),
        expect.objectContaining({ kind: 'ip-rule', where: 'ipv4' }),
      ]);
      expect(report.extra).toEqual([{ kind: 'rule', where: 'inet istio-ambient-mangle/istio-output', text: 'counter drop' }]);
      await manager.apply(ns, NO_OVERRIDES); // repair
      expect(await manager.verify(ns, NO_OVERRIDES)).toMatchObject({ inSync: true });
    } finally {
      ns.close();
      deleteNetns(pod);
    }
  });

  it('the stamp of an apply proves the tables unchanged until any nft commit in the netns; then verify lists', async () => {
    const manager = new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: false }));
    const pod = createNetns('stamp');
    const ns = addon.openNetns(pod.path);
    try {
      const stamp = await manager.apply(ns, NO_OVERRIDES);
      expect(stamp?.nftGeneration).toEqual(expect.any(Number));
      const [now] = await addon.run(ns, [{ op: 'nftGeneration' }] as const);
      expect(now.generation).toBe(stamp!.nftGeneration);
      expect(await manager.verify(ns, NO_OVERRIDES, stamp)).toMatchObject({ inSync: true });
      // The routing is still checked with a stamp (it is not nftables).
      execIn(pod.name, ['ip', 'rule', 'del', 'fwmark', '0x111/0xfff', 'lookup', '100']);
      expect((await manager.verify(ns, NO_OVERRIDES, stamp)).missing).toEqual([expect.objectContaining({ kind: 'ip-rule' })]);
      await manager.apply(ns, NO_OVERRIDES);
      const fresh = await manager.apply(ns, NO_OVERRIDES);
      // Any commit moves the generation: an unrelated table keeps us in sync (after listing) ...
      execIn(pod.name, ['nft', 'add', 'table', 'inet', 'someone-else']);
      expect(await manager.verify(ns, NO_OVERRIDES, fresh)).toMatchObject({ inSync: true });
      // ... and a change to our tables is found although the stamp is presented.
      execIn(pod.name, ['nft', 'flush', 'chain', 'inet', 'istio-ambient-nat', 'istio-output']);
      const report = await manager.verify(ns, NO_OVERRIDES, fresh);
      expect(report.inSync).toBe(false);
      expect(report.missing.filter((d) => d.kind === 'rule').length).toBeGreaterThan(0);
    } finally {
      ns.close();
      deleteNetns(pod);
    }
  });

  it('skips the IPv6 route when the pod has IPv6 disabled on lo, and still verifies in sync', async () => {
    const manager = new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: true }));
    const pod = createNetns('noipv6');
    execIn(pod.name, ['sysctl', '-q', '-w', 'net.ipv6.conf.lo.disable_ipv6=1']);
    const ns = addon.openNetns(pod.path);
    try {
      await manager.apply(ns, NO_OVERRIDES);
      expect(execIn(pod.name, ['ip', '-6', 'route', 'show', 'table', '100'])).toBe('');
      expect(await manager.verify(ns, NO_OVERRIDES)).toMatchObject({ inSync: true });
    } finally {
      ns.close();
      deleteNetns(pod);
    }
  });

  for (const backend of ['nftables', 'iptables'] as const) {
    it(`${backend}: a pod whose lo is still down (the runtime lost the race) gets lo up, the IPv6 route, and 127.0.0.1:15053 bindable`, async () => {
      const settings = defaultRuleSettings({ ipv6: true });
      const manager = backend === 'nftables' ? new NftablesInpodRules(addon, settings) : new IptablesInpodRules(addon, settings);
      const pod = createNetns('lodown');
      execIn(pod.name, ['ip', 'link', 'set', 'lo', 'down']);
      const ns = addon.openNetns(pod.path);
      try {
        await manager.apply(ns, NO_OVERRIDES);
        expect(execIn(pod.name, ['ip', '-o', 'link', 'show', 'lo'])).toMatch(/<LOOPBACK,UP,LOWER_UP>/);
        expect(execIn(pod.name, ['ip', '-6', 'route', 'show', 'table', '100'])).toMatch(/^local default dev lo /m);
        expect(execIn(pod.name, ['ip', '-4', 'route', 'show', 'table', '100'])).toMatch(/^local default dev lo /m);
        expect((await manager.verify(ns, NO_OVERRIDES)).missing).toEqual([]);
        // What ztunnel does next in the pod: DNS on 127.0.0.1:15053 (refused while lo is down).
        const [dns] = await addon.run(ns, [{ op: 'socket', family: 4, type: 'udp', bindAddress: '127.0.0.1', bindPort: 15053 }]);
        closeSync(dns.fd);
        await manager.apply(ns, NO_OVERRIDES); // lo already up: the step changes nothing
        expect(execIn(pod.name, ['ip', '-6', 'route', 'show', 'table', '100']).trim().split('\n')).toHaveLength(1);
      } finally {
        ns.close();
        deleteNetns(pod);
      }
    });
  }

  it('keeps working on a handle whose namespace path was deleted, and fails cleanly on a missing path', async () => {
    const manager = new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: false }));
    const pod = createNetns('vanish');
    const ns = addon.openNetns(pod.path);
    deleteNetns(pod); // the fd still pins the namespace: the pod's sandbox is not gone yet
    await manager.apply(ns, NO_OVERRIDES);
    ns.close();
    expect(() => addon.openNetns(pod.path)).toThrow(expect.objectContaining({ code: 'ENOENT' }));
  });

  it('1000 apply/delete cycles leak no fds and never move the JS thread', async () => {
    const manager = new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: true }));
    const pod = createNetns('cycles');
    const fdsBefore = fdCount();
    for (let i = 0; i < 1000; i++) {
      const ns = addon.openNetns(pod.path);
      await manager.apply(ns, NO_OVERRIDES);
      await manager.remove(ns);
      ns.close();
    }
    expect(fdCount()).toBe(fdsBefore);
    expect(currentThreadNetns()).toEqual(jsThreadNetns);
    expect(nftRuleset(pod)).toBe('');
    expect(addon.stats().threadsRetired).toBe(0);
    deleteNetns(pod);
  }, 120_000);

  it('iptables backend: applies with iptables-restore in the pod, verifies, re-applies and removes', async () => {
    const manager = new IptablesInpodRules(addon, defaultRuleSettings({ ipv6: true }));
    const pod = createNetns('ipt');
    const ns = addon.openNetns(pod.path);
    try {
      await manager.apply(ns, NO_OVERRIDES);
      await manager.apply(ns, NO_OVERRIDES);
      const saved = execIn(pod.name, ['iptables-save']);
      expect(countLines(saved, '-A OUTPUT -j ISTIO_OUTPUT')).toBe(3); // mangle, nat and raw, once each
      expect(execIn(pod.name, ['ip6tables-save'])).toContain('-A ISTIO_OUTPUT ! -d ::1/128 -p tcp');
      expect(await manager.verify(ns, NO_OVERRIDES)).toMatchObject({ inSync: true });
      await manager.remove(ns);
      expect(execIn(pod.name, ['iptables-save'])).not.toContain('ISTIO');
      expect(execIn(pod.name, ['ip', 'rule'])).not.toContain('0x111');
    } finally {
      ns.close();
      deleteNetns(pod);
    }
  });

  it('host probe rules: the golden SNAT rule over the probe sets, verified and removed', async () => {
    const host = new NftablesHostRules(addon, defaultRuleSettings({ ipv6: true }));
    const node = createNetns('host');
    const ns = addon.openNetns(node.path);
    try {
      await host.apply(ns, 1000);
      const listed = nftRuleset(node);
      expect(listed).toContain('meta l4proto tcp meta skuid 1000 ip daddr @istio-inpod-probes-v4 counter');
      expect(listed).toContain('set istio-inpod-probes-v6');
      expect(await host.verify(ns, 1000)).toMatchObject({ inSync: true });
      expect(await host.verify(ns, 2000)).toMatchObject({ inSync: false });
      await host.remove(ns);
      expect(nftRuleset(node)).not.toContain('skuid');
    } finally {
      ns.close();
      deleteNetns(node);
    }
  });

  it('the rules CLI applies, verifies and deletes in a namespace (exit codes 0, 0, 0, then drift 1)', async () => {
    const pod = createNetns('cli');
    const io = { out: () => {}, err: () => {} };
    try {
      expect(await main(['rules', '--apply', pod.path], io)).toBe(0);
      expect(await main(['rules', '--verify', pod.path], io)).toBe(0);
      expect(await main(['rules', '--delete', pod.path], io)).toBe(0);
      expect(await main(['rules', '--verify', pod.path], io)).toBe(1);
      expect(await main(['rules', '--apply', '/etc/hostname'], io)).toBe(2);
    } finally {
      deleteNetns(pod);
    }
  });

  it('golden files load in the nft binary exactly as written (sanity of the witness)', () => {
    expect(readFileSync(goldenPath('default.golden'), 'utf8')).toContain('redirect to :15001');
  });
});
