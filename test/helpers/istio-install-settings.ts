// The plugin settings Istio's own installer tests use, which produced its install goldens
// (test/fixtures/istio-golden/README.md): shared by the golden and the installer tests.
import type { PluginConfigSettings } from '../../src/cni-install/plugin-config.js';

/** cniconfig_test.go TestCreateCNIConfigFile (the README's "plugin settings used by these unit tests"). */
export const ISTIO_UNIT_SETTINGS: PluginConfigSettings = {
  runDir: '/path/to/kubeconfig',
  excludeNamespaces: null,
  ambientEnabled: false,
  podNamespace: 'my-namespace',
  logLevel: 'debug',
  enablementSelectors: [],
  nativeNftables: false,
  enableAmbientDetectionRetry: false,
};

/** cni/test/install_cni.go doTest: CNIAgentRunDir /tmp, ExcludeNamespaces "istio-system", no pod namespace. */
export const ISTIO_INTEGRATION_SETTINGS: PluginConfigSettings = {
  runDir: '/tmp',
  excludeNamespaces: ['istio-system'],
  ambientEnabled: false,
  podNamespace: '',
  logLevel: 'debug',
  enablementSelectors: [],
  nativeNftables: false,
  enableAmbientDetectionRetry: false,
};
