// The installer as the agent configures it (shared by `run` and `uninstall`, so uninstall
// removes exactly what run added).
import type { AgentConfig } from '../agent/config.js';
import type { Logger } from '../ops/log.js';
import { CniInstaller } from './installer.js';

export function installerFor(config: AgentConfig, log?: Logger): CniInstaller {
  if (!config.pluginSource) throw new Error('no plugin binary to install: build it (npm run build) or pass --plugin-source');
  return new CniInstaller({
    binDir: config.cniBinDir,
    confDir: config.cniConfDir,
    ...(config.cniConfName ? { confName: config.cniConfName } : {}),
    pluginSource: config.pluginSource,
    settings: {
      runDir: config.runDir,
      excludeNamespaces: config.excludeNamespaces.length > 0 ? config.excludeNamespaces : null,
      ambientEnabled: true,
      podNamespace: config.podNamespace,
      logLevel: 'info',
      enablementSelectors: [],
      nativeNftables: config.backend === 'nftables',
      enableAmbientDetectionRetry: false,
    },
    chained: config.chainedCniPlugin,
    ...(config.istioOwnedCniConfig ? { istioOwnedConfig: config.istioOwnedCniConfigFilename ?? true } : {}),
    ...(log ? { log } : {}),
  });
}
