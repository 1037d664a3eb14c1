// The nftables backend: one atomic nf_tables transaction for the rules (a prebuilt netlink batch
// compiled from the transaction text, or the text through libnftables until that batch exists),
// then the routes and the ip rules, all in a single visit to the pod's namespace on an
// addon-owned thread.
import type { NetAddon, NetnsHandle } from '../addon/net-addon.js';
import type { NftBatchStep, RoutingStep } from '../addon/steps.js';
import { CanonicalListings, isAmbientTable, LIST_RULESET_STEP } from './canonical.js';
import { diffRulesets, driftReport, mergeDrift, type DriftReport } from './drift.js';
import type { InpodRuleManager, RulesStamp, VerifyResult } from './manager.js';
import { wrapRuleError } from './manager.js';
import { buildInpodModel } from './model.js';
import { parseNftListing } from './nft-listing.js';
import { LOOPBACK_UP_STEP } from './loopback.js';
import { NftBatches } from './nft-batches.js';
import { inpodNftablesDeleteStep, inpodNftTables, renderInpodNftables } from './nftables.js';
import { routingApplySteps, routingDeleteSteps, routingDrift, routingListSteps, routingStates } from './routing.js';
import { NO_OVERRIDES, type PodOverrides, type RuleSettings } from './settings.js';

const GENERATION = { op: 'nftGeneration' } as const;

type BatchApply = readonly [typeof LOOPBACK_UP_STEP, NftBatchStep, ...RoutingStep[]];

interface Transaction {
  script: string;
  tables: string[];
  batchApply?: BatchApply;
}

export class NftablesInpodRules implements InpodRuleManager {
  readonly backend = 'nftables' as const;
  readonly #canonical: CanonicalListings;
  readonly #batches: NftBatches;
  readonly #transactions = new Map<string, Transaction>();
  /** Overrides objects seen before (most pods share NO_OVERRIDES): no key string per pod. */
  readonly #byOverrides = new WeakMap<PodOverrides, Transaction>();
  /** Applies whose batch the kernel refused (the text was applied instead). */
  batchFallbacks = 0;

  constructor(
    private readonly addon: NetAddon,
    private readonly settings: RuleSettings,
    canonical?: CanonicalListings,
  ) {
    this.#canonical = canonical ?? new CanonicalListings(addon);
    this.#batches = new NftBatches(addon);
  }

  /** The exact transaction text apply sends (what `nft -f` would read). */
  script(overrides: PodOverrides): string {
    return this.#transaction(overrides).script;
  }

  /** Rendered once per distinct overrides (the settings are fixed): no model or text per pod. */
  #transaction(overrides: PodOverrides): Transaction {
    let tx = this.#byOverrides.get(overrides);
    if (tx) return tx;
    const key = overridesKey(overrides);
    tx = this.#transactions.get(key);
    if (!tx) {
      const model = buildInpodModel(this.settings, overrides);
      tx = { script: renderInpodNftables(model), tables: inpodNftTables(model) };
      this.#transactions.set(key, tx);
    }
    this.#byOverrides.set(overrides, tx);
    return tx;
  }

  /**
   * The whole apply visit with the prebuilt batch, built once per transaction: lo first (ztunnel
   * binds 127.0.0.1 there, and the kernel refuses the IPv6 route while it is down), the batch,
   * the routing. Undefined until the batch is compiled (the text path serves meanwhile).
   */
  #batchSteps(tx: Transaction): BatchApply | undefined {
    if (tx.batchApply) return tx.batchApply;
    const batch = this.#batches.peek(tx.script, tx.tables);
    if (!batch) return undefined;
    tx.batchApply = [LOOPBACK_UP_STEP, { op: 'nftBatch', batch, script: tx.script }, ...routingApplySteps(this.settings.ipv6)] as const;
    return tx.batchApply;
  }

  /** Compiles the batch for these overrides now, so the next apply sends it. */
  async prepare(overrides: PodOverrides): Promise<Uint8Array> {
    const { script, tables } = this.#transaction(overrides);
    return this.#batches.get(script, tables);
  }

  /**
   * Pays the first-use costs (library init, page-in, kernel module autoload of nat/redirect)
   * on a throw-away namespace at start-up, so the first pod does not.
   */
  async warmUp(): Promise<void> {
    this.addon.warmUp();
    const { script } = this.#transaction(NO_OVERRIDES);
    const batch = await this.prepare(NO_OVERRIDES);
    await this.addon.run('fresh', [{ op: 'nftBatch', batch, script }]);
  }

  /**
   * Returns a stamp for a later verify: the generation of our own commit, from the batch's echo,
   * or (the text, and a refused batch's fallback to it) from stampOf.
   */
  apply(ns: NetnsHandle, overrides: PodOverrides): Promise<RulesStamp | undefined> {
    return wrapRuleError('apply', ns, this.backend, async () => {
      const tx = this.#transaction(overrides);
      const steps = this.#batchSteps(tx);
      if (steps) {
        const [, sent] = await this.addon.run(ns, steps);
        if (sent.fallback) {
          this.batchFallbacks++;
          return sent.generation === null || sent.generationBefore === undefined
            ? undefined
            : stampOf(sent.generationBefore, sent.generation);
        }
        return sent.generation === null ? undefined : { nftGeneration: sent.generation };
      }
      const [, before, , after] = await this.addon.run(ns, [
        LOOPBACK_UP_STEP,
        GENERATION,
        { op: 'nft', script: tx.script },
        GENERATION,
        ...routingApplySteps(this.settings.ipv6),
      ] as const);
      return stampOf(before.generation, after.generation);
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
      const [before, listed, after, ...routing] = await this.addon.run(ns, [
        GENERATION,
        LIST_RULESET_STEP,
        GENERATION,
        ...routingListSteps(this.settings.ipv6),
      ]);
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

/**
 * A stamp when the generation went up by exactly one around our transaction: then the ruleset
 * after it is exactly ours, and an unchanged generation later means unchanged rules.
 */
function stampOf(before: number, after: number): RulesStamp | undefined {
  return after === (before + 1) >>> 0 ? { nftGeneration: after } : undefined;
}

/** Everything of the overrides that the model reads, as one string. */
function overridesKey(o: PodOverrides): string {
  return JSON.stringify([o.ingressMode, o.dnsProxy, o.virtualInterfaces]);
}
