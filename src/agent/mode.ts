// The agent's mode: standalone (only the CNI path, enrolled pods kept in the run dir,
// src/standalone/) or Kubernetes (informers, enablement selectors, annotations, host probe rules,
// src/kube/, loaded only in that mode so a standalone agent starts without the Kubernetes client).
// The agent knows neither: `run` builds the mode from the agent's parts (ModeDeps) and the agent
// wires it to the plugin-event server and the ZDS server.
import type { NetAddon } from '../addon/net-addon.js';
import type { PluginAddEvent, PluginDelEvent, PluginGcEvent } from '../cni/protocol.js';
import type { Logger } from '../ops/log.js';
import type { AgentMetrics } from '../ops/metrics.js';
import type { InpodRuleManager } from '../rules/manager.js';
import type { PodOverrides, RuleSettings } from '../rules/settings.js';
import type { HostReconcileTarget, PodReconcileHooks } from '../reconcile/pod-targets.js';
import type { PodRegistry } from '../zds/registry.js';
import type { AgentConfig } from './config.js';

export interface AgentMode {
  readonly mode: 'standalone' | 'kubernetes';
  /** Before ZDS listens: everything the first snapshot needs. */
  prepare(): Promise<void>;
  /** After ZDS listens: start acting on events. */
  run(): void;
  /**
   * Resolves (never rejects) once the pods prepare() restored are checked, if the mode checks
   * them after run(); the live reconciler opens their watches afterwards.
   */
  restored?(): Promise<void>;
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
  /** Removes node-level artefacts this mode owns (host rules and probe sets). */
  cleanUp(): Promise<void>;
  stop(): Promise<void>;
  /** Releases what the mode holds (after stop and any clean-up). */
  close?(): void;
  /** The pod's rule overrides (from its annotations), for verification. */
  overridesFor?(uid: string): PodOverrides;
  /** What live reconciliation needs from this mode (see src/reconcile/pod-targets.ts). */
  reconcileHooks?(): PodReconcileHooks;
  /** The host rules to watch and repair, once prepare() set them up (Kubernetes mode). */
  hostReconcileTarget?(): HostReconcileTarget | undefined;
}

/** The agent's parts a mode is built from. */
export interface ModeDeps {
  config: AgentConfig;
  addon: NetAddon;
  rules: InpodRuleManager;
  registry: PodRegistry;
  settings: RuleSettings;
  log: Logger;
  metrics?: AgentMetrics;
}
