// Host-side rules for kubelet probes: SNAT the kubelet's probe connections to the link-local
// address that the in-pod rules let through. Applied in the node's own network namespace.
import type { NetAddon, NetnsHandle } from '../addon/net-addon.js';
import { CanonicalListings, isAmbientTable, LIST_RULESET_STEP } from './canonical.js';
import { NFT_FAMILY, NFT_TABLE_NAT, PROBE_SET_V4, PROBE_SET_V6 } from './constants.js';
import { diffRulesets, type DriftReport } from './drift.js';
import { buildHostModel } from './model.js';
import { parseNftListing } from './nft-listing.js';
import { renderHostNftables, renderHostNftablesDelete } from './nftables.js';
import type { RuleSettings } from './settings.js';

const PROBE_SET_COMMENT = 'UUID of the pods that are part of ambient mesh';

/**
 * Creates the probe address sets the SNAT rules refer to. `add` keeps existing sets and their
 * elements, so re-running it at startup loses no enrolled pod.
 */
export function renderProbeSetsNftables(ipv6: boolean): string {
  const set = (name: string, type: string): string =>
    `add set ${NFT_FAMILY} ${NFT_TABLE_NAT} ${name} { type ${type} ; comment "${PROBE_SET_COMMENT}" ; }`;
  const lines = [
    `add table ${NFT_FAMILY} ${NFT_TABLE_NAT}`,
    set(PROBE_SET_V4, 'ipv4_addr'),
    ...(ipv6 ? [set(PROBE_SET_V6, 'ipv6_addr')] : []),
  ];
  return lines.map((l) => `${l}\n`).join('');
}

export class NftablesHostRules {
  readonly #canonical: CanonicalListings;

  constructor(
    private readonly addon: NetAddon,
    private readonly settings: RuleSettings,
    canonical?: CanonicalListings,
  ) {
    this.#canonical = canonical ?? new CanonicalListings(addon);
  }

  script(kubeletUid: number): string {
    return renderHostNftables(buildHostModel(this.settings), kubeletUid);
  }

  async apply(ns: NetnsHandle, kubeletUid: number): Promise<void> {
    await this.addon.run(ns, [
      { op: 'nft', script: renderProbeSetsNftables(this.settings.ipv6) },
      { op: 'nft', script: this.script(kubeletUid) },
    ]);
  }

  /** Flushes the rules and keeps the sets, as Istio does. */
  async remove(ns: NetnsHandle): Promise<void> {
    await this.addon.run(ns, [{ op: 'nft', script: renderHostNftablesDelete() }]);
  }

  async verify(ns: NetnsHandle, kubeletUid: number): Promise<DriftReport> {
    const expected = await this.#canonical.get(renderProbeSetsNftables(this.settings.ipv6) + this.script(kubeletUid));
    const [listed] = await this.addon.run(ns, [LIST_RULESET_STEP] as const);
    return diffRulesets(expected.parsed, parseNftListing(listed.output, isAmbientTable));
  }
}
