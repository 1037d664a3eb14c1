// What Istio's node agent runs for ONE pod, step by step, modelled from its source (istio/istio at
// 86c9f01f, the vendored sigs.k8s.io/knftables v0.0.21 from its go.mod), for the benchmarks'
// baselines. Istio runs CreateInpodRules inside the pod netns on an OS thread locked to it
// (cni/pkg/nodeagent/net_linux.go AddPodToMesh -> s.netnsRunner), so every process is spawned
// from a thread already in the pod netns (no nsenter) and the routing goes through netlink from
// that thread; here that is one addon job in the pod netns: exec steps are posix_spawn'd from
// the worker thread that setns()ed in, the routing is one netlink request per change (as
// vishvananda/netlink sends them). Then (AddPodToMesh -> sendPodToZtunnelAndWaitForAck) the ZDS
// add and its ack, after the rules.
import type { NetAddon, NetnsHandle } from '../src/addon/net-addon.js';
import type { ExecResult, Step } from '../src/addon/steps.js';
import { fwmarkRule, localRoute } from '../src/rules/routing.js';

export interface IstioInputs {
  ipv6: boolean;
  /** The nft transaction (byte-identical to Istio's goldens for the same settings). */
  nftScript: string;
  restoreV4: string;
  restoreV6?: string;
}

export type IstioBackend = 'iptables' | 'nftables';

/** knftables v0.0.21 newInternal(): the object-comment probe, checked with `nft --check -f -`. */
export const KNFTABLES_PROBE = 'add table inet test { comment "test" ; }\n';

interface Command {
  /** What runs, as Istio runs it. */
  text: string;
  /** Where in Istio's source it comes from. */
  source: string;
  step: Step;
}

const exec = (argv: string[], input?: string): Step => ({ op: 'exec', argv, ...(input !== undefined ? { input } : {}), timeoutMs: 30_000 });

function families(ipv6: boolean): Array<4 | 6> {
  return ipv6 ? [4, 6] : [4];
}

/** cni/pkg/iptables/iptables_linux.go AddLoopbackRoutes + AddInpodMarkIPRule (both backends call them). */
function routing(ipv6: boolean): Command[] {
  const routes = families(ipv6).map((family): Command => ({
    text: `netlink RTM_NEWROUTE replace local ${family === 4 ? '0.0.0.0/0' : '::/0'} dev lo table 100${family === 6 ? ' (if lo has IPv6)' : ''}`,
    source: 'cni/pkg/iptables/iptables_linux.go AddLoopbackRoutes -> forEachLoopbackRoute (netlink.RouteReplace)',
    step: { op: 'replaceLocalRoute', ...localRoute(family), skipWithoutIpv6: family === 6 },
  }));
  const rules = families(ipv6).map((family): Command => ({
    text: `netlink RTM_NEWRULE ipv${family} fwmark 0x111/0xfff pref 32764 lookup 100`,
    source: 'cni/pkg/iptables/iptables_linux.go AddInpodMarkIPRule (netlink.RuleAdd)',
    step: { op: 'addFwmarkRule', ...fwmarkRule(family) },
  }));
  return [...routes, ...rules];
}

/** NATIVE_NFTABLES=false (the chart default): cni/pkg/iptables/iptables.go CreateInpodRules. */
function iptablesCommands(inputs: IstioInputs): Command[] {
  const state = 'tools/istio-iptables/pkg/capture/helper.go VerifyIptablesState (both families, whatever AMBIENT_IPV6)';
  const restore = 'cni/pkg/iptables/iptables.go executeCommands -> executeIptablesRestoreCommand';
  return [
    ...routing(inputs.ipv6),
    { text: 'iptables-save', source: state, step: exec(['iptables-save']) },
    { text: 'ip6tables-save', source: state, step: exec(['ip6tables-save']) },
    {
      text: 'iptables-restore --noflush -v < (v4 rules)',
      source: restore,
      step: exec(['iptables-restore', '--noflush', '-v'], inputs.restoreV4),
    },
    ...(inputs.ipv6 && inputs.restoreV6 !== undefined
      ? [
          {
            text: 'ip6tables-restore --noflush -v < (v6 rules)',
            source: `${restore} (EnableIPv6)`,
            step: exec(['ip6tables-restore', '--noflush', '-v'], inputs.restoreV6),
          },
        ]
      : []),
  ];
}

/**
 * NATIVE_NFTABLES=true: cni/pkg/nftables/nftables.go CreateInpodRules -> AppendInpodRules ->
 * executeCommands, which calls cfg.nftProvider("", "") = builder.NewNftImpl -> knftables.New()
 * for every call; New runs `nft --version` and the probe transaction with `--check` (a second
 * probe only if the first fails, not on this kernel); the transaction itself is `nft -f -`.
 */
function nftablesCommands(inputs: IstioInputs): Command[] {
  const knft =
    'sigs.k8s.io/knftables@v0.0.21 nftables.go newInternal (via tools/istio-nftables/pkg/builder NewNftImpl, from cni/pkg/nftables/nftables.go executeCommands)';
  return [
    { text: 'nft --version', source: knft, step: exec(['nft', '--version']) },
    { text: `nft --check -f - < '${KNFTABLES_PROBE.trim()}'`, source: knft, step: exec(['nft', '--check', '-f', '-'], KNFTABLES_PROBE) },
    {
      text: 'nft -f - < (the in-pod transaction)',
      source: 'sigs.k8s.io/knftables@v0.0.21 nftables.go realNFTables.Run (cni/pkg/nftables/nftables.go executeCommands)',
      step: exec(['nft', '-f', '-'], inputs.nftScript),
    },
    ...routing(inputs.ipv6),
  ];
}

function commands(backend: IstioBackend, inputs: IstioInputs): Command[] {
  return backend === 'iptables' ? iptablesCommands(inputs) : nftablesCommands(inputs);
}

/** Runs Istio's sequence for one pod in `ns` (one visit, as Istio's locked thread); throws on any failure. */
export async function runIstioSequence(addon: NetAddon, ns: NetnsHandle, backend: IstioBackend, inputs: IstioInputs): Promise<void> {
  const cmds = commands(backend, inputs);
  const results = await addon.run(
    ns,
    cmds.map((c) => c.step),
  );
  results.forEach((result, i) => {
    const r = result as Partial<ExecResult>;
    if (r.op === 'exec' && r.exitCode !== 0) {
      throw new Error(`Istio ${backend} sequence: ${cmds[i]!.text} exited with ${r.exitCode}: ${(r.stderr ?? '').trim()}`);
    }
  });
}

/** The exact command sequence and its Istio sources, for the benchmark output. */
export function describeIstioSequence(backend: IstioBackend, inputs: IstioInputs, withZds: boolean): string[] {
  const lines = commands(backend, inputs).map((c, i) => `${i + 1}. ${c.text}  [${c.source}]`);
  if (withZds) {
    lines.push(
      `${lines.length + 1}. ZDS WorkloadRequest{add} with the netns fd, wait for the ack  [cni/pkg/nodeagent/net_linux.go AddPodToMesh -> sendPodToZtunnelAndWaitForAck -> ztunnelserver_linux.go PodAdded]`,
    );
  }
  return lines;
}
