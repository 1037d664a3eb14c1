// Remembers, per namespace, the nftables stamp of the last apply or in-sync verify, so every
// later verify (a netlink event, the sweep, CNI CHECK) of an untouched pod is one generation
// read plus the routing dumps instead of a ruleset listing. Both modes go through it.
import type { NetnsHandle, NetnsIdentity } from '../addon/net-addon.js';
import type { InpodRuleManager, RulesStamp, VerifyResult } from '../rules/manager.js';
import type { PodOverrides } from '../rules/settings.js';

const keyOf = (ns: NetnsIdentity): string => `${ns.dev}:${ns.ino}`;

export class StampedRules implements InpodRuleManager {
  readonly #stamps = new Map<string, RulesStamp>();

  constructor(readonly inner: InpodRuleManager) {}

  get backend(): InpodRuleManager['backend'] {
    return this.inner.backend;
  }

  async apply(ns: NetnsHandle, overrides: PodOverrides): Promise<RulesStamp | undefined> {
    this.#stamps.delete(keyOf(ns)); // whatever happens next, the old stamp proves nothing
    const stamp = await this.inner.apply(ns, overrides);
    if (stamp) this.#stamps.set(keyOf(ns), stamp);
    return stamp;
  }

  async remove(ns: NetnsHandle): Promise<void> {
    this.#stamps.delete(keyOf(ns));
    await this.inner.remove(ns);
  }

  async verify(ns: NetnsHandle, overrides: PodOverrides, stamp?: RulesStamp): Promise<VerifyResult> {
    const result = await this.inner.verify(ns, overrides, stamp ?? this.#stamps.get(keyOf(ns)));
    if (result.stamp) this.#stamps.set(keyOf(ns), result.stamp);
    else this.#stamps.delete(keyOf(ns));
    return result;
  }

  /** The namespace is no longer enrolled. */
  forget(ns: NetnsIdentity): void {
    this.#stamps.delete(keyOf(ns));
  }

  get size(): number {
    return this.#stamps.size;
  }
}
