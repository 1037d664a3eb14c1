// Standalone mode: pods come only from the CNI path; the enrolled pods are kept in the run dir.
import type { PluginAddEvent, PluginDelEvent, PluginGcEvent } from '../cni/protocol.js';
import type { PodReconcileHooks } from '../reconcile/pod-targets.js';
import { PodEnroller, type CniPod } from './enroller.js';
import { PodStateStore } from './state-store.js';
import { describeDrift } from '../rules/drift.js';
import { writeEnablementSnapshot } from '../agent/enablement-file.js';
import type { AgentMode, ModeDeps } from '../agent/mode.js';

export class StandaloneMode implements AgentMode {
  readonly mode = 'standalone' as const;
  readonly enroller: PodEnroller;
  #restored = false;
  #verified: Promise<void> = Promise.resolve();

  constructor(private readonly deps: ModeDeps) {
    this.enroller = new PodEnroller({
      addon: deps.addon,
      rules: deps.rules,
      registry: deps.registry,
      store: new PodStateStore(deps.config.runDir),
      netnsRoot: deps.config.netnsRoot,
      netnsDirs: deps.config.netnsDirs,
      procDir: deps.config.procDir,
      excludeNamespaces: deps.config.excludeNamespaces,
      log: deps.log,
    });
  }

  /** Before ZDS serves: the remembered pods are registered for the first snapshot. */
  async prepare(): Promise<void> {
    // A failed write (disk full, read-only run dir) must not stop the agent: the previous file
    // stays (atomic replace), and an agent that does not start serves no pod at all.
    await writeEnablementSnapshot(this.deps.config.runDir, {
      allNamespaces: true,
      namespaces: [],
      excludedNamespaces: this.deps.config.excludeNamespaces,
    }).catch((err: unknown) =>
      this.deps.log.error(
        { err: (err as Error).message },
        'could not write the enablement snapshot file; the plugin keeps the previous one',
      ),
    );
    const summary = this.enroller.reopen();
    this.deps.log.info(summary, 'enrolled pods reopened from the state files');
  }

  /** While ztunnel takes the snapshot: verify (and repair) their rules; ready afterwards. */
  run(): void {
    this.#verified = this.enroller
      .verifyReopened()
      .then(
        () => undefined,
        (err: unknown) => this.deps.log.error({ err: (err as Error).message }, 'verifying the restored pods failed; they stay enrolled'),
      )
      .finally(() => (this.#restored = true));
  }

  /** Resolves once the restored pods' rules have been verified (never rejects). */
  restored(): Promise<void> {
    return this.#verified;
  }

  cniAdd(e: PluginAddEvent): Promise<void> {
    return this.enroller.add(cniPodOf(e));
  }

  pendingAdd(e: PluginAddEvent): string | undefined {
    return this.enroller.pendingAdd(cniPodOf(e).uid);
  }

  async cniDel(e: PluginDelEvent): Promise<void> {
    const uid = e.PodUID || this.enroller.uidOf(e.PodNamespace, e.PodName);
    if (uid) await this.enroller.remove(uid);
  }

  async cniCheck(e: PluginAddEvent): Promise<string | undefined> {
    const uid = e.PodUID || this.enroller.uidOf(e.PodNamespace, e.PodName);
    if (!uid || this.enroller.isExcluded(e.PodNamespace)) return undefined;
    const drift = await this.enroller.check(uid);
    if (!drift) return `pod ${e.PodNamespace}/${e.PodName} is not enrolled`;
    return drift.inSync ? undefined : `in-pod rules drifted: ${describeDrift(drift).join('; ')}`;
  }

  /** CNI GC: enrolments whose container the runtime no longer has are removed (ztunnel gets the del). */
  cniGc(e: PluginGcEvent): Promise<void> {
    return this.enroller.collectGarbage(new Set(e.ValidAttachments.map((a) => a.ContainerID)));
  }

  /** Repairs run in the pod's queue, never alongside its ADD or DEL; no overrides without Kubernetes. */
  reconcileHooks(): PodReconcileHooks {
    return { exclusive: (uid, work) => this.enroller.exclusive(uid, work) };
  }

  notReadyReasons(): string[] {
    return this.#restored ? [] : ['restored pods not verified yet'];
  }

  /** Without Kubernetes there is no DaemonSet to ask: an agent that stops keeps everything. */
  async shouldCleanUp(): Promise<boolean> {
    return false;
  }

  async cleanUp(): Promise<void> {}

  async stop(): Promise<void> {}
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
