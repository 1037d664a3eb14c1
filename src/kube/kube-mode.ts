// Kubernetes mode: Istio's node-agent logic over informers (pods on this node, namespaces),
// enablement selectors, annotations and the host probe rules. Imported only in this mode.
import type { V1Namespace, V1Pod } from '@kubernetes/client-node';
import type { NetnsHandle } from '../addon/net-addon.js';
import type { PluginAddEvent } from '../cni/protocol.js';
import { HostDataplane } from '../host/host-dataplane.js';
import { openHostNetns } from '../host/host-netns.js';
import { httpStatusOf, KubeApi } from './client.js';
import { ResilientInformer } from './informer.js';
import { MeshController, type HostProbes, type NetnsFinder } from './mesh-controller.js';
import { Enablement, parseEnablementSelectors } from './enablement.js';
import { ProcNetnsFinder } from './proc-netns-finder.js';
import { podOverridesFromAnnotations, type PodOverrides } from '../rules/settings.js';
import { writeEnablementSnapshot } from '../agent/enablement-file.js';
import type { KubeConfig } from '@kubernetes/client-node';
import { CoreV1Api } from '@kubernetes/client-node';
import type { AgentMode, ModeDeps } from '../agent/mode.js';
import { onboardingPending } from '../pods/onboard.js';
import { podIps } from '../kube/mesh-controller.js';
import type { HostReconcileTarget, PodReconcileHooks } from '../reconcile/pod-targets.js';

export interface KubernetesModeOptions {
  kc: KubeConfig;
  nodeName: string;
  /** AMBIENT_ENABLEMENT_SELECTOR (YAML); undefined: Istio's defaults. */
  enablementSelector?: string;
  systemNamespace: string;
  /** The DaemonSet whose presence means "upgrade, keep everything" (istio-cni-node). */
  daemonSetName: string;
  /** AMBIENT_DISABLE_SAFE_UPGRADE: always clean up on SIGTERM. */
  disableSafeUpgrade: boolean;
  reconcileRulesOnStartup?: boolean;
  /** Tests replace the node-facing parts (host probe rules, /proc scan). */
  host?: HostProbes & { start(): Promise<void>; cleanup(): Promise<void> };
  /** The agent's own netns (default /proc/self/ns/net; tests stand a pod netns in for it). */
  selfNetnsPath?: string;
  /** Sandbox identity checks of every enrolled pod (AMBIENT_RECONCILE_ENROLLMENT_INTERVAL); 0 = only on address events. */
  sandboxCheckIntervalMs?: number;
  finder?: NetnsFinder;
}

export class KubernetesMode implements AgentMode {
  readonly mode = 'kubernetes' as const;
  readonly controller: MeshController;
  readonly pods: ResilientInformer<V1Pod>;
  readonly namespaces: ResilientInformer<V1Namespace>;
  readonly host: HostProbes & { start(): Promise<void>; cleanup(): Promise<void> };
  readonly #api: KubeApi;
  readonly #core: CoreV1Api;
  readonly #enablement: Enablement;
  #sandboxTimer: NodeJS.Timeout | undefined;
  readonly #sandboxChecks = new Map<string, NodeJS.Timeout>();
  /** The node's netns, where the host rules live (src/host/host-netns.ts); held for the agent's lifetime. */
  readonly #hostNetns: NetnsHandle | undefined;
  /** Why the host-side work is refused (the node's netns is not ours and switching is off). */
  readonly #hostProblem: string | undefined;
  #prepared = false;

  constructor(
    private readonly deps: ModeDeps,
    private readonly opts: KubernetesModeOptions,
  ) {
    const core = opts.kc.makeApiClient(CoreV1Api);
    this.#core = core;
    this.#api = new KubeApi(opts.kc);
    this.#enablement = new Enablement({
      selectors: parseEnablementSelectors(opts.enablementSelector),
      excludeNamespaces: deps.config.excludeNamespaces,
      systemNamespace: opts.systemNamespace,
    });
    this.pods = new ResilientInformer<V1Pod>({
      kc: opts.kc,
      path: '/api/v1/pods',
      fieldSelector: `spec.nodeName=${opts.nodeName}`,
      list: () => core.listPodForAllNamespaces({ fieldSelector: `spec.nodeName=${opts.nodeName}` }),
      log: deps.log,
    });
    this.namespaces = new ResilientInformer<V1Namespace>({
      kc: opts.kc,
      path: '/api/v1/namespaces',
      list: () => core.listNamespace(),
      log: deps.log,
    });
    const hostNetns = opts.host
      ? undefined
      : openHostNetns(deps.addon, {
          procDir: deps.config.procDir,
          allowSwitch: deps.config.allowSwitchToHostNs,
          ...(opts.selfNetnsPath ? { selfPath: opts.selfNetnsPath } : {}),
        });
    this.#hostNetns = hostNetns?.handle;
    this.#hostProblem = hostNetns?.problem;
    this.host =
      opts.host ??
      (this.#hostProblem
        ? new RefusedHostProbes()
        : new HostDataplane({
            addon: deps.addon,
            hostNetns: hostNetns!.handle,
            settings: deps.settings,
            backend: deps.config.backend,
            procDir: deps.config.procDir,
            log: deps.log,
          }));
    this.controller = new MeshController({
      addon: deps.addon,
      rules: deps.rules,
      registry: deps.registry,
      pods: { get: (ns, name) => this.pods.get(ns, name), list: () => this.pods.list() },
      namespaces: { get: (name) => this.namespaces.get(undefined, name), list: () => this.namespaces.list() },
      api: this.#api,
      host: this.host,
      finder: opts.finder ?? this.#procFinder(),
      enablement: this.#enablement,
      netnsRoot: deps.config.netnsRoot,
      ...(hostNetns?.switched ? { hostNetns: { ino: hostNetns.handle.ino, dev: hostNetns.handle.dev } } : {}),
      netnsDirs: deps.config.netnsDirs,
      procDir: deps.config.procDir,
      reconcileRulesOnStartup: opts.reconcileRulesOnStartup ?? true,
      log: deps.log,
    });
    this.#wireEvents();
  }

  /** Skips the node's netns: `<proc>/1/ns/net` when switched, else the agent's own (as Istio). */
  #procFinder(): NetnsFinder {
    let hostNetns = this.#hostNetns ? { ino: this.#hostNetns.ino, dev: this.#hostNetns.dev } : undefined;
    if (!hostNetns) {
      const own = this.deps.addon.openNetns(this.opts.selfNetnsPath ?? '/proc/self/ns/net');
      hostNetns = { ino: own.ino, dev: own.dev };
      own.close();
    }
    return new ProcNetnsFinder({ addon: this.deps.addon, procDir: this.deps.config.procDir, hostNetns, log: this.deps.log });
  }

  #wireEvents(): void {
    const count = (type: 'add' | 'update' | 'delete'): void => this.deps.metrics?.reconcileEvents.inc({ type });
    this.pods.on('add', () => count('add')); // Istio ignores pod adds (the CNI path handles new pods) but counts them
    this.pods.on('update', (oldPod: V1Pod, newPod: V1Pod) => {
      count('update');
      this.controller.podUpdated(oldPod, newPod);
    });
    this.pods.on('delete', (pod: V1Pod) => {
      count('delete');
      this.controller.podDeleted(pod);
    });
    this.namespaces.on('add', (ns: V1Namespace) => {
      count('add');
      this.controller.namespaceAdded(ns);
      void this.#refreshEnablementFile();
    });
    this.namespaces.on('update', (oldNs: V1Namespace, newNs: V1Namespace) => {
      count('update');
      this.controller.namespaceUpdated(oldNs, newNs);
      void this.#refreshEnablementFile();
    });
    this.namespaces.on('delete', () => {
      count('delete');
      void this.#refreshEnablementFile();
    });
  }

  #refreshEnablementFile(): Promise<void> {
    const snapshot = this.#enablement.snapshotFor(this.namespaces.list());
    return writeEnablementSnapshot(this.deps.config.runDir, snapshot).catch((err: unknown) =>
      this.deps.log.warn({ err: (err as Error).message }, 'could not write the enablement snapshot file'),
    );
  }

  async prepare(): Promise<void> {
    this.pods.start();
    this.namespaces.start();
    await Promise.all([this.pods.synced(), this.namespaces.synced()]);
    await this.#refreshEnablementFile();
    if (this.#hostProblem) {
      this.deps.log.error({ component: 'host', problem: this.#hostProblem }, `HOST PROBE RULES NOT APPLIED: ${this.#hostProblem}`);
    } else {
      await this.host.start();
    }
    await this.controller.reconcileStartup();
    this.#prepared = true;
  }

  run(): void {
    this.controller.queue.resume();
    const every = this.opts.sandboxCheckIntervalMs ?? this.deps.config.reconcileEnrollmentIntervalMs ?? 0;
    if (every > 0) {
      this.#sandboxTimer = setInterval(() => {
        for (const { uid } of this.deps.registry.snapshot()) this.#checkSandboxSoon(uid, 0);
      }, every);
      this.#sandboxTimer.unref();
    }
  }

  /** Live reconciliation: Kubernetes-mode overrides, the removal lock, annotations that tell the truth. */
  reconcileHooks(): PodReconcileHooks {
    return {
      exclusive: (uid, work) => this.controller.exclusive(uid, work),
      overridesFor: (uid) => this.controller.overridesFor(uid),
      onOutcome: (uid, outcome) => {
        if (outcome.status === 'failed') {
          this.controller
            .markRepairFailed(uid)
            .catch((err: unknown) => this.deps.log.warn({ uid, err: (err as Error).message }, 'could not mark the pod pending'));
        } else {
          this.controller.markRepaired(uid);
        }
      },
      onAddressesChanged: (uid) => this.#checkSandboxSoon(uid, 100),
    };
  }

  /** The host dataplane's rules in the host netns (only when this source owns the real one). */
  hostReconcileTarget(): HostReconcileTarget | undefined {
    const host = this.host;
    if (!(host instanceof HostDataplane) || !this.#hostNetns) return undefined;
    return {
      netns: this.#hostNetns,
      verify: () => host.verify(),
      repair: () => host.repair(this.controller.enrolledPods().map((p) => ({ uid: p.metadata?.uid ?? '', ips: podIps(p) }))),
    };
  }

  /** Debounced per pod: a sandbox replacement comes with a burst of address events. */
  #checkSandboxSoon(uid: string, delayMs: number): void {
    if (this.#sandboxChecks.has(uid)) return;
    const timer = setTimeout(() => {
      this.#sandboxChecks.delete(uid);
      this.controller
        .checkSandbox(uid)
        .catch((err: unknown) => this.deps.log.warn({ uid, err: (err as Error).message }, 'sandbox check failed'));
    }, delayMs);
    timer.unref();
    this.#sandboxChecks.set(uid, timer);
  }

  cniAdd(e: PluginAddEvent): Promise<void> {
    return this.controller.cniAdd(e);
  }

  pendingAdd(e: PluginAddEvent): string | undefined {
    const pod = this.pods.get(e.PodNamespace, e.PodName);
    if (!pod) return 'the pod is not in the informer cache yet';
    return onboardingPending(this.deps.registry, pod.metadata?.uid ?? '');
  }

  /** Istio: removal is driven by the informer (pod deleted or terminated), not by CNI DEL. */
  async cniDel(): Promise<void> {}

  cniCheck(e: PluginAddEvent): Promise<string | undefined> {
    return this.controller.cniCheck(e);
  }

  notReadyReasons(): string[] {
    return [
      ...(this.#prepared ? [] : ['informers not synced / initial snapshot not built yet']),
      ...(this.#hostProblem ? [`host probe rules not applied: ${this.#hostProblem}`] : []),
    ];
  }

  /**
   * Istio's ShouldStopCleanup: keep everything when our DaemonSet still exists, is not being
   * deleted and still targets this node (an upgrade or a reboot); otherwise clean up.
   */
  async shouldCleanUp(): Promise<boolean> {
    if (this.opts.disableSafeUpgrade) return true;
    try {
      const ds = await this.#api.getDaemonSet(this.deps.config.podNamespace, this.opts.daemonSetName);
      if (!ds || ds.metadata?.deletionTimestamp) return true;
      const selector = ds.spec?.template?.spec?.nodeSelector ?? {};
      const node = await this.#core.readNode({ name: this.opts.nodeName }).catch(() => undefined);
      const labels = node?.metadata?.labels;
      if (labels && Object.entries(selector).some(([k, v]) => labels[k] !== v)) return true;
      return false;
    } catch (err) {
      // Unauthorized means our RBAC is gone with the release: clean up. Anything else: keep.
      return httpStatusOf(err) === 401;
    }
  }

  cleanUp(): Promise<void> {
    return this.host.cleanup();
  }

  async stop(): Promise<void> {
    if (this.#sandboxTimer) clearInterval(this.#sandboxTimer);
    for (const timer of this.#sandboxChecks.values()) clearTimeout(timer);
    this.#sandboxChecks.clear();
    this.controller.queue.stop();
    await Promise.all([this.pods.stop(), this.namespaces.stop()]);
  }

  overridesFor(uid: string): PodOverrides {
    const pod = this.pods.list().find((p) => p.metadata?.uid === uid);
    return podOverridesFromAnnotations(pod?.metadata?.annotations ?? {}).overrides;
  }

  /** After stop() and any cleanUp(): releases the host netns handle. */
  close(): void {
    this.#hostNetns?.close();
  }
}

/**
 * Stands in for the host dataplane when the node's netns is provably elsewhere and switching is
 * off: nothing is written into the agent's pod netns (the probe sets there would do nothing but
 * hide the problem). Pods are still enrolled; readiness and the start-up log name the fix.
 */
class RefusedHostProbes implements HostProbes {
  async start(): Promise<void> {}
  async cleanup(): Promise<void> {}
  async podEnrolled(): Promise<void> {}
  async podRemoved(): Promise<void> {}
  async syncEnrolled(): Promise<void> {}
}
