// Where the agent learns about pods: standalone (only the CNI path, state kept in the run dir,
// standalone-source.ts) or Kubernetes (informers, enablement selectors, annotations, host probe
// rules, kube-source.ts, loaded only in that mode so a standalone agent starts without the
// Kubernetes client). The agent wires either one to the plugin-event server and the ZDS server.
import type { NetAddon } from '../addon/net-addon.js';
import type { PluginAddEvent, PluginDelEvent, PluginGcEvent } from '../cni/protocol.js';
import type { Logger } from '../ops/log.js';
import type { AgentMetrics } from '../ops/metrics.js';
import type { CniPod } from '../pods/enroller.js';
import type { InpodRuleManager } from '../rules/manager.js';
import type { PodOverrides, RuleSettings } from '../rules/settings.js';
import type { HostReconcileTarget, PodReconcileHooks } from '../reconcile/pod-targets.js';
import type { PodRegistry } from '../zds/registry.js';
import type { AgentConfig } from './config.js';

export interface PodSource {
  readonly mode: 'standalone' | 'kubernetes';
  /** Before ZDS listens: everything the first snapshot needs. */
  prepare(): Promise<void>;
  /** After ZDS listens: start acting on events. */
  run(): void;
  /** Resolves once the pod is enrolled (the plugin-event server answers it by ADD_ANSWER_MS). */
  cniAdd(e: PluginAddEvent): Promise<void>;
  /** What a running ADD still waits for, named when it is answered before it finished. */
  pendingAdd?(e: PluginAddEvent): string | undefined;
  cniDel(e: PluginDelEvent): Promise<void>;
  cniCheck(e: PluginAddEvent): Promise<string | undefined>;
  /** CNI GC (optional: Kubernetes mode follows its informer instead). */
  cniGc?(e: PluginGcEvent): Promise<void>;
  notReadyReasons(): string[];
  /** On SIGTERM: should node-level artefacts (CNI config, binary, host rules) be removed? */
  shouldCleanUp(): Promise<boolean>;
  /** Removes node-level artefacts this source owns (host rules and probe sets). */
  cleanUp(): Promise<void>;
  stop(): Promise<void>;
  /** Releases what the source holds (after stop and any clean-up). */
  close?(): void;
  /** The pod's rule overrides (from its annotations), for verification. */
  overridesFor?(uid: string): PodOverrides;
  /** What live reconciliation needs from this mode (see src/reconcile/pod-targets.ts). */
  reconcileHooks?(): PodReconcileHooks;
  /** The host rules to watch and repair, once prepare() set them up (Kubernetes mode). */
  hostReconcileTarget?(): HostReconcileTarget | undefined;
}

export interface SourceDeps {
  config: AgentConfig;
  addon: NetAddon;
  rules: InpodRuleManager;
  registry: PodRegistry;
  settings: RuleSettings;
  log: Logger;
  metrics?: AgentMetrics;
}

/** Istio's plugin sends no UID; namespace/name is unique on a node at any one time. */
export function cniPodOf(e: PluginAddEvent): CniPod {
  return {
    uid: e.PodUID || `${e.PodNamespace}/${e.PodName}`,
    name: e.PodName,
    namespace: e.PodNamespace,
    netnsPath: e.Netns,
    containerId: e.ContainerID ?? '',
    ips: e.IPs.map((ip) => ip.Address.IP),
  };
}
