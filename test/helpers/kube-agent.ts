// An agent in Kubernetes mode for tests against the fake API server: the node-facing parts are
// replaced (host probe rules do nothing, the /proc scan is a map from pod UID to netns path).
import type { NetAddon, NetnsHandle } from '../../src/addon/net-addon.js';
import { Agent } from '../../src/agent/agent.js';
import type { AgentConfig } from '../../src/agent/config.js';
import { loadKubeConfig } from '../../src/kube/client.js';
import { KubernetesMode } from '../../src/kube/kube-mode.js';
import type { NetnsFinder } from '../../src/kube/mesh-controller.js';

export const TEST_NODE = 'node-1';

/** Host probe rules that do nothing (the tests that use this look at in-pod state only). */
export const NO_HOST_RULES = {
  start: async () => undefined,
  cleanup: async () => undefined,
  podEnrolled: async () => undefined,
  podRemoved: async () => undefined,
  syncEnrolled: async () => undefined,
};

/** What the /proc scan would find: the netns of each pod UID in `sandboxOf` (read when asked). */
export function mapNetnsFinder(addon: NetAddon, sandboxOf: ReadonlyMap<string, string>): NetnsFinder {
  return {
    find: async (pods: Array<{ uid: string }>) => {
      const found = new Map<string, NetnsHandle>();
      for (const p of pods) {
        const path = sandboxOf.get(p.uid);
        if (path) found.set(p.uid, addon.openNetns(path));
      }
      return found;
    },
  };
}

/** A (not yet started) agent in Kubernetes mode on TEST_NODE, talking to the API at `kubeconfigPath`. */
export function kubeModeTestAgent(
  config: AgentConfig,
  addon: NetAddon,
  kubeconfigPath: string,
  sandboxOf: ReadonlyMap<string, string>,
): Agent {
  const kc = loadKubeConfig({ kubeconfig: kubeconfigPath })!;
  const finder = mapNetnsFinder(addon, sandboxOf);
  return new Agent(config, {
    addon,
    makeMode: (deps) =>
      new KubernetesMode(deps, {
        kc,
        nodeName: TEST_NODE,
        systemNamespace: 'istio-system',
        daemonSetName: 'istio-cni-node',
        disableSafeUpgrade: false,
        host: NO_HOST_RULES,
        finder,
      }),
  });
}
