// Where the agent learns about pods: standalone (only the CNI path, state kept in the run dir,
// standalone-source.ts) or Kubernetes (informers, enablement selectors, annotations, host probe
// rules, kube-source.ts, loaded only in that mode so a standalone agent starts without the
// Kubernetes client). The agent wires either one to the plugin-event server and the ZDS server.
import type { NetAddon } from '../addon/net-addon.js';
import type { PluginAddEvent, PluginDelEvent } from '../cni/protocol.js';
import type { Logger } from '../ops/log.js';
import type { AgentMetrics } from '../ops/metrics.js';
import type { CniPod } from '../standalone/enroller.js';
import type { InpodRuleManager } from '../rules/manager.js';
import type { PodOverrides, RuleSettings } from '../rules/settings.js';
import type { PodRegistry } from '../zds/registry.js';
import type { AgentConfig } from './config.js';

export interface PodSource {
  readonly mode: 'standalone' | 'kubernetes';
  /** Before ZDS listens: everything the first snapshot needs. */
  prepare(): Promise<void>;
  /** After ZDS listens: start acting on events. */
  run(): void;
  cniAdd(e: PluginAddEvent): Promise<void>;
  cniDel(e: PluginDelEvent): Promise<void>;
  cniCheck(e: PluginAddEvent): Promise<string | undefined>;
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
