// The prebuilt nf_tables batch against the text it was compiled from: for every in-pod golden
// case of Istio (both IPv6 settings), the kernel's listing after the batch equals the listing
// after `nft -f <golden>` and after our text; re-sending it leaves one copy; a refused batch
// falls back to the text with the same result; the generation stamp still works.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NativeNetAddon } from '../../src/addon/net-addon.js';
import { currentThreadNetns } from '../helpers/netns-files.js';
import { NftablesInpodRules } from '../../src/rules/nftables-manager.js';
import { defaultRuleSettings, NO_OVERRIDES, type PodOverrides } from '../../src/rules/settings.js';
import { istioGoldenPath } from '../fixtures/istio-golden.js';
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
const TEST_SNAT_V6 = 'e9ac:1e77:90ca:399f:4d6d:ece2:2f9b:3164'; // the value Istio's nft goldens use
const VIRTUAL = ['fake1s0f0', 'fake1s0f1'];

/** Every in-pod golden of Istio's nftables folder (hostprobe* are the host rules). */
const CASES: { file: string; dnsCapture: boolean; overrides: PodOverrides }[] = [
  { file: 'default', dnsCapture: true, overrides: NO_OVERRIDES },
  { file: 'ingress', dnsCapture: false, overrides: { ...NO_OVERRIDES, ingressMode: true } },
  { file: 'virtual_interfaces', dnsCapture: false, overrides: { ...NO_OVERRIDES, virtualInterfaces: VIRTUAL } },
  {
    file: 'ingress_and_virtual_interfaces',
    dnsCapture: false,
    overrides: { ...NO_OVERRIDES, ingressMode: true, virtualInterfaces: VIRTUAL },
  },
  { file: 'dns_pod_disabled_and_on_globally', dnsCapture: true, overrides: { ...NO_OVERRIDES, dnsProxy: 'disabled' } },
  { file: 'dns_pod_enabled_and_off_globally', dnsCapture: false, overrides: { ...NO_OVERRIDES, dnsProxy: 'enabled' } },
];

const listing = (ns: TestNetns): string => execIn(ns.name, ['nft', '-s', 'list', 'ruleset']);

/** Replaces the last occurrence of `from` with `to` (same length) in a copy of `bytes`. */
function patchLast(bytes: Uint8Array, from: string, to: string): Uint8Array {
  const copy = Uint8Array.from(bytes);
  const text = Buffer.from(copy).toString('latin1');
  const at = text.lastIndexOf(from);
  expect(at).toBeGreaterThan(0);
  copy.set(Buffer.from(to, 'latin1'), at);
  return copy;
}

describe.skipIf(skip)(`prebuilt nf_tables batches${skip ? ` — skipped: ${skip}` : ''}`, () => {
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
      it(`batch == text == nft -f ${file}`, async () => {
        const settings = defaultRuleSettings({ ipv6, dnsCapture: c.dnsCapture, hostProbeSnatIpv6: TEST_SNAT_V6 });
        const manager = new NftablesInpodRules(addon, settings);
        const batch = await manager.prepare(c.overrides);
        const script = manager.script(c.overrides);
        const [golden, viaText, viaBatch] = [createNetns('golden'), createNetns('text'), createNetns('batch')];
        try {
          execIn(golden.name, ['nft', '-f', istioGoldenPath(`nftables/${file}`)]);
          const text = addon.openNetns(viaText.path);
          const sent = addon.openNetns(viaBatch.path);
          try {
            await addon.run(text, [{ op: 'nft', script }]);
            const [before] = await addon.run(sent, [{ op: 'nftGeneration' }] as const);
            const [first] = await addon.run(sent, [{ op: 'nftBatch', batch, script }] as const);
            // The kernel's echo names the batch's own commit: the one after `before`.
            expect(first).toMatchObject({ fallback: false, generation: before.generation + 1 });
            const [after] = await addon.run(sent, [{ op: 'nftGeneration' }] as const);
            expect(after.generation).toBe(first.generation);
            const expected = listing(golden);
            expect(expected).toContain('istio-output');
            expect(listing(viaText)).toBe(expected);
            expect(listing(viaBatch)).toBe(expected);
            // Again over the existing tables: flushed and rebuilt, one copy of everything.
            await addon.run(sent, [{ op: 'nftBatch', batch, script }]);
            expect(listing(viaBatch)).toBe(expected);
          } finally {
            text.close();
            sent.close();
          }
        } finally {
          for (const ns of [golden, viaText, viaBatch]) deleteNetns(ns);
        }
      });
    }
  }

  it('apply sends the batch once compiled, and the stamp proves the rules unchanged', async () => {
    const manager = new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: true }));
    await manager.prepare(NO_OVERRIDES);
    const pod = createNetns('apply');
    const ns = addon.openNetns(pod.path);
    try {
      const stamp = await manager.apply(ns, NO_OVERRIDES);
      expect(stamp).toBeDefined();
      expect(manager.batchFallbacks).toBe(0);
      expect(await manager.verify(ns, NO_OVERRIDES, stamp)).toEqual({ inSync: true, missing: [], extra: [], stamp });
      execIn(pod.name, ['nft', 'flush', 'chain', 'inet', 'istio-ambient-nat', 'istio-output']);
      const drift = await manager.verify(ns, NO_OVERRIDES, stamp);
      expect(drift.inSync).toBe(false);
      expect(drift.missing.length).toBeGreaterThan(0);
    } finally {
      ns.close();
      deleteNetns(pod);
    }
  });

  it('a batch the kernel refuses changes nothing, and the text is applied instead', async () => {
    const manager = new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: false }));
    const good = await manager.prepare(NO_OVERRIDES);
    const script = manager.script(NO_OVERRIDES);
    // The last rule now names a chain that does not exist: the kernel refuses the whole batch.
    const bad = patchLast(good, 'istio-output', 'istio-outpuX');
    const [viaText, viaFallback] = [createNetns('text'), createNetns('fallback')];
    try {
      execIn(viaText.name, ['nft', '-f', '-'], script);
      const ns = addon.openNetns(viaFallback.path);
      try {
        const [before, sent, after] = await addon.run(ns, [
          { op: 'nftGeneration' },
          { op: 'nftBatch', batch: bad, script },
          { op: 'nftGeneration' },
        ] as const);
        expect(sent.fallback).toBe(true);
        expect(sent.fallbackReason).toMatch(/No such file or directory \(NFT_MSG_NEWRULE\)/);
        expect(after.generation).toBe(before.generation + 1); // only the text committed
        expect(sent.generation).toBe(after.generation); // right after the text
        expect(sent.generationBefore).toBe(before.generation); // the stamp rule (stampOf) decides from the two
        expect(listing(viaFallback)).toBe(listing(viaText));
      } finally {
        ns.close();
      }
    } finally {
      deleteNetns(viaText);
      deleteNetns(viaFallback);
    }
  });

  it('malformed batches are refused before anything is sent', async () => {
    const pod = createNetns('bad');
    const ns = addon.openNetns(pod.path);
    try {
      await expect(addon.run(ns, [{ op: 'nftBatch', batch: new Uint8Array(0), script: '' }])).rejects.toMatchObject({
        code: 'EINVAL',
        detail: 'the batch is empty',
      });
      await expect(addon.run(ns, [{ op: 'nftBatch', batch: new Uint8Array(7), script: '' }])).rejects.toMatchObject({
        code: 'EINVAL',
        detail: 'truncated netlink message',
      });
      const wrongType = new Uint8Array(20);
      new DataView(wrongType.buffer).setUint32(0, 20, true);
      new DataView(wrongType.buffer).setUint16(4, (10 << 8) | 1, true); // NFNL_SUBSYS_NFTABLES, NFT_MSG_GETTABLE
      await expect(addon.run(ns, [{ op: 'nftBatch', batch: wrongType, script: '' }])).rejects.toMatchObject({
        code: 'EINVAL',
        detail: 'not a table, chain or rule message',
      });
      expect(execIn(pod.name, ['nft', 'list', 'ruleset'])).toBe('');
    } finally {
      ns.close();
      deleteNetns(pod);
    }
  });
});
