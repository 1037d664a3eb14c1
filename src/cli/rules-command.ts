// `ambient-node-agent rules`: print the rendered rules exactly as Istio's golden files show them,
// or apply / delete / verify them inside a network namespace.
import { isIPv4, isIPv6 } from 'node:net';
import { parseArgs } from 'node:util';
import { hasErrorCode } from '../addon/errors.js';
import { NativeNetAddon, type NetAddon, type NetnsHandle } from '../addon/net-addon.js';
import { IpsetProbeSetStore } from '../host/ipset-probe-sets.js';
import { findKubeletUid } from '../host/kubelet.js';
import type { ProbeFamily } from '../host/probe-sets.js';
import { describeDrift, driftReport, mergeDrift, type DriftReport } from '../rules/drift.js';
import { NftablesHostRules } from '../rules/host-manager.js';
import { renderHostIptables, renderInpodIptables } from '../rules/iptables.js';
import { IptablesHostRules } from '../rules/iptables-host-manager.js';
import { IptablesInpodRules } from '../rules/iptables-manager.js';
import type { Backend, InpodRuleManager } from '../rules/manager.js';
import { buildHostModel, buildInpodModel } from '../rules/model.js';
import { renderHostNftables, renderInpodNftables } from '../rules/nftables.js';
import { NftablesInpodRules } from '../rules/nftables-manager.js';
import { defaultRuleSettings, interfaceNameProblem, parseGoBool, type PodOverrides, type RuleSettings } from '../rules/settings.js';
import { UsageError } from '../util/usage-error.js';

export const RULES_USAGE = `usage: ambient-node-agent rules [options] [--apply NETNS | --delete NETNS | --verify NETNS]

Prints the in-pod redirection rules (or, with --host, the host probe SNAT rules) exactly as
Istio renders them, or applies / deletes / verifies them inside the network namespace NETNS
(a path such as /var/run/netns/pod or /proc/<pid>/ns/net).

  --backend nftables|iptables   rule backend (default nftables)
  --ipv6                        also render IPv6 rules (default off)
  --dns-capture true|false      global DNS capture, AMBIENT_DNS_CAPTURE (default true)
  --pod-dns-capture true|false  the pod's ambient.istio.io/dns-capture annotation (default unset)
  --ingress                     the pod's ambient.istio.io/bypass-inbound-capture=true
  --virtual-interfaces a,b      the pod's istio.io/reroute-virtual-interfaces
  --snat-ipv4 IP                HOST_PROBE_SNAT_IP (default 169.254.7.127)
  --snat-ipv6 IP                HOST_PROBE_SNAT_IPV6 (default fd16:9254:7127:1337:ffff:ffff:ffff:ffff)
  --host                        the host-side probe SNAT rules instead of the in-pod rules
  --kubelet-uid N               kubelet UID for --host with nftables (default: found in /proc;
                                iptables matches --socket-exists and needs none)
  --apply NETNS | --delete NETNS | --verify NETNS
`;

const OPTIONS = {
  backend: { type: 'string', default: 'nftables' },
  ipv6: { type: 'boolean', default: false },
  'dns-capture': { type: 'string', default: 'true' },
  'pod-dns-capture': { type: 'string' },
  ingress: { type: 'boolean', default: false },
  'virtual-interfaces': { type: 'string' },
  'snat-ipv4': { type: 'string' },
  'snat-ipv6': { type: 'string' },
  host: { type: 'boolean', default: false },
  'kubelet-uid': { type: 'string' },
  apply: { type: 'string' },
  delete: { type: 'string' },
  verify: { type: 'string' },
  help: { type: 'boolean', short: 'h', default: false },
} as const;

type Action = { kind: 'print' } | { kind: 'apply' | 'delete' | 'verify'; netns: string };

export interface RulesCommand {
  backend: Backend;
  settings: RuleSettings;
  overrides: PodOverrides;
  host: boolean;
  kubeletUid?: number;
  action: Action;
  help: boolean;
}

function boolFlag(name: string, value: string): boolean {
  const parsed = parseGoBool(value);
  if (parsed === undefined) throw new UsageError(`--${name}: expected true or false, got ${JSON.stringify(value)}`);
  return parsed;
}

function ipFlag(name: string, value: string | undefined, check: (v: string) => boolean): string | undefined {
  if (value !== undefined && !check(value)) throw new UsageError(`--${name}: not a valid address: ${JSON.stringify(value)}`);
  return value;
}

function interfacesFlag(value: string | undefined): string[] {
  const names = (value ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const name of names) {
    const problem = interfaceNameProblem(name);
    if (problem) throw new UsageError(`--virtual-interfaces: ${JSON.stringify(name)}: ${problem}`);
  }
  return names;
}

function actionOf(values: { apply?: string; delete?: string; verify?: string }): Action {
  const chosen = (['apply', 'delete', 'verify'] as const).filter((k) => values[k] !== undefined);
  if (chosen.length > 1) throw new UsageError(`choose one of --apply, --delete, --verify (got ${chosen.map((c) => `--${c}`).join(', ')})`);
  const kind = chosen[0];
  if (!kind) return { kind: 'print' };
  const netns = values[kind] ?? '';
  if (netns === '') throw new UsageError(`--${kind}: a netns path is required`);
  return { kind, netns };
}

function kubeletUidFlag(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  if (!/^\d+$/.test(value)) throw new UsageError(`--kubelet-uid: expected a non-negative integer, got ${JSON.stringify(value)}`);
  return Number(value);
}

export function parseRulesArgs(args: string[]): RulesCommand {
  let values;
  try {
    ({ values } = parseArgs({ args, options: OPTIONS, strict: true, allowPositionals: false }));
  } catch (err) {
    throw new UsageError(err instanceof Error ? err.message : String(err));
  }
  if (values.backend !== 'nftables' && values.backend !== 'iptables') {
    throw new UsageError(`--backend: expected nftables or iptables, got ${JSON.stringify(values.backend)}`);
  }
  const podDns = values['pod-dns-capture'];
  const settings = defaultRuleSettings({
    ipv6: values.ipv6,
    dnsCapture: boolFlag('dns-capture', values['dns-capture']),
    ...(ipFlag('snat-ipv4', values['snat-ipv4'], isIPv4) ? { hostProbeSnatIpv4: values['snat-ipv4'] } : {}),
    ...(ipFlag('snat-ipv6', values['snat-ipv6'], isIPv6) ? { hostProbeSnatIpv6: values['snat-ipv6'] } : {}),
  });
  const overrides: PodOverrides = {
    ingressMode: values.ingress,
    dnsProxy: podDns === undefined ? 'unset' : boolFlag('pod-dns-capture', podDns) ? 'enabled' : 'disabled',
    virtualInterfaces: interfacesFlag(values['virtual-interfaces']),
  };
  const kubeletUid = kubeletUidFlag(values['kubelet-uid']);
  return {
    backend: values.backend,
    settings,
    overrides,
    host: values.host,
    ...(kubeletUid !== undefined ? { kubeletUid } : {}),
    action: actionOf(values),
    help: values.help,
  };
}

function resolveKubeletUid(cmd: RulesCommand): number {
  const uid = cmd.kubeletUid ?? findKubeletUid();
  if (uid === undefined) throw new UsageError('no kubelet process found in /proc; pass --kubelet-uid N');
  return uid;
}

/** The rule text alone: pure rendering, no kernel access. */
export function renderRules(cmd: RulesCommand): string {
  if (cmd.host) {
    const hostModel = buildHostModel(cmd.settings);
    if (cmd.backend === 'nftables') return renderHostNftables(hostModel, resolveKubeletUid(cmd));
    const host = renderHostIptables(hostModel);
    return [host.v4, host.v6].filter(Boolean).join('');
  }
  const model = buildInpodModel(cmd.settings, cmd.overrides);
  if (cmd.backend === 'nftables') return renderInpodNftables(model);
  const inpod = renderInpodIptables(model);
  return [inpod.v4, inpod.v6].filter(Boolean).join('');
}

function openTarget(addon: NetAddon, path: string): NetnsHandle {
  try {
    return addon.openNetns(path);
  } catch (err) {
    if (hasErrorCode(err, 'ENOENT', 'EINVAL', 'ENOTDIR', 'EACCES', 'EPERM')) {
      throw new UsageError(`${path}: ${hasErrorCode(err, 'EINVAL') ? 'not a network namespace' : (err as Error).message}`);
    }
    throw err;
  }
}

function inpodManager(cmd: RulesCommand, addon: NetAddon): InpodRuleManager {
  return cmd.backend === 'nftables' ? new NftablesInpodRules(addon, cmd.settings) : new IptablesInpodRules(addon, cmd.settings);
}

async function runAction(
  cmd: RulesCommand,
  addon: NetAddon,
  ns: NetnsHandle,
  kind: 'apply' | 'delete' | 'verify',
): Promise<DriftReport | undefined> {
  if (cmd.host && cmd.backend === 'iptables') return runIptablesHostAction(cmd, addon, ns, kind);
  if (cmd.host) {
    const host = new NftablesHostRules(addon, cmd.settings);
    if (kind === 'apply') return void (await host.apply(ns, resolveKubeletUid(cmd)));
    if (kind === 'delete') return void (await host.remove(ns));
    return host.verify(ns, resolveKubeletUid(cmd));
  }
  const manager = inpodManager(cmd, addon);
  if (kind === 'apply') return void (await manager.apply(ns, cmd.overrides));
  if (kind === 'delete') return void (await manager.remove(ns));
  return manager.verify(ns, cmd.overrides);
}

/**
 * The iptables host rules need their ip sets (iptables-restore refuses a --match-set on a missing
 * set): apply creates them (empty, or kept with their entries), as the nftables apply creates its
 * sets; delete removes the rules and keeps the sets, like the nftables delete.
 */
async function runIptablesHostAction(
  cmd: RulesCommand,
  addon: NetAddon,
  ns: NetnsHandle,
  kind: 'apply' | 'delete' | 'verify',
): Promise<DriftReport | undefined> {
  const rules = new IptablesHostRules(addon, cmd.settings);
  const sets = new IpsetProbeSetStore(addon, ns);
  const families: ProbeFamily[] = cmd.settings.ipv6 ? [4, 6] : [4];
  if (kind === 'apply') {
    await sets.ensure(families);
    return void (await rules.apply(ns));
  }
  if (kind === 'delete') return void (await rules.remove(ns));
  return mergeDrift(await rules.verify(ns), driftReport(await sets.drift(families), []));
}

export interface CommandIO {
  out(text: string): void;
}

/** Returns the exit status: 0 done / in sync, 1 drift found. Throws on failure. */
export async function runRulesCommand(cmd: RulesCommand, io: CommandIO, addon?: NetAddon): Promise<number> {
  if (cmd.help) {
    io.out(RULES_USAGE);
    return 0;
  }
  const action = cmd.action;
  if (action.kind === 'print') {
    io.out(renderRules(cmd));
    return 0;
  }
  const net = addon ?? new NativeNetAddon();
  const ns = openTarget(net, action.netns);
  try {
    const drift = await runAction(cmd, net, ns, action.kind);
    if (!drift) {
      io.out(
        `${action.kind === 'apply' ? 'applied' : 'deleted'} ${cmd.host ? 'host' : 'in-pod'} ${cmd.backend} rules in ${action.netns}\n`,
      );
      return 0;
    }
    const lines = describeDrift(drift);
    io.out(drift.inSync ? `in sync: ${action.netns}\n` : `drift in ${action.netns}:\n${lines.map((l) => `  ${l}\n`).join('')}`);
    return drift.inSync ? 0 : 1;
  } finally {
    ns.close();
  }
}
