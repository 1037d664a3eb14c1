// onboardPod, the two halves of putting a pod into the mesh (in-pod rules and the ZDS add, side
// by side), against the fake addon and a fake ZDS sink: what each failure leaves behind.
import { beforeEach, describe, expect, it } from 'vitest';
import { systemError } from '../../src/addon/errors.js';
import { onboardingPending, onboardPod, RuleApplyError } from '../../src/pods/onboard.js';
import { NftablesInpodRules } from '../../src/rules/nftables-manager.js';
import { defaultRuleSettings, NO_OVERRIDES, podOverridesFromAnnotations } from '../../src/rules/settings.js';
import { PodRegistry } from '../../src/zds/registry.js';
import { FakeNetAddon, type FakeNamespace } from '../fakes/fake-net-addon.js';
import { FakeZdsSink } from '../fakes/fake-zds-sink.js';

const PATH = '/var/run/netns/pod-a';
const POD = { uid: 'uid-a', name: 'a', namespace: 'shop', serviceAccount: 'web' };
/** The rules fail whichever way they go in: the text (first pod of a model) or the prebuilt batch. */
const nftFails = (step: { op: string }): Error | undefined =>
  step.op === 'nft' || step.op === 'nftBatch' ? systemError('EPERM', -1, 'nft', 'EPERM: operation not permitted') : undefined;

describe('onboardPod', () => {
  let addon: FakeNetAddon;
  let ns: FakeNamespace;
  let zds: FakeZdsSink;
  let registry: PodRegistry;
  let rules: NftablesInpodRules;

  beforeEach(() => {
    addon = new FakeNetAddon();
    ns = addon.addNetns(PATH);
    zds = new FakeZdsSink();
    registry = new PodRegistry(zds);
    rules = new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: false }));
  });

  it('registers the pod, installs the rules, tells ztunnel with the open netns, and returns the rules stamp', async () => {
    const result = await onboardPod({ addon, rules, registry }, POD, addon.openNetns(PATH), NO_OVERRIDES);
    expect(result.stamp).toEqual({ nftGeneration: ns.nftGeneration });
    expect(ns.nftScripts).toHaveLength(1);
    expect(ns.rules).toHaveLength(1);
    expect(zds.calls).toEqual([{ op: 'add', uid: 'uid-a', info: { name: 'a', namespace: 'shop', serviceAccount: 'web' }, fdOpen: true }]);
    expect(registry.netnsOf('uid-a')?.ino).toBe(ns.ino);
  });

  it('sends the ZDS add at once; while a slow ztunnel holds it, the rules are in and the pending part is ztunnel', async () => {
    zds.hold = true;
    const done = onboardPod({ addon, rules, registry }, POD, addon.openNetns(PATH), NO_OVERRIDES);
    await new Promise((r) => setTimeout(r, 10));
    expect(zds.ops()).toEqual(['add uid-a']);
    expect(ns.nftScripts).toHaveLength(1);
    expect(onboardingPending(registry, 'uid-a')).toMatch(/^ztunnel has not acknowledged it/);
    zds.release();
    await expect(done).resolves.toMatchObject({ stamp: expect.any(Object) });
    expect(onboardingPending(registry, 'uid-a')).toBe('its in-pod rules are not applied yet'); // nothing awaited any more
  });

  it('a rule failure is a RuleApplyError and takes a new pod back out of ztunnel and the registry', async () => {
    addon.failOn = nftFails;
    const err = await onboardPod({ addon, rules, registry }, POD, addon.openNetns(PATH), NO_OVERRIDES).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RuleApplyError);
    expect((err as Error).message).toMatch(/^applying in-pod rules: .*EPERM/);
    expect(zds.ops()).toEqual(['add uid-a', 'del uid-a']);
    expect(registry.has('uid-a')).toBe(false);
    expect(addon.openFds).toBe(0); // the registry closed the handle it was given
  });

  it('a rule failure keeps a pod that was registered before (a retried ADD must not drop an enrolled pod)', async () => {
    await onboardPod({ addon, rules, registry }, POD, addon.openNetns(PATH), NO_OVERRIDES);
    addon.failOn = nftFails;
    await expect(onboardPod({ addon, rules, registry }, POD, addon.openNetns(PATH), NO_OVERRIDES)).rejects.toBeInstanceOf(RuleApplyError);
    expect(zds.ops()).toEqual(['add uid-a', 'add uid-a']);
    expect(registry.has('uid-a')).toBe(true);
    expect(addon.openFds).toBe(1); // same namespace: the registry kept its first handle, closed the second
  });

  it('a ztunnel failure is thrown as it came (retryable), with the rules in place and the pod registered for the next snapshot', async () => {
    zds.failAdd = (uid) => FakeZdsSink.rejected(uid);
    await expect(onboardPod({ addon, rules, registry }, POD, addon.openNetns(PATH), NO_OVERRIDES)).rejects.toMatchObject({
      code: 'ZDS_ACK_ERROR',
      retryable: true,
    });
    expect(ns.nftScripts).toHaveLength(1);
    expect(registry.snapshot().map((e) => [e.uid, e.netns !== undefined])).toEqual([['uid-a', true]]);
  });

  it("applies the pod's overrides (ingress mode: no inbound capture)", async () => {
    const { overrides } = podOverridesFromAnnotations({ 'ambient.istio.io/bypass-inbound-capture': 'true' });
    await onboardPod({ addon, rules, registry }, POD, addon.openNetns(PATH), overrides);
    expect(ns.nftScripts[0]).not.toContain('redirect to :15006');
    expect(ns.nftScripts[0]).toContain('redirect to :15001');
  });
});
