// The contract between the istio-cni plugin (native/cni-plugin) and the agent's plugin-event
// server: HTTP/1.1 over the Unix socket <run dir>/pluginevent.sock. Field names are Istio's
// (Go's default JSON of CNIPluginAddEvent / IPConfig), so Istio's plugin and this agent, or this
// plugin and Istio's agent, work together during an upgrade; PodUID and ContainerID are extra
// fields that Istio's agent ignores.

export const PLUGIN_EVENT_SOCKET = 'pluginevent.sock';
export const PLUGIN_LOG_SOCKET = 'log.sock';
/** Written atomically by the agent; read by the plugin only when the agent is unreachable. */
export const ENABLEMENT_SNAPSHOT_FILE = 'ambient-enablement.json';

/**
 * How long the plugin waits for the agent's answer (Istio's HTTP client timeout; the plugin's
 * kAgentTimeoutMs in native/cni-plugin/commands.cc). After it the plugin reports an unreachable
 * agent ("try again later"), which hides the real cause.
 */
export const PLUGIN_AGENT_TIMEOUT_MS = 5_000;

/**
 * Every ADD is answered within this, naming what is still pending, so the plugin reports the
 * agent's reason rather than its own timeout. Applied once, by the plugin-event server; the
 * enrolment itself carries on (a retried ADD of the pod queues behind it).
 */
export const ADD_ANSWER_MS = PLUGIN_AGENT_TIMEOUT_MS - 1_000;

export const ROUTE_ADD = '/cmdadd';
export const ROUTE_DEL = '/cmddel';
export const ROUTE_CHECK = '/cmdcheck';

/** net.IPNet as Go marshals it: the mask is the base64 of its bytes ("////AA==" is /24). */
export interface PluginIpConfig {
  Interface: number | null;
  Address: { IP: string; Mask: string };
  Gateway: string;
}

/** POST /cmdadd and /cmdcheck. */
export interface PluginAddEvent {
  Netns: string;
  PodName: string;
  PodNamespace: string;
  IPs: PluginIpConfig[];
  PodUID?: string;
  ContainerID?: string;
}

/** POST /cmddel. */
export interface PluginDelEvent {
  Netns: string;
  PodName: string;
  PodNamespace: string;
  PodUID?: string;
  ContainerID?: string;
}

/**
 * Which namespaces the agent considers ambient, for the plugin's fail-closed / fail-open choice
 * when it cannot reach the agent: a pod is ambient when its namespace is listed, or when
 * `allNamespaces` is set and the namespace is not excluded.
 */
export interface EnablementSnapshot {
  version: 1;
  allNamespaces: boolean;
  namespaces: string[];
  excludedNamespaces: string[];
  generatedAt: string;
}
