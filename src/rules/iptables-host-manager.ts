// The host probe SNAT rules of the iptables backend (Istio's default, NATIVE_NFTABLES=false):
// the `ISTIO_POSTRT` chain in the nat table, jumped to first thing in POSTROUTING, matching
// local sockets (`-m owner --socket-exists`) towards the `istio-inpod-probes-v4/-v6` ip sets.
// The restore input is Istio's golden hostprobe text; iptables-restore runs from an addon thread
// inside the host netns (argv only).
//
// Taking over what Istio's agent (or an earlier run) left: when the chain, its rule and a single
// jump are already exactly in place they are adopted untouched (no window without the SNAT);
// anything else is removed the way Istio's DeleteHostRules removes it, duplicated jumps
// included, and written again, so there is always exactly one of each.
import type { NetAddon, NetnsHandle } from '../addon/net-addon.js';
import type { ExecResult, Step } from '../addon/steps.js';
import { IPT_CHAIN_POSTROUTING } from './constants.js';
import { driftReport, mergeDrift, type DriftItem, type DriftReport } from './drift.js';
import { hostIptablesDeleteCommands, hostProbeRuleArgs, renderHostIptables } from './iptables.js';
import { buildHostModel, type HostModel, type IpFamily } from './model.js';
import type { RuleSettings } from './settings.js';

const EXEC_TIMEOUT_MS = 30_000;
const JUMP_ARGS = `-j ${IPT_CHAIN_POSTROUTING}`;

/** The nat table's POSTROUTING and ISTIO_POSTRT as `iptables-save` shows them. */
export interface HostNatState {
  chainExists: boolean;
  /** Rule arguments of POSTROUTING, in order. */
  postrouting: string[];
  /** Rule arguments of ISTIO_POSTRT, in order. */
  probeChain: string[];
}

/** Reads the `*nat` section of `iptables-save` text. */
export function parseHostNatState(saveText: string): HostNatState {
  const state: HostNatState = { chainExists: false, postrouting: [], probeChain: [] };
  let inNat = false;
  for (const line of saveText.split('\n')) {
    if (line.startsWith('*')) inNat = line.slice(1).trim() === 'nat';
    if (!inNat) continue;
    if (line.startsWith(`:${IPT_CHAIN_POSTROUTING} `)) state.chainExists = true;
    const m = /^-A (\S+) (.*)$/.exec(line);
    if (m?.[1] === 'POSTROUTING') state.postrouting.push(m[2] ?? '');
    if (m?.[1] === IPT_CHAIN_POSTROUTING) state.probeChain.push(m[2] ?? '');
  }
  return state;
}

/**
 * iptables-save prints a rule's options in its own order (`-p tcp` first); the same rule has the
 * same words in any order, and no two rules we compare differ only in word order.
 */
function sameRule(a: string, b: string): boolean {
  const words = (s: string): string => s.trim().split(/\s+/).sort().join(' ');
  return words(a) === words(b);
}

/** What differs from Istio's host rules for one family. */
export function hostNatDrift(state: HostNatState, expectedRules: readonly string[], where: string): DriftReport {
  const missing: DriftItem[] = [];
  const extra: DriftItem[] = [];
  if (!state.chainExists) missing.push({ kind: 'chain', where, text: `nat ${IPT_CHAIN_POSTROUTING}` });
  const jumps = state.postrouting.filter((args) => sameRule(args, JUMP_ARGS)).length;
  if (jumps === 0) missing.push({ kind: 'rule', where, text: `nat POSTROUTING ${JUMP_ARGS}` });
  if (jumps > 1) extra.push({ kind: 'rule', where, text: `nat POSTROUTING ${JUMP_ARGS} (${jumps} copies)` });
  if (jumps > 0 && !sameRule(state.postrouting[0] ?? '', JUMP_ARGS)) {
    extra.push({ kind: 'order', where, text: `nat POSTROUTING: ${JUMP_ARGS} is not the first rule` });
  }
  const have = [...state.probeChain];
  for (const rule of expectedRules) {
    const i = have.findIndex((args) => sameRule(args, rule));
    if (i < 0) missing.push({ kind: 'rule', where, text: `nat ${IPT_CHAIN_POSTROUTING} ${rule}` });
    else have.splice(i, 1);
  }
  for (const rule of have) extra.push({ kind: 'rule', where, text: `nat ${IPT_CHAIN_POSTROUTING} ${rule}` });
  return driftReport(missing, extra);
}

function checkExit(result: ExecResult, what: string): void {
  if (result.exitCode !== 0) {
    const err = new Error(
      `${what} exited with ${result.exitCode}${result.signal ? ` (signal ${result.signal})` : ''}: ${result.stderr.trim()}`,
    );
    throw Object.assign(err, { code: 'ERR_IPTABLES_RESTORE' });
  }
}

const execStep = (argv: string[], input?: string): Step => ({
  op: 'exec',
  argv,
  timeoutMs: EXEC_TIMEOUT_MS,
  ...(input !== undefined ? { input } : {}),
});

export class IptablesHostRules {
  readonly #model: HostModel;
  readonly #families: IpFamily[];

  constructor(
    private readonly addon: NetAddon,
    settings: RuleSettings,
  ) {
    this.#model = buildHostModel(settings);
    this.#families = settings.ipv6 ? [4, 6] : [4];
  }

  /** The iptables-restore inputs, byte for byte Istio's hostprobe golden (v6 with IPv6). */
  restoreInputs(): { v4: string; v6?: string } {
    return renderHostIptables(this.#model);
  }

  /** Writes the rules unless exactly they are in place already (adopted as they are). */
  async apply(ns: NetnsHandle): Promise<void> {
    const states = await this.#states(ns);
    const reports = this.#families.map((family, i) => this.#drift(family, states[i]!));
    if (reports.every((r) => r.inSync)) return;
    await this.#delete(ns, states);
    const inputs = this.restoreInputs();
    const steps = this.#families.map((family) =>
      execStep([family === 4 ? 'iptables-restore' : 'ip6tables-restore', '--noflush', '-v'], family === 4 ? inputs.v4 : inputs.v6),
    );
    const results = (await this.addon.run(ns, steps)) as ExecResult[];
    results.forEach((r, i) => checkExit(r, `${this.#families[i] === 4 ? 'iptables' : 'ip6tables'}-restore (host probe rules)`));
  }

  /** Istio's DeleteHostRules: best effort, each command may fail because its target is gone. */
  async remove(ns: NetnsHandle): Promise<void> {
    await this.#delete(ns, await this.#states(ns));
  }

  async verify(ns: NetnsHandle): Promise<DriftReport> {
    const states = await this.#states(ns);
    return mergeDrift(...this.#families.map((family, i) => this.#drift(family, states[i]!)));
  }

  #drift(family: IpFamily, state: HostNatState): DriftReport {
    const expected = this.#model.filter((rule) => rule.family === family).map(hostProbeRuleArgs);
    return hostNatDrift(state, expected, family === 4 ? 'ipv4' : 'ipv6');
  }

  async #states(ns: NetnsHandle): Promise<HostNatState[]> {
    const steps = this.#families.map((family) => execStep([family === 4 ? 'iptables-save' : 'ip6tables-save', '-t', 'nat']));
    const results = (await this.addon.run(ns, steps)) as ExecResult[];
    return results.map((r, i) => {
      if (r.exitCode !== 0)
        throw new Error(`${this.#families[i] === 4 ? 'iptables' : 'ip6tables'}-save -t nat exited with ${r.exitCode}: ${r.stderr.trim()}`);
      return parseHostNatState(r.stdout);
    });
  }

  async #delete(ns: NetnsHandle, states: HostNatState[]): Promise<void> {
    const commands = this.#families.flatMap((family, i) => {
      const jumps = states[i]!.postrouting.filter((args) => sameRule(args, JUMP_ARGS)).length;
      return hostIptablesDeleteCommands(this.#model, family, Math.max(0, jumps - 1));
    });
    await this.addon.run(
      ns,
      commands.map((argv) => execStep(argv)),
    );
  }
}
