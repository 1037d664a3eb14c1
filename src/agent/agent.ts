// The node agent: wires the rule engine, the ZDS server, the pod registry, the plugin-event
// server, the installer and the health server, and starts them in Istio's order (the CNI config
// is chained only once the agent can serve the plugin).
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { NativeNetAddon, type NetAddon } from '../addon/net-addon.js';
import { PLUGIN_EVENT_SOCKET } from '../cni/protocol.js';
import { silentLogger, type Logger } from '../ops/log.js';
import { IptablesInpodRules } from '../rules/iptables-manager.js';
import type { InpodRuleManager } from '../rules/manager.js';
import { NftablesInpodRules } from '../rules/nftables-manager.js';
import { defaultRuleSettings } from '../rules/settings.js';
import { PodRegistry } from '../zds/registry.js';
import { ZdsServer } from '../zds/server.js';
import type { AgentConfig } from './config.js';
import { HealthServer } from './health-server.js';
import { PluginEventServer } from './plugin-event-server.js';
import { StandaloneSource, type PodSource, type SourceDeps } from './pod-sources.js';

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
  /** Where pods come from; default standalone. Built from the agent's own parts. */
  makeSource?: (deps: SourceDeps) => PodSource;
}

export class Agent {
  readonly addon: NetAddon;
  readonly registry: PodRegistry;
  readonly zds: ZdsServer;
  readonly source: PodSource;
  readonly rules: InpodRuleManager;
  readonly #log: Logger;
  readonly #plugin: PluginEventServer;
  readonly #health: HealthServer;
  readonly #installer: Installer | undefined;
  readonly #stop = new AbortController();

  constructor(
    readonly config: AgentConfig,
    deps: AgentDeps = {},
  ) {
    this.#log = deps.log ?? silentLogger;
    this.addon = deps.addon ?? new NativeNetAddon();
    const settings = defaultRuleSettings({
      ipv6: config.ipv6,
      dnsCapture: config.dnsCapture,
      hostProbeSnatIpv4: config.hostProbeSnatIpv4,
      hostProbeSnatIpv6: config.hostProbeSnatIpv6,
    });
    this.rules = config.backend === 'nftables' ? new NftablesInpodRules(this.addon, settings) : new IptablesInpodRules(this.addon, settings);
    this.zds = new ZdsServer({ socketPath: config.zdsSocket, snapshot: () => this.registry.snapshot(), log: this.#log });
    this.registry = new PodRegistry(this.zds);
    const sourceDeps: SourceDeps = { config, addon: this.addon, rules: this.rules, registry: this.registry, settings, log: this.#log };
    this.source = (deps.makeSource ?? ((d) => new StandaloneSource(d)))(sourceDeps);
    this.#plugin = new PluginEventServer(join(config.runDir, PLUGIN_EVENT_SOCKET), {
      add: (e) => this.source.cniAdd(e),
      del: (e) => this.source.cniDel(e),
      check: (e) => this.source.cniCheck(e),
    }, this.#log);
    this.#health = new HealthServer(config.healthPort, () => this.notReadyReasons());
    this.#installer = deps.installer;
  }

  /** Istio's readiness: plugin installed and chained, ZDS listening (a ztunnel is not required). */
  notReadyReasons(): string[] {
    return [
      ...this.source.notReadyReasons(),
      ...(this.zds.listening ? [] : ['ZDS server not listening']),
      ...(!this.#installer || this.#installer.ready ? [] : ['CNI plugin not installed / config not chained']),
    ];
  }

  async start(): Promise<void> {
    mkdirSync(this.config.runDir, { recursive: true, mode: 0o750 });
    await this.#health.start();
    if (this.rules instanceof NftablesInpodRules) await this.rules.warmUp();
    await this.source.prepare();
    this.zds.start();
    await this.#plugin.start();
    this.source.run();
    if (this.#installer) {
      await this.#installer.install(this.#stop.signal);
      void this.#installer.watch(this.#stop.signal, (ready) => this.#log.info({ ready }, 'CNI install state changed'));
    }
    this.#log.info({ notReady: this.notReadyReasons() }, 'agent started');
  }

  /**
   * Stops serving. In-pod rules always stay (enrolled pods stay redirected). The CNI config entry,
   * the plugin binary and the host rules stay too unless this is a real uninstall (Kubernetes
   * mode: our DaemonSet is gone or no longer targets this node).
   */
  async stop(): Promise<void> {
    this.#stop.abort();
    const cleanUp = await this.source.shouldCleanUp().catch(() => false);
    await this.#plugin.close();
    await this.source.stop();
    if (cleanUp) await this.#cleanUpNode();
    this.source.close?.();
    this.zds.close();
    this.registry.close();
    await this.#health.close();
  }

  async #cleanUpNode(): Promise<void> {
    this.#log.info('the DaemonSet is gone: removing the CNI config entry, the plugin and the host rules');
    await this.#installer?.uninstall?.().catch((err: unknown) => this.#log.error({ err: (err as Error).message }, 'uninstall failed'));
    await this.source.cleanUp().catch((err: unknown) => this.#log.error({ err: (err as Error).message }, 'host cleanup failed'));
  }

  get healthPort(): number | undefined {
    return this.#health.address?.port;
  }
}

export { cniPodOf } from './pod-sources.js';
