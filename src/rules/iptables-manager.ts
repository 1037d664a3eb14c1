// The iptables backend, for nodes that cannot use nftables. Like Istio it execs
// iptables-restore, but from an addon thread inside the pod's namespace (posix_spawn from that
// thread: the child inherits the namespace; argv only, never a shell).
import type { NetAddon, NetnsHandle } from '../addon/net-addon.js';
import type { ExecResult, Step } from '../addon/steps.js';
import { driftReport, mergeDrift, type DriftItem, type DriftReport } from './drift.js';
import { wrapRuleError, type InpodRuleManager } from './manager.js';
import { buildInpodModel } from './model.js';
import { inpodIptablesDeleteCommands, renderInpodIptables } from './iptables.js';
import { LOOPBACK_UP_STEP } from './loopback.js';
import { routingApplySteps, routingDeleteSteps, routingDrift, routingListSteps, routingStates } from './routing.js';
import type { PodOverrides, RuleSettings } from './settings.js';

const EXEC_TIMEOUT_MS = 30_000;

function restoreStep(binary: string, input: string): Step {
  return { op: 'exec', argv: [binary, '--noflush', '-v'], input, timeoutMs: EXEC_TIMEOUT_MS };
}

function saveSteps(ipv6: boolean): Step[] {
  const binaries = ipv6 ? ['iptables-save', 'ip6tables-save'] : ['iptables-save'];
  return binaries.map((binary) => ({ op: 'exec', argv: [binary], timeoutMs: EXEC_TIMEOUT_MS }));
}

function checkExit(result: ExecResult, what: string): void {
  if (result.exitCode !== 0) {
    const err = new Error(
      `${what} exited with ${result.exitCode}${result.signal ? ` (signal ${result.signal})` : ''}: ${result.stderr.trim()}`,
    );
    throw Object.assign(err, { code: 'ERR_IPTABLES_RESTORE' });
  }
}

/** Per chain, how many rules an iptables-save text holds for our ISTIO_* chains and jumps. */
export function countAgentRules(saveText: string): Map<string, number> {
  const counts = new Map<string, number>();
  let table = '';
  for (const line of saveText.split('\n')) {
    if (line.startsWith('*')) table = line.slice(1).trim();
    const m = /^-A (\S+) (.*)$/.exec(line);
    if (!m) continue;
    const [, chain = '', rest = ''] = m;
    if (!chain.startsWith('ISTIO_') && !/-j ISTIO_/.test(rest)) continue;
    const key = `${table}/${chain}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return counts;
}

function countsDrift(where: string, expected: Map<string, number>, actual: Map<string, number>): DriftReport {
  const missing: DriftItem[] = [];
  const extra: DriftItem[] = [];
  for (const key of new Set([...expected.keys(), ...actual.keys()])) {
    const want = expected.get(key) ?? 0;
    const have = actual.get(key) ?? 0;
    const item = { kind: 'rule' as const, where: `${where} ${key}`, text: `${have} rules, expected ${want}` };
    if (have < want) missing.push(item);
    if (have > want) extra.push(item);
  }
  return driftReport(missing, extra);
}

function restoreToSave(restore: string): string {
  return restore.replace(/^-I (\S+) \d+ /gm, '-A $1 ');
}

export class IptablesInpodRules implements InpodRuleManager {
  readonly backend = 'iptables' as const;

  constructor(
    private readonly addon: NetAddon,
    private readonly settings: RuleSettings,
  ) {}

  restoreInputs(overrides: PodOverrides): { v4: string; v6?: string } {
    return renderInpodIptables(buildInpodModel(this.settings, overrides));
  }

  /**
   * Istio refuses (without reconcile) to apply over leftovers, because its restore input
   * declares chains with -N. We remove our own leftovers first, so applying twice leaves one copy.
   * No stamp: iptables-restore commits through the kernel's xtables layer, and verify always lists.
   */
  apply(ns: NetnsHandle, overrides: PodOverrides): Promise<undefined> {
    return wrapRuleError('apply', ns, this.backend, async () => {
      const inputs = this.restoreInputs(overrides);
      const saved = (await this.addon.run(ns, saveSteps(this.settings.ipv6))) as ExecResult[];
      if (saved.some((s) => countAgentRules(s.stdout).size > 0)) await this.#deleteRules(ns);
      const steps: Step[] = [
        LOOPBACK_UP_STEP,
        ...routingApplySteps(this.settings.ipv6),
        restoreStep('iptables-restore', inputs.v4),
        ...(inputs.v6 ? [restoreStep('ip6tables-restore', inputs.v6)] : []),
      ];
      const results = await this.addon.run(ns, steps);
      for (const r of results.filter((x): x is ExecResult => x.op === 'exec')) checkExit(r, 'iptables-restore');
      return undefined;
    });
  }

  remove(ns: NetnsHandle): Promise<void> {
    return wrapRuleError('remove', ns, this.backend, async () => {
      await this.#deleteRules(ns);
      await this.addon.run(ns, routingDeleteSteps(this.settings.ipv6));
    });
  }

  /** Like Istio's delta check: rule counts per ISTIO_ chain (save output is normalised text). */
  verify(ns: NetnsHandle, overrides: PodOverrides): Promise<DriftReport> {
    return wrapRuleError('verify', ns, this.backend, async () => {
      const inputs = this.restoreInputs(overrides);
      const saved = (await this.addon.run(ns, saveSteps(this.settings.ipv6))) as ExecResult[];
      const routing = await this.addon.run(ns, routingListSteps(this.settings.ipv6));
      const expected = [inputs.v4, inputs.v6].filter((x): x is string => x !== undefined);
      const reports = expected.map((restore, i) =>
        countsDrift(i === 0 ? 'ipv4' : 'ipv6', countAgentRules(restoreToSave(restore)), countAgentRules(saved[i]?.stdout ?? '')),
      );
      return mergeDrift(...reports, routingDrift(routingStates(this.settings.ipv6, routing)));
    });
  }

  /** Best effort, as Istio: each command may fail because its target is already gone. */
  async #deleteRules(ns: NetnsHandle): Promise<void> {
    const commands = inpodIptablesDeleteCommands(this.settings.ipv6);
    await this.addon.run(
      ns,
      commands.map((argv): Step => ({ op: 'exec', argv, timeoutMs: EXEC_TIMEOUT_MS })),
    );
  }
}
