// The in-pod rule managers: what the agent calls to redirect a pod, undo it, or check it.
import type { NetnsHandle } from '../addon/net-addon.js';
import type { DriftReport } from './drift.js';
import type { PodOverrides } from './settings.js';

export type Backend = 'nftables' | 'iptables';
export type RuleOperation = 'apply' | 'remove' | 'verify';

/**
 * What apply can leave behind to make a later verify cheap: the namespace's nftables generation
 * right after our own commit (the kernel adds one per committed transaction, in any table).
 */
export interface RulesStamp {
  nftGeneration: number;
}

/** A verification, and (nftables) the stamp that proves it until the next commit in the netns. */
export interface VerifyResult extends DriftReport {
  stamp?: RulesStamp;
}

export interface InpodRuleManager {
  readonly backend: Backend;
  /** Installs the redirection; applying again leaves exactly one copy. */
  apply(ns: NetnsHandle, overrides: PodOverrides): Promise<RulesStamp | undefined>;
  /** Removes everything apply added, and nothing else; removing twice succeeds. */
  remove(ns: NetnsHandle): Promise<void>;
  /**
   * Reports missing or extra tables, chains, rules, ip rules and routes. With the stamp of the
   * last apply, an unchanged generation proves the tables unchanged without listing them. An
   * in-sync result carries the stamp that lets the next verify skip the listing.
   */
  verify(ns: NetnsHandle, overrides: PodOverrides, stamp?: RulesStamp): Promise<VerifyResult>;
}

/**
 * A rule operation that failed. Keeps the underlying system error's `code` so callers can
 * still match on it (ENOENT: the netns vanished; EPERM: missing capability; ...).
 */
export class RuleOperationError extends Error {
  readonly code: string;
  constructor(
    readonly operation: RuleOperation,
    readonly netnsPath: string,
    readonly backend: Backend,
    cause: unknown,
  ) {
    const reason = cause instanceof Error ? cause.message : String(cause);
    super(`${operation} ${backend} in-pod rules in ${netnsPath}: ${reason}`, { cause });
    this.name = 'RuleOperationError';
    const code = (cause as { code?: unknown } | undefined)?.code;
    this.code = typeof code === 'string' ? code : 'ERR_RULES';
  }
}

export async function wrapRuleError<T>(operation: RuleOperation, ns: NetnsHandle, backend: Backend, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    throw new RuleOperationError(operation, ns.path, backend, err);
  }
}
