// The node agent: wires the rule engine, the ZDS server, the pod registry, the plugin-event
// server, the installer and the health server, and starts them in Istio's order (the CNI config
// is chained only once the agent can serve the plugin).
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { NativeNetAddon, type NetAddon } from '../addon/net-addon.js';
import { PLUGIN_EVENT_SOCKET, type PluginAddEvent, type PluginDelEvent } from '../cni/protocol.js';
import { silentLogger, type Logger } from '../ops/log.js';
import { PodEnroller, type CniPod } from '../pods/enroller.js';
import { PodStateStore } from '../pods/state-store.js';
import { describeDrift } from '../rules/drift.js';
import { IptablesInpodRules } from '../rules/iptables-manager.js';
import type { InpodRuleManager } from '../rules/manager.js';
import { NftablesInpodRules } from '../rules/nftables-manager.js';
import { defaultRuleSettings } from '../rules/settings.js';
import { PodRegistry } from '../zds/registry.js';
import { ZdsServer } from '../zds/server.js';
import type { AgentConfig } from './config.js';
import { writeEnablementSnapshot } from './enablement-file.js';
import { HealthServer } from './health-server.js';
import { PluginEventServer } from './plugin-event-server.js';

/** What the agent needs from the CNI installer. */
export interface Installer {
  install(signal?: AbortSignal): Promise<unknown>;
  watch(signal: AbortSignal, onChange?: (ready: boolean) => void): Promise<void> | void;
  readonly ready: boolean;
}

export interface AgentDeps {
  addon?: NetAddon;
  log?: Logger;
  installer?: Installer;
}

export class Agent {
  readonly addon: NetAddon;
  readonly registry: PodRegistry;
  readonly zds: ZdsServer;
  readonly enroller: PodEnroller;
  readonly rules: InpodRuleManager;
  readonly #log: Logger;
  readonly #plugin: PluginEventServer;
  readonly #health: HealthServer;
  readonly #installer: Installer | undefined;
  readonly #stop = new AbortController();
  #restored = false;

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
    this.enroller = new PodEnroller({
      addon: this.addon,
      rules: this.rules,
      registry: this.registry,
      store: new PodStateStore(config.runDir),
      netnsRoot: config.netnsRoot,
      excludeNamespaces: config.excludeNamespaces,
      log: this.#log,
    });
    this.#plugin = new PluginEventServer(join(config.runDir, PLUGIN_EVENT_SOCKET), {
      add: (e) => this.enroller.add(cniPodOf(e)),
      del: (e) => this.#onDel(e),
      check: (e) => this.#onCheck(e),
    }, this.#log);
    this.#health = new HealthServer(config.healthPort, () => this.notReadyReasons());
    this.#installer = deps.installer;
  }

  /** Istio's readiness: plugin installed and chained, ZDS listening (a ztunnel is not required). */
  notReadyReasons(): string[] {
    return [
      ...(this.#restored ? [] : ['enrolled pods not restored yet']),
      ...(this.zds.listening ? [] : ['ZDS server not listening']),
      ...(!this.#installer || this.#installer.ready ? [] : ['CNI plugin not installed / config not chained']),
    ];
  }

  async start(): Promise<void> {
    mkdirSync(this.config.runDir, { recursive: true, mode: 0o750 });
    await this.#health.start();
    await writeEnablementSnapshot(this.config.runDir, { allNamespaces: true, namespaces: [], excludedNamespaces: this.config.excludeNamespaces });
    if (this.rules instanceof NftablesInpodRules) await this.rules.warmUp();
    await this.enroller.restore();
    this.#restored = true;
    this.zds.start();
    await this.#plugin.start();
    if (this.#installer) {
      await this.#installer.install(this.#stop.signal);
      void this.#installer.watch(this.#stop.signal, (ready) => this.#log.info({ ready }, 'CNI install state changed'));
    }
    this.#log.info({ notReady: this.notReadyReasons() }, 'agent started');
  }

  /** Stops serving; in-pod rules and the CNI config stay (an upgrade must not unredirect pods). */
  async stop(): Promise<void> {
    this.#stop.abort();
    await this.#plugin.close();
    this.zds.close();
    this.registry.close();
    await this.#health.close();
  }

  get healthPort(): number | undefined {
    return this.#health.address?.port;
  }

  async #onDel(e: PluginDelEvent): Promise<void> {
    const uid = e.PodUID || this.enroller.uidOf(e.PodNamespace, e.PodName);
    if (uid) await this.enroller.remove(uid);
  }

  async #onCheck(e: PluginAddEvent): Promise<string | undefined> {
    const uid = e.PodUID || this.enroller.uidOf(e.PodNamespace, e.PodName);
    if (!uid || this.enroller.isExcluded(e.PodNamespace)) return undefined;
    const drift = await this.enroller.check(uid);
    if (!drift) return `pod ${e.PodNamespace}/${e.PodName} is not enrolled`;
    return drift.inSync ? undefined : `in-pod rules drifted: ${describeDrift(drift).join('; ')}`;
  }
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
