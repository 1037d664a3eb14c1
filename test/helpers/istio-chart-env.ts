// The environment Istio's chart gives the istio-cni-node container (manifests/charts/istio-cni at
// 86c9f01f, values.yaml defaults with ambient on): configmap-cni.yaml's data, then daemonset.yaml's
// env with its fieldRefs filled in as a node would. Tests override what their case sets.

/** AMBIENT_ENABLEMENT_SELECTOR as the chart's ConfigMap renders its default selectors. */
export const CHART_ENABLEMENT_SELECTORS =
  '- podSelector:\n    matchLabels:\n      istio.io/dataplane-mode: ambient\n- namespaceSelector:\n    matchLabels:\n      istio.io/dataplane-mode: ambient\n  podSelector:\n    matchExpressions:\n    - key: istio.io/dataplane-mode\n      operator: NotIn\n      values:\n      - none\n';

const CHART_DEFAULT_ENV: Readonly<Record<string, string>> = {
  CURRENT_AGENT_VERSION: 'dev',
  AMBIENT_ENABLED: 'true',
  AMBIENT_ENABLEMENT_SELECTOR: CHART_ENABLEMENT_SELECTORS,
  AMBIENT_DNS_CAPTURE: 'true',
  AMBIENT_IPV6: 'true',
  AMBIENT_RECONCILE_POD_RULES_ON_STARTUP: 'true',
  ENABLE_AMBIENT_DETECTION_RETRY: 'false',
  ISTIO_OWNED_CNI_CONFIG: 'false',
  CHAINED_CNI_PLUGIN: 'true',
  EXCLUDE_NAMESPACES: 'kube-system',
  REPAIR_ENABLED: 'true',
  REPAIR_LABEL_PODS: 'false',
  REPAIR_DELETE_PODS: 'false',
  REPAIR_REPAIR_PODS: 'true',
  REPAIR_INIT_CONTAINER_NAME: 'istio-validation',
  REPAIR_BROKEN_POD_LABEL_KEY: 'cni.istio.io/uninitialized',
  REPAIR_BROKEN_POD_LABEL_VALUE: 'true',
  NATIVE_NFTABLES: 'false',
  REPAIR_NODE_NAME: 'node-1',
  REPAIR_RUN_AS_DAEMON: 'true',
  REPAIR_SIDECAR_ANNOTATION: 'sidecar.istio.io/status',
  ALLOW_SWITCH_TO_HOST_NS: 'true',
  NODE_NAME: 'node-1',
  GOMEMLIMIT: '1073741824',
  POD_NAME: 'istio-cni-node-abcde',
  POD_NAMESPACE: 'istio-system',
};

/** The chart's environment, with `overrides` (values a case sets, or variables only rendered when set). */
export function istioChartEnv(overrides: Record<string, string> = {}): Record<string, string> {
  return { ...CHART_DEFAULT_ENV, ...overrides };
}
