// The installer as the agent configures it (shared by `run` and `uninstall`, so uninstall
// removes exactly what run added).
import type { AgentConfig } from '../agent/config.js';
import { istioLevelName, PLUGIN_SCOPE } from '../ops/log-levels.js';
import type { Logger } from '../ops/log.js';
import { parseEnablementSelectors } from '../kube/enablement.js';
import { CniInstaller } from './installer.js';
import type { PluginConfigSettings } from './plugin-config.js';

/**
 * The config entry's settings as Istio's installer takes them (cni/pkg/cmd/root.go
 * constructConfig, cni/pkg/install/cniconfig.go createCNIConfigFile): the enablement selectors
 * as parsed from AMBIENT_ENABLEMENT_SELECTOR (unset: Istio's chart default, the selectors this
 * agent then applies, so that Istio's plugin after a rollback decides as the agent did), the
 * `cni-plugin` scope's level by Istio's name, and ENABLE_AMBIENT_DETECTION_RETRY.
 */
export function pluginSettingsFor(config: AgentConfig): PluginConfigSettings {
  return {
    runDir: config.runDir,
    excludeNamespaces: config.excludeNamespaces.length > 0 ? config.excludeNamespaces : null,
    ambientEnabled: true,
    podNamespace: config.podNamespace,
    logLevel: istioLevelName(config.logLevels[PLUGIN_SCOPE]),
    enablementSelectors: parseEnablementSelectors(config.enablementSelector),
    nativeNftables: config.backend === 'nftables',
    enableAmbientDetectionRetry: config.enableAmbientDetectionRetry,
  };
}

export function installerFor(config: AgentConfig, log?: Logger): CniInstaller {
  if (!config.pluginSource) throw new Error('no plugin binary to install: build it (npm run build) or pass --plugin-source');
  return new CniInstaller({
    binDir: config.cniBinDir,
    confDir: config.cniConfDir,
    ...(config.cniConfName ? { confName: config.cniConfName } : {}),
    pluginSource: config.pluginSource,
    settings: pluginSettingsFor(config),
    chained: config.chainedCniPlugin,
    ...(config.istioOwnedCniConfig ? { istioOwnedConfig: config.istioOwnedCniConfigFilename ?? true } : {}),
    ...(log ? { log } : {}),
  });
}
