// The node agent: wires the rule engine, the ZDS server, the pod registry, the plugin-event
// server, the installer and the health server, and starts them in Istio's order (the CNI config
// is chained only once the agent can serve the plugin).
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { NativeNetAddon, type NetAddon } from '../addon/net-addon.js';
import type { SeqpacketListener } from '../addon/seqpacket.js';
import { PLUGIN_EVENT_SOCKET, PLUGIN_LOG_SOCKET, type PluginAddEvent } from '../cni/protocol.js';
import { silentLogger, type Logger } from '../ops/log.js';
import { BusyLoopCpu } from '../ops/busy-loop-cpu.js';
import { AgentMetrics, MetricsServer } from '../ops/metrics.js';
import { describeDrift } from '../rules/drift.js';
import { IptablesInpodRules } from '../rules/iptables-manager.js';
import type { InpodRuleManager } from '../rules/manager.js';
import { NftablesInpodRules } from '../rules/nftables-manager.js';
import { defaultRuleSettings, NO_OVERRIDES } from '../rules/settings.js';
import { TimedRuleManager } from '../rules/timed-manager.js';
import { hostTarget, reconcileRegisteredPods } from '../reconcile/pod-targets.js';
import { Reconciler } from '../reconcile/reconciler.js';
import { StampedRules } from '../reconcile/stamped-rules.js';
import { ROUTE_TABLE_INBOUND } from '../rules/constants.js';
import { PodRegistry } from '../zds/registry.js';
import { ZdsServer } from '../zds/server.js';
import { IdleHeapRelease, type IdleHeapReleaseOptions } from '../runtime/idle-heap-release.js';
import { LoadPhases } from '../runtime/load-phases.js';
import { startPerPodTierUp, type PerPodTierUp } from '../runtime/tier-up.js';
import type { AgentConfig } from './config.js';
import { DebugServer, debugSocketPath } from './debug-server.js';
import { HealthServer } from './health-server.js';
import { PluginEventServer } from './plugin-event-server.js';
import { PluginLogServer } from './plugin-log-server.js';
import type { AgentMode, ModeDeps } from './mode.js';

/** What the agent needs from the CNI installer. */
export interface Installer {
  install(signal?: AbortSignal): Promise<unknown>;
  watch(signal: AbortSignal, onChange?: (ready: boolean) => void): Promise<void> | void;
  uninstall?(): Promise<unknown>;
  readonly ready: boolean;
}

export interface AgentDeps {
  addon?: NetAddon;
  log?: Logger;
  installer?: Installer;
  /** The agent's mode (standalone or Kubernetes), built from the agent's own parts. */
  makeMode: (deps: ModeDeps) => AgentMode;
  metrics?: AgentMetrics;
  /** The ZDS socket, bound by `run` before this module loaded (see bindZdsSocket). */
  zdsListener?: SeqpacketListener;
  /** Tests shorten the ADD answer deadline (default ADD_ANSWER_MS). */
  addAnswerMs?: number;
  /** Tests shorten the quiet spell before a heap release (src/runtime/idle-heap-release.ts). */
  heapRelease?: IdleHeapReleaseOptions;
  /** Tests record the tier-up's V8 flag changes instead (src/runtime/tier-up.ts). */
  setV8Flags?: (flags: string) => void;
}

export class Agent {
  readonly addon: NetAddon;
  readonly registry: PodRegistry;
  readonly zds: ZdsServer;
  readonly mode: AgentMode;
  /** The rule manager as the mode uses it (timed for the metrics). */
  readonly rules: InpodRuleManager;
  readonly metrics: AgentMetrics;
  /** Live reconciliation of every enrolled pod and the host rules (src/reconcile/). */
  readonly reconciler: Reconciler;
  /** The same, untimed: /debug/pods verifications are not pod operations. */
  readonly #backendRules: InpodRuleManager;
  readonly #log: Logger;
  readonly #plugin: PluginEventServer;
  readonly #pluginLog: PluginLogServer;
  readonly #health: HealthServer;
  readonly #debug: DebugServer;
  readonly #metricsServer: MetricsServer;
  readonly #installer: Installer | undefined;
  readonly #stop = new AbortController();
  readonly #heap: IdleHeapRelease;
  /** The pod-event load (idle, lone, burst) the runtime policies follow. */
  readonly #load: LoadPhases;
  /** Set once the start's work is done (--tier-up-calls, src/runtime/tier-up.ts). */
  #tierUp: PerPodTierUp | undefined;
  readonly #setV8Flags: ((flags: string) => void) | undefined;
  /** Settles when the start's own work (the CNI install, the restore of enrolled pods) is done. */
  #startWork: Promise<unknown> | undefined;

  constructor(
    readonly config: AgentConfig,
    deps: AgentDeps,
  ) {
    this.#log = deps.log ?? silentLogger;
    this.addon = deps.addon ?? new NativeNetAddon();
    const settings = defaultRuleSettings({
      ipv6: config.ipv6,
      dnsCapture: config.dnsCapture,
      hostProbeSnatIpv4: config.hostProbeSnatIpv4,
      hostProbeSnatIpv6: config.hostProbeSnatIpv6,
    });
    this.metrics = deps.metrics ?? new AgentMetrics();
    const metrics = this.metrics;
    metrics.netnsThreads(() => this.addon.stats());
    const backend =
      config.backend === 'nftables' ? new NftablesInpodRules(this.addon, settings) : new IptablesInpodRules(this.addon, settings);
    this.#backendRules = backend;
    const stamped = new StampedRules(backend);
    this.rules = new TimedRuleManager(stamped, (operation, seconds, ok) =>
      metrics.ruleOperations.observe({ backend: backend.backend, operation, result: ok ? 'ok' : 'error' }, seconds),
    );
    this.zds = new ZdsServer({
      socketPath: config.zdsSocket,
      snapshot: () => this.registry.snapshot(),
      log: this.#log,
      onAck: (request, seconds, ok) => metrics.zdsAck.observe({ request, result: ok ? 'ok' : 'error' }, seconds),
      ztunnelWaitMs: config.ztunnelWaitMs,
      onWaited: (seconds, enrolled) => {
        const result = enrolled ? 'enrolled' : 'failed';
        metrics.ztunnelWaits.inc({ result });
        metrics.ztunnelWaitSeconds.observe({ result }, seconds);
      },
      ...(deps.zdsListener ? { listener: deps.zdsListener } : {}),
    });
    this.zds.onConnectionCount = (n) => metrics.ztunnelConnected.set(n);
    this.registry = new PodRegistry(this.zds);
    const modeDeps: ModeDeps = { config, addon: this.addon, rules: this.rules, registry: this.registry, settings, log: this.#log, metrics };
    this.mode = deps.makeMode(modeDeps);
    this.reconciler = new Reconciler({
      addon: this.addon,
      routeTable: ROUTE_TABLE_INBOUND,
      intervalMs: config.reconcileEnrollmentIntervalMs,
      nftPollMs: config.reconcileNftPollMs,
      log: this.#log,
      metrics: {
        repairs: (scope, reason) => metrics.reconcileRepairs.inc({ scope, reason }),
        check: (scope, result) => metrics.reconcileChecks.inc({ scope, result }),
      },
    });
    // Subscribed before the mode restores anything, so restored pods are watched too.
    reconcileRegisteredPods(this.reconciler, this.registry, stamped, this.mode.reconcileHooks?.() ?? {});
    this.#plugin = new PluginEventServer(
      join(config.runDir, PLUGIN_EVENT_SOCKET),
      {
        add: (e) => this.#addWithWatchesHeld(e),
        del: (e) => this.mode.cniDel(e),
        check: (e) => this.mode.cniCheck(e),
        pendingAdd: (e) => this.mode.pendingAdd?.(e),
        gc: async (e) => this.mode.cniGc?.(e),
      },
      this.#log,
      deps.addAnswerMs !== undefined ? { addAnswerMs: deps.addAnswerMs } : {},
    );
    // A burst of pods leaves its freed memory in the C library's arenas: handed back as it ends or once quiet.
    this.#heap = new IdleHeapRelease(() => this.addon.releaseFreeHeap(), this.#log, deps.heapRelease);
    const loopCpu = new BusyLoopCpu(
      () => this.addon.threadCpuSeconds(),
      (seconds) => metrics.podEventsLoopCpu.inc(seconds),
    );
    this.#load = new LoadPhases((phase, previous) => {
      loopCpu.phase(phase, previous);
      if (phase !== 'idle') this.#heap.busy();
      else if (previous === 'burst') this.#heap.idleAfterBurst();
      else this.#heap.idle();
      this.#tierUp?.phase(phase);
    });
    this.#plugin.onInFlight = (count) => this.#load.inFlight(count);
    this.#plugin.onRequest = (route, status, seconds) => {
      metrics.pluginRequests.inc({ response_code: String(status) });
      if (route === '/cmdadd') metrics.podOnboarding.observe({ result: status === 200 ? 'ok' : 'error' }, seconds);
    };
    this.#health = new HealthServer(config.healthPort, () => this.notReadyReasons());
    this.#debug = new DebugServer(debugSocketPath(config.runDir), () => this.debugPods());
    this.#metricsServer = new MetricsServer(metrics, config.metricsPort);
    this.#pluginLog = new PluginLogServer(join(config.runDir, PLUGIN_LOG_SOCKET), this.#log, config.logLevels);
    this.#installer = deps.installer;
    this.#setV8Flags = deps.setV8Flags;
  }

  /**
   * /debug/pods (on the debug socket): every pod handed to ztunnel, its netns, whether its rules are as expected right
   * now (verified on request), and what each ztunnel connection said about it.
   */
  async debugPods(): Promise<unknown> {
    const connections = this.zds.connections();
    const pods = await Promise.all(
      this.registry.snapshot().map(async (entry) => {
        const netns = this.registry.netnsOf(entry.uid);
        let rules = 'no netns (sent to ztunnel as keep)';
        if (netns && !netns.closed) {
          rules = await this.#backendRules.verify(netns, this.mode.overridesFor?.(entry.uid) ?? NO_OVERRIDES).then(
            (drift) => (drift.inSync ? 'verified' : `drifted: ${describeDrift(drift).join('; ')}`),
            (err: Error) => `error: ${err.message}`,
          );
        }
        const reconcile = this.reconciler.status(entry.uid);
        return {
          uid: entry.uid,
          namespace: entry.workloadInfo.namespace,
          name: entry.workloadInfo.name,
          serviceAccount: entry.workloadInfo.serviceAccount,
          netnsInode: netns?.ino ?? null,
          rules,
          lastVerified: reconcile?.lastVerified ?? null,
          repairs: reconcile?.repairs ?? 0,
          ztunnel: Object.fromEntries(connections.map((c) => [String(c.id), c.pods[entry.uid] ?? 'not sent'])),
        };
      }),
    );
    return {
      mode: this.mode.mode,
      ready: this.notReadyReasons().length === 0,
      connections: connections.map(({ pods: _pods, ...c }) => c),
      pods,
    };
  }

  /** Istio's readiness: plugin installed and chained, ZDS listening (a ztunnel is not required). */
  notReadyReasons(): string[] {
    return [
      ...this.mode.notReadyReasons(),
      ...(this.zds.listening ? [] : ['ZDS server not listening']),
      ...(!this.#installer || this.#installer.ready ? [] : ['CNI plugin not installed / config not chained']),
    ];
  }

  async start(): Promise<void> {
    mkdirSync(this.config.runDir, { recursive: true, mode: 0o750 });
    this.zds.bind(); // first: a waiting ztunnel connects now and is served right after the restore
    const releaseStartHold = this.reconciler.holdWatches(); // until the start's own work is done (#releaseAfter)
    await this.#health.start();
    await this.#metricsServer.start();
    await this.#pluginLog.start();
    await this.#debug.start();
    if (this.#backendRules instanceof NftablesInpodRules) await this.#backendRules.warmUp();
    await this.mode.prepare();
    const host = this.mode.hostReconcileTarget?.();
    if (host) this.reconciler.add(hostTarget(host));
    this.zds.start();
    await this.#plugin.start();
    this.mode.run();
    this.reconciler.start();
    const installed = this.#installer ? this.#install(this.#installer) : Promise.resolve();
    this.#releaseAfter(installed, releaseStartHold);
    void this.#tierUpOnceStarted().catch((err: unknown) =>
      this.#log.warn({ err: (err as Error).message }, 'could not tier up the per-pod path; V8 keeps its own thresholds'),
    );
    await installed;
    this.#log.info({ notReady: this.notReadyReasons() }, 'agent started');
  }

  /**
   * The live reconciler's watches open once the restored pods are verified and the CNI is
   * installed: after a restart, the snapshot ztunnel waits for, the verification and the install
   * then have the event loop and the netns threads to themselves. The reconciler opens a held
   * watch after WATCH_HOLD_MAX_MS in any case, so an install that waits for the primary CNI's
   * config keeps no pod unwatched.
   */
  #releaseAfter(installed: Promise<void>, release: () => void): void {
    this.#startWork = Promise.allSettled([installed, this.mode.restored?.()]).then(release);
  }

  /** Resolves once the start's own work is done: the CNI install and the restore of enrolled pods (never rejects). */
  async startWorkDone(): Promise<void> {
    await this.#startWork;
  }

  /**
   * Not before the start's work is done: compiling the start's own code (run once) would slow a
   * restart. From then on V8 optimises the per-pod path after a few pods, outside bursts.
   */
  async #tierUpOnceStarted(): Promise<void> {
    await this.startWorkDone();
    if (this.#stop.signal.aborted) return;
    this.#tierUp = startPerPodTierUp(this.config.tierUpCalls, this.#load.phase, this.#log, this.#setV8Flags);
  }

  /** An ADD onboards its pod with the watches held (Reconciler.holdWatches): its own opens after it. */
  #addWithWatchesHeld(e: PluginAddEvent): Promise<void> {
    const release = this.reconciler.holdWatches();
    return this.mode.cniAdd(e).finally(release);
  }

  async #install(installer: Installer): Promise<void> {
    try {
      await installer.install(this.#stop.signal);
      this.metrics.installs.inc({ result: 'SUCCESS' });
    } catch (err) {
      this.metrics.installs.inc({ result: 'CREATE_CNI_CONFIG_FAILURE' });
      throw err;
    }
    this.metrics.installReady.set(installer.ready ? 1 : 0);
    void installer.watch(this.#stop.signal, (ready) => {
      this.metrics.installReady.set(ready ? 1 : 0);
      this.#log.info({ ready }, 'CNI install state changed');
    });
  }

  /**
   * Stops serving. In-pod rules always stay (enrolled pods stay redirected). The CNI config entry,
   * the plugin binary and the host rules stay too unless this is a real uninstall (Kubernetes
   * mode: our DaemonSet is gone or no longer targets this node).
   */
  async stop(): Promise<void> {
    this.#stop.abort();
    this.#heap.close();
    this.reconciler.stop();
    const cleanUp = await this.mode.shouldCleanUp().catch(() => false);
    await this.#plugin.close();
    await this.mode.stop();
    if (cleanUp) await this.#cleanUpNode();
    this.mode.close?.();
    this.zds.close();
    this.registry.close();
    await this.#health.close();
    await this.#metricsServer.close();
    await this.#pluginLog.close();
    await this.#debug.close();
  }

  async #cleanUpNode(): Promise<void> {
    this.#log.info('the DaemonSet is gone: removing the CNI config entry, the plugin and the host rules');
    await this.#installer?.uninstall?.().catch((err: unknown) => this.#log.error({ err: (err as Error).message }, 'uninstall failed'));
    await this.mode.cleanUp().catch((err: unknown) => this.#log.error({ err: (err as Error).message }, 'host cleanup failed'));
  }

  get healthPort(): number | undefined {
    return this.#health.address?.port;
  }

  get metricsPort(): number | undefined {
    return this.#metricsServer.address?.port;
  }
}
