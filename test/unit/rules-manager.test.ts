import { readFileSync } from 'node:fs';
import { beforeEach, describe, expect, it } from 'vitest';
import { systemError } from '../../src/addon/errors.js';
import type { RoutingStep } from '../../src/addon/steps.js';
import { CanonicalListings } from '../../src/rules/canonical.js';
import { IptablesInpodRules, countAgentRules } from '../../src/rules/iptables-manager.js';
import { RuleOperationError } from '../../src/rules/manager.js';
import { NftablesInpodRules } from '../../src/rules/nftables-manager.js';
import { renderInpodNftablesDelete } from '../../src/rules/nftables.js';
import { defaultRuleSettings, NO_OVERRIDES } from '../../src/rules/settings.js';
import { FakeNetAddon, type FakeNamespace } from '../fakes/fake-net-addon.js';
import { readIstioGolden } from '../fixtures/istio-golden.js';

const POD = '/var/run/netns/pod';
const golden = (name: string): string => readIstioGolden(`nftables/${name}`);
const listing = readFileSync(new URL('../fixtures/default-inpod.listing.nft', import.meta.url), 'utf8');

describe('NftablesInpodRules', () => {
  let addon: FakeNetAddon;
  let pod: FakeNamespace;
  beforeEach(() => {
    addon = new FakeNetAddon();
    pod = addon.addNetns(POD);
  });

  it('applies in one visit: the golden transaction (between two generation reads), then the route and the ip rule in one routing step', async () => {
    const manager = new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: false }));
    const ns = addon.openNetns(POD);
    expect(await manager.apply(ns, NO_OVERRIDES)).toEqual({ nftGeneration: 2 });
    const podRuns = addon.runs.filter((r) => r.target === POD);
    expect(podRuns).toHaveLength(1);
    expect(podRuns[0]!.steps.map((s) => s.op)).toEqual(['setLinkUp', 'nftGeneration', 'nft', 'nftGeneration', 'routing']);
    expect((podRuns[0]!.steps[4] as RoutingStep).changes.map((c) => c.kind)).toEqual(['replaceLocalRoute', 'addFwmarkRule']);
    expect(pod.nftScripts).toEqual([golden('default.golden')]);
    expect(pod.rules).toEqual([{ family: 4, mark: 0x111, mask: 0xfff, priority: 32764, table: 100 }]);
    expect(pod.routes).toEqual([expect.objectContaining({ family: 4, dev: 'lo', table: 100, type: 2 })]);
  });

  it('compiles the batch once per distinct transaction, from the golden text in a fresh netns, then sends it', async () => {
    const manager = new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: false }));
    await manager.prepare(NO_OVERRIDES);
    await manager.prepare(NO_OVERRIDES);
    const fresh = addon.runs.filter((r) => r.target === 'fresh');
    expect(fresh).toHaveLength(1);
    expect(fresh[0]!.steps).toEqual([
      { op: 'nft', script: golden('default.golden') },
      { op: 'nftCompile', family: 'inet', tables: ['istio-ambient-nat', 'istio-ambient-mangle', 'istio-ambient-raw'] },
    ]);
    const ns = addon.openNetns(POD);
    expect(await manager.apply(ns, NO_OVERRIDES)).toEqual({ nftGeneration: 2 });
    const podRuns = addon.runs.filter((r) => r.target === POD);
    expect(podRuns.map((r) => r.steps.map((s) => s.op))).toEqual([['setLinkUp', 'nftBatch', 'routing']]);
    expect(podRuns[0]!.steps[1]).toMatchObject({ op: 'nftBatch', script: golden('default.golden') });
    expect(pod.nftScripts).toEqual([golden('default.golden')]); // the fake's batch is the text it came from
    expect(manager.batchFallbacks).toBe(0);
  });

  it('counts a batch the kernel refused (the step applied the text instead), and the stamp still holds', async () => {
    const manager = new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: false }));
    await manager.prepare(NO_OVERRIDES);
    addon.refuseBatches = true;
    expect(await manager.apply(addon.openNetns(POD), NO_OVERRIDES)).toEqual({ nftGeneration: 2 });
    expect(manager.batchFallbacks).toBe(1);
    expect(pod.nftScripts).toEqual([golden('default.golden')]);
  });

  it('a refused batch whose text shared its commit window with another writer gets no stamp (a later verify lists)', async () => {
    const manager = new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: false }));
    await manager.prepare(NO_OVERRIDES);
    addon.refuseBatches = true;
    addon.commitsBesideFallback = 1;
    expect(await manager.apply(addon.openNetns(POD), NO_OVERRIDES)).toBeUndefined();
    expect(manager.batchFallbacks).toBe(1);
  });

  it('the first pod of a new model does not wait for the compile: it gets the text, later pods the batch', async () => {
    const manager = new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: false }));
    await manager.apply(addon.openNetns(POD), NO_OVERRIDES);
    await new Promise((resolve) => setImmediate(resolve));
    await manager.apply(addon.openNetns(POD), NO_OVERRIDES);
    const podRuns = addon.runs.filter((r) => r.target === POD);
    expect(podRuns.map((r) => r.steps[1]!.op)).toEqual(['nftGeneration', 'nftBatch']);
  });

  it('a compile that fails is not retried per pod: the text keeps serving', async () => {
    const manager = new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: false }));
    addon.failOn = (step) =>
      step.op === 'nftCompile' ? systemError('EPERM', -1, 'unshare', 'EPERM: Operation not permitted, unshare') : undefined;
    for (let i = 0; i < 3; i++) {
      await manager.apply(addon.openNetns(POD), NO_OVERRIDES);
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(addon.runs.filter((r) => r.target === 'fresh')).toHaveLength(1);
    expect(addon.runs.filter((r) => r.target === POD).map((r) => r.steps[2]!.op)).toEqual(['nft', 'nft', 'nft']);
    expect(pod.nftScripts).toHaveLength(3);
  });

  it('verify with a stamp skips the listing while the generation is unchanged, and lists once it moved', async () => {
    const manager = new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: false }));
    const ns = addon.openNetns(POD);
    const stamp = await manager.apply(ns, NO_OVERRIDES);
    addon.runs.length = 0;
    expect((await manager.verify(ns, NO_OVERRIDES, stamp)).inSync).toBe(true);
    expect(addon.runs.flatMap((r) => r.steps.map((s) => s.op))).not.toContain('nft'); // no listing
    pod.nftGeneration++; // another writer committed something in the pod's netns
    pod.listing = ''; // ... and our tables are gone
    addon.fresh.listing = listing;
    const report = await manager.verify(ns, NO_OVERRIDES, stamp);
    expect(report.inSync).toBe(false);
    expect(report.missing.some((d) => d.kind === 'table')).toBe(true);
  });

  it('adds the IPv6 route unless IPv6 is disabled on lo, and the IPv6 rule always when IPv6 is on', async () => {
    const manager = new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: true }));
    pod.loIpv6Enabled = false;
    await manager.apply(addon.openNetns(POD), NO_OVERRIDES);
    expect(pod.nftScripts[0]).toContain('ip6 daddr != ::1/128');
    expect(pod.rules.map((r) => r.family)).toEqual([4, 6]);
    expect(pod.routes.map((r) => r.family)).toEqual([4]);
    pod.loIpv6Enabled = true;
    await manager.apply(addon.openNetns(POD), NO_OVERRIDES);
    expect(pod.routes.map((r) => r.family).sort()).toEqual([4, 6]);
    expect(pod.rules).toHaveLength(2); // applying twice leaves one copy
  });

  for (const backend of ['nftables', 'iptables'] as const) {
    it(`${backend}: brings a down lo up first, in the same visit, so the IPv6 route goes in (containerd's loopback race)`, async () => {
      const manager =
        backend === 'nftables'
          ? new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: true }))
          : new IptablesInpodRules(addon, defaultRuleSettings({ ipv6: true }));
      pod.loUp = false; // the runtime's own loopback setup has not run yet
      const ns = addon.openNetns(POD);
      addon.runs.length = 0;
      await manager.apply(ns, NO_OVERRIDES);
      expect(pod.loUp).toBe(true);
      expect(pod.routes.map((r) => r.family).sort()).toEqual([4, 6]);
      const applyRun = addon.runs.find((r) => r.steps.some((s) => s.op === 'routing'));
      expect(applyRun?.steps[0]).toEqual({ op: 'setLinkUp', dev: 'lo' });
      expect((await manager.verify(ns, NO_OVERRIDES)).missing.filter((d) => d.kind === 'route')).toEqual([]);
    });
  }

  it("removes Istio's three tables in one batch (outside libnftables), then the ip rule and route; removing twice succeeds", async () => {
    const manager = new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: false }));
    const ns = addon.openNetns(POD);
    await manager.apply(ns, NO_OVERRIDES);
    await manager.remove(ns);
    await manager.remove(ns);
    const deleted = 'delete table inet istio-ambient-nat\ndelete table inet istio-ambient-mangle\ndelete table inet istio-ambient-raw';
    expect(pod.nftScripts.slice(1)).toEqual([deleted, deleted]);
    // The same tables as Istio's delete transaction names.
    expect(renderInpodNftablesDelete()).toContain('delete table inet istio-ambient-raw');
    expect(pod.rules).toEqual([]);
    expect(pod.routes).toEqual([]);
    const removeRun = addon.runs.filter((r) => r.target === POD)[1]!;
    expect(removeRun.steps.map((s) => s.op)).toEqual(['deleteNftTables', 'routing']);
    expect((removeRun.steps[1] as RoutingStep).changes.map((c) => c.kind)).toEqual(['deleteFwmarkRule', 'deleteLocalRoute']);
  });

  it('turns a failure into a RuleOperationError that keeps the system error code', async () => {
    const manager = new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: false }));
    addon.failOn = (step) =>
      step.op === 'addFwmarkRule' ? systemError('EPERM', -1, 'RTM_NEWRULE', 'EPERM: Operation not permitted, RTM_NEWRULE') : undefined;
    const err = await manager.apply(addon.openNetns(POD), NO_OVERRIDES).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RuleOperationError);
    expect(err).toMatchObject({ code: 'EPERM', operation: 'apply', netnsPath: POD, backend: 'nftables' });
    expect((err as Error).message).toBe(`apply nftables in-pod rules in ${POD}: EPERM: Operation not permitted, RTM_NEWRULE`);
  });

  it('reports a vanished namespace as ENOENT', async () => {
    const manager = new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: false }));
    const ns = addon.openNetns(POD);
    addon.namespaces.delete(POD);
    await expect(manager.apply(ns, NO_OVERRIDES)).rejects.toMatchObject({ code: 'ENOENT', operation: 'apply' });
  });

  describe('verify', () => {
    let manager: NftablesInpodRules;
    beforeEach(async () => {
      addon.fresh.listing = listing;
      manager = new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: false }));
      await manager.apply(addon.openNetns(POD), NO_OVERRIDES);
      pod.listing = listing;
    });

    it('is in sync after apply, and canonicalises each distinct ruleset only once', async () => {
      // In sync, with the stamp of the generation the listing was taken at (the next verify skips the listing).
      expect(await manager.verify(addon.openNetns(POD), NO_OVERRIDES)).toEqual({
        inSync: true,
        missing: [],
        extra: [],
        stamp: { nftGeneration: pod.nftGeneration },
      });
      await manager.verify(addon.openNetns(POD), NO_OVERRIDES);
      const freshRuns = addon.runs.filter(
        (r) => r.target === 'fresh' && r.steps.some((s) => s.op === 'nft' && s.script === 'list ruleset'),
      );
      expect(freshRuns).toHaveLength(1);
      expect(freshRuns[0]!.steps).toEqual([
        { op: 'nft', script: golden('default.golden') },
        { op: 'nft', script: 'list ruleset', stateless: true },
      ]);
    });

    it('reports a deleted rule, a missing ip rule and a missing route', async () => {
      pod.listing = listing.replace(/\n.*redirect to :15006/, '');
      pod.rules = [];
      pod.routes = [];
      const report = await manager.verify(addon.openNetns(POD), NO_OVERRIDES);
      expect(report.inSync).toBe(false);
      expect(report.missing.map((d) => d.kind)).toEqual(['rule', 'ip-rule', 'route']);
    });

    it('reports a second copy of the ip rule as extra', async () => {
      pod.rules.push({ ...pod.rules[0]! });
      const report = await manager.verify(addon.openNetns(POD), NO_OVERRIDES);
      expect(report.extra).toEqual([{ kind: 'ip-rule', where: 'ipv4', text: 'fwmark 0x111/0xfff pref 32764 lookup 100' }]);
    });

    it('does not remember a failed canonicalisation', async () => {
      const canonical = new CanonicalListings(addon);
      addon.failOn = (step, target) => (target === 'fresh' && step.op === 'nft' ? new Error('EPERM') : undefined);
      await expect(canonical.get('x')).rejects.toThrow('EPERM');
      addon.failOn = () => undefined;
      await expect(canonical.get('x')).resolves.toMatchObject({ text: expect.any(String), parsed: expect.any(Map) });
    });
  });
});

describe('IptablesInpodRules', () => {
  let addon: FakeNetAddon;
  let pod: FakeNamespace;
  beforeEach(() => {
    addon = new FakeNetAddon();
    pod = addon.addNetns(POD);
  });

  it('checks for leftovers, then brings lo up and adds route and rule before restoring (Istio iptables order)', async () => {
    const manager = new IptablesInpodRules(addon, defaultRuleSettings({ ipv6: false }));
    await manager.apply(addon.openNetns(POD), NO_OVERRIDES);
    expect(addon.runs.map((r) => r.steps.map((s) => s.op))).toEqual([['exec'], ['setLinkUp', 'routing', 'exec']]);
    expect((addon.runs[1]!.steps[1] as RoutingStep).changes.map((c) => c.kind)).toEqual(['replaceLocalRoute', 'addFwmarkRule']);
    const restore = addon.runs[1]!.steps[2]!;
    expect(restore).toMatchObject({ op: 'exec', argv: ['iptables-restore', '--noflush', '-v'] });
    expect((restore as { input: string }).input).toBe(manager.restoreInputs(NO_OVERRIDES).v4);
  });

  it('removes its own leftovers first, so applying twice leaves one copy', async () => {
    const manager = new IptablesInpodRules(addon, defaultRuleSettings({ ipv6: false }));
    pod.exec.set('iptables-save', { exitCode: 0, stdout: '*nat\n-A OUTPUT -j ISTIO_OUTPUT\nCOMMIT\n', stderr: '' });
    await manager.apply(addon.openNetns(POD), NO_OVERRIDES);
    const deletes = addon.runs[1]!.steps.map((s) => (s as { argv: string[] }).argv.join(' '));
    expect(deletes[0]).toBe('iptables -t mangle -D PREROUTING -j ISTIO_PRERT');
    expect(deletes.at(-1)).toMatch(/^iptables -t \w+ -X ISTIO_/);
  });

  it('fails with iptables-restore stderr when the restore fails', async () => {
    const manager = new IptablesInpodRules(addon, defaultRuleSettings({ ipv6: false }));
    pod.exec.set('iptables-restore', { exitCode: 2, stdout: '', stderr: 'iptables-restore: line 3 failed\n' });
    await expect(manager.apply(addon.openNetns(POD), NO_OVERRIDES)).rejects.toMatchObject({
      code: 'ERR_IPTABLES_RESTORE',
      message: expect.stringContaining('line 3 failed'),
    });
  });

  it('counts agent rules in iptables-save output per table and chain', () => {
    const save =
      '*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -j ISTIO_PRERT\n-A ISTIO_PRERT -s 169.254.7.127/32 -p tcp -j ACCEPT\n-A POSTROUTING -j KUBE\nCOMMIT\n';
    expect(countAgentRules(save)).toEqual(
      new Map([
        ['nat/PREROUTING', 1],
        ['nat/ISTIO_PRERT', 1],
      ]),
    );
  });

  it('verify reports missing rules by chain when the pod has none', async () => {
    const manager = new IptablesInpodRules(addon, defaultRuleSettings({ ipv6: false }));
    const report = await manager.verify(addon.openNetns(POD), NO_OVERRIDES);
    expect(report.inSync).toBe(false);
    expect(report.missing.map((d) => d.where)).toContain('ipv4 nat/ISTIO_OUTPUT');
  });
});
