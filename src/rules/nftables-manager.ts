// The nftables backend: one atomic libnftables transaction for the rules, then the route and
// the ip rule, all in a single visit to the pod's namespace on an addon-owned thread.
import type { NetAddon, NetnsHandle } from '../addon/net-addon.js';
import { CanonicalListings, isAmbientTable, LIST_RULESET_STEP } from './canonical.js';
import { diffRulesets, driftReport, mergeDrift, type DriftReport } from './drift.js';
import type { InpodRuleManager, RulesStamp, VerifyResult } from './manager.js';
import { wrapRuleError } from './manager.js';
import { buildInpodModel } from './model.js';
import { parseNftListing } from './nft-listing.js';
import { inpodNftablesDeleteStep, renderInpodNftables } from './nftables.js';
import { LOOPBACK_UP_STEP } from './loopback.js';
import { routingApplySteps, routingDeleteSteps, routingDrift, routingListSteps, routingStates } from './routing.js';
import { NO_OVERRIDES, type PodOverrides, type RuleSettings } from './settings.js';

const GENERATION = { op: 'nftGeneration' } as const;

export class NftablesInpodRules implements InpodRuleManager {
  readonly backend = 'nftables' as const;
  readonly #canonical: CanonicalListings;

  constructor(
    private readonly addon: NetAddon,
    private readonly settings: RuleSettings,
    canonical?: CanonicalListings,
  ) {
    this.#canonical = canonical ?? new CanonicalListings(addon);
  }

  /** The exact transaction text apply sends (what `nft -f` would read). */
  script(overrides: PodOverrides): string {
    return renderInpodNftables(buildInpodModel(this.settings, overrides));
  }

  /**
   * Pays the first-use costs (library init, page-in, kernel module autoload of nat/redirect)
   * on a throw-away namespace at start-up, so the first pod does not.
   */
  async warmUp(): Promise<void> {
    this.addon.warmUp();
    await this.addon.run('fresh', [{ op: 'nft', script: this.script(NO_OVERRIDES) }]);
  }

  /**
   * Returns a stamp when the generation went up by exactly one around our transaction: then the
   * ruleset after it is exactly ours, and an unchanged generation later means unchanged rules.
   */
  apply(ns: NetnsHandle, overrides: PodOverrides): Promise<RulesStamp | undefined> {
    return wrapRuleError('apply', ns, this.backend, async () => {
      const [, before, , after] = await this.addon.run(ns, [
        LOOPBACK_UP_STEP,
        GENERATION,
        { op: 'nft', script: this.script(overrides) },
        GENERATION,
        ...routingApplySteps(this.settings.ipv6),
      ] as const);
      return after.generation === ((before.generation + 1) >>> 0) ? { nftGeneration: after.generation } : undefined;
    });
  }

  remove(ns: NetnsHandle): Promise<void> {
    return wrapRuleError('remove', ns, this.backend, async () => {
      await this.addon.run(ns, [inpodNftablesDeleteStep(), ...routingDeleteSteps(this.settings.ipv6)]);
    });
  }

  verify(ns: NetnsHandle, overrides: PodOverrides, stamp?: RulesStamp): Promise<VerifyResult> {
    return wrapRuleError('verify', ns, this.backend, async () => {
      if (stamp) {
        // Unchanged generation: nobody committed anything since our apply, so only the routing
        // (outside nftables) needs a look, and the ruleset is not listed at all.
        const [generation, ...routing] = await this.addon.run(ns, [GENERATION, ...routingListSteps(this.settings.ipv6)]);
        if ((generation as { generation: number }).generation === stamp.nftGeneration) {
          return withStamp(routingDrift(routingStates(this.settings.ipv6, routing)), stamp.nftGeneration);
        }
      }
      const expected = await this.#canonical.get(this.script(overrides));
      const [before, listed, after, ...routing] = await this.addon.run(ns, [GENERATION, LIST_RULESET_STEP, GENERATION, ...routingListSteps(this.settings.ipv6)]);
      const text = (listed as { output: string }).output;
      // The common case (a restart with 100+ pods): the very same text, nothing to parse.
      const tables = text === expected.text ? driftReport([], []) : diffRulesets(expected.parsed, parseNftListing(text, isAmbientTable));
      const report = mergeDrift(tables, routingDrift(routingStates(this.settings.ipv6, routing)));
      // A listing between two equal generations is the ruleset of that generation: a stamp.
      const g = (before as { generation: number }).generation;
      return g === (after as { generation: number }).generation ? withStamp(report, g) : report;
    });
  }
}

/** Only an in-sync verification proves anything for later. */
function withStamp(report: DriftReport, nftGeneration: number): VerifyResult {
  return report.inSync ? { ...report, stamp: { nftGeneration } } : report;
}
