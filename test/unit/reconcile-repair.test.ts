// The one verify-and-repair routine and the stamp keeper, with the fake addon: in sync means no
// apply; drift is re-applied and named; a failed verify still repairs; a failed repair is
// reported, never thrown. StampedRules lets the second verify of an untouched netns skip the
// listing, and forgets the stamp on drift, removal and forget().
import { readFileSync } from 'node:fs';
import { beforeEach, describe, expect, it } from 'vitest';
import { driftReport } from '../../src/rules/drift.js';
import { NftablesInpodRules } from '../../src/rules/nftables-manager.js';
import { defaultRuleSettings, NO_OVERRIDES } from '../../src/rules/settings.js';
import { driftReason, verifyAndRepair } from '../../src/reconcile/repair.js';
import { StampedRules } from '../../src/reconcile/stamped-rules.js';
import { FakeNetAddon, type FakeNamespace } from '../fakes/fake-net-addon.js';

const listing = readFileSync(new URL('../fixtures/default-inpod.listing.nft', import.meta.url), 'utf8');

describe('verifyAndRepair', () => {
  it('in sync: nothing applied', async () => {
    let repaired = 0;
    const outcome = await verifyAndRepair({ verify: async () => driftReport([], []), repair: async () => void repaired++ });
    expect(outcome).toEqual({ status: 'in-sync' });
    expect(repaired).toBe(0);
  });

  it('drift: re-applied, with what drifted and the metric reason', async () => {
    const report = driftReport(
      [{ kind: 'ip-rule', where: 'ipv4', text: 'fwmark 0x111/0xfff lookup 100' }],
      [{ kind: 'rule', where: 'inet istio-ambient-nat/x', text: 'accept' }],
    );
    const outcome = await verifyAndRepair({ verify: async () => report, repair: async () => undefined });
    expect(outcome).toEqual({
      status: 'repaired',
      reason: 'ip-rule+nftables',
      drift: ['missing ip-rule in ipv4: fwmark 0x111/0xfff lookup 100', 'extra rule in inet istio-ambient-nat/x: accept'],
    });
    expect(driftReason(driftReport([{ kind: 'route', where: 'ipv6', text: 'x' }], []))).toBe('route');
  });

  it('a verify that throws still repairs; a repair that throws is reported, not thrown', async () => {
    expect(
      await verifyAndRepair({ verify: async () => Promise.reject(new Error('ENOENT: netns gone')), repair: async () => undefined }),
    ).toMatchObject({
      status: 'repaired',
      reason: 'verify-failed',
      drift: ['verify failed: ENOENT: netns gone'],
    });
    const failed = await verifyAndRepair({
      verify: async () => driftReport([{ kind: 'table', where: 't', text: 'table t' }], []),
      repair: async () => Promise.reject(new Error('EPERM')),
    });
    expect(failed).toMatchObject({ status: 'failed', reason: 'nftables' });
    expect(failed.status === 'failed' && failed.error.message).toBe('EPERM');
  });
});

describe('StampedRules', () => {
  let addon: FakeNetAddon;
  let pod: FakeNamespace;
  let rules: StampedRules;
  const PATH = '/var/run/netns/pod';
  const listed = (): number => addon.stepsIn(PATH).filter((s) => s.op === 'nft' && s.script === 'list ruleset').length;

  beforeEach(() => {
    addon = new FakeNetAddon();
    addon.fresh.listing = listing;
    pod = addon.addNetns(PATH);
    rules = new StampedRules(new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: false })));
  });

  it('after apply, verifies an untouched netns without listing; another commit means a listing', async () => {
    const ns = addon.openNetns(PATH);
    await rules.apply(ns, NO_OVERRIDES);
    pod.listing = listing;
    expect((await rules.verify(ns, NO_OVERRIDES)).inSync).toBe(true);
    expect(listed()).toBe(0);
    pod.nftGeneration++; // someone else committed something
    expect((await rules.verify(ns, NO_OVERRIDES)).inSync).toBe(true);
    expect(listed()).toBe(1);
    // That listing between two equal generations is a new stamp: the next verify is cheap again.
    await rules.verify(ns, NO_OVERRIDES);
    expect(listed()).toBe(1);
  });

  it('drift drops the stamp; remove and forget drop it too', async () => {
    const ns = addon.openNetns(PATH);
    await rules.apply(ns, NO_OVERRIDES);
    expect(rules.size).toBe(1);
    pod.listing = '';
    pod.nftGeneration++;
    expect((await rules.verify(ns, NO_OVERRIDES)).inSync).toBe(false);
    expect(rules.size).toBe(0);
    await rules.apply(ns, NO_OVERRIDES);
    await rules.remove(ns);
    expect(rules.size).toBe(0);
    await rules.apply(ns, NO_OVERRIDES);
    rules.forget(ns);
    expect(rules.size).toBe(0);
  });
});
