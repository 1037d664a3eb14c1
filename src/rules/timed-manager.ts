// Times every rule operation (for the rule-operation latency histogram) without the managers
// knowing about metrics.
import type { NetnsHandle } from '../addon/net-addon.js';
import type { InpodRuleManager, RuleOperation, RulesStamp, VerifyResult } from './manager.js';
import type { PodOverrides } from './settings.js';

export type RuleTimingObserver = (operation: RuleOperation, seconds: number, ok: boolean) => void;

export class TimedRuleManager implements InpodRuleManager {
  constructor(
    readonly inner: InpodRuleManager,
    private readonly observe: RuleTimingObserver,
  ) {}

  get backend(): InpodRuleManager['backend'] {
    return this.inner.backend;
  }

  apply(ns: NetnsHandle, overrides: PodOverrides): Promise<RulesStamp | undefined> {
    return this.#time('apply', () => this.inner.apply(ns, overrides));
  }

  remove(ns: NetnsHandle): Promise<void> {
    return this.#time('remove', () => this.inner.remove(ns));
  }

  verify(ns: NetnsHandle, overrides: PodOverrides, stamp?: RulesStamp): Promise<VerifyResult> {
    return this.#time('verify', () => this.inner.verify(ns, overrides, stamp));
  }

  async #time<T>(operation: RuleOperation, work: () => Promise<T>): Promise<T> {
    const started = process.hrtime.bigint();
    let ok = false;
    try {
      const result = await work();
      ok = true;
      return result;
    } finally {
      this.observe(operation, Number(process.hrtime.bigint() - started) / 1e9, ok);
    }
  }
}
