// The contract between the istio-cni plugin (native/cni-plugin) and the agent's plugin-event
// server: HTTP/1.1 over the Unix socket <run dir>/pluginevent.sock. Field names are Istio's
// (Go's default JSON of CNIPluginAddEvent / IPConfig), so Istio's plugin and this agent, or this
// plugin and Istio's agent, work together during an upgrade; PodUID and ContainerID are extra
// fields that Istio's agent ignores.

export const PLUGIN_EVENT_SOCKET = 'pluginevent.sock';
export const PLUGIN_LOG_SOCKET = 'log.sock';
/** Written atomically by the agent; read by the plugin only when the agent is unreachable. */
export const ENABLEMENT_SNAPSHOT_FILE = 'ambient-enablement.json';

export const ROUTE_ADD = '/cmdadd';
export const ROUTE_DEL = '/cmddel';
export const ROUTE_CHECK = '/cmdcheck';

/**
 * An ADD is answered within this, naming what is still pending. The plugin gives up on the agent
 * after 5 s (Istio's HTTP timeout) and then reports an unreachable agent ("try again later"),
 * which hides the real cause; ztunnel's ack timeout is 5 s too, and the adds of a burst wait for
 * each other on the one ZDS connection. The work itself carries on: a retried ADD of the pod
 * queues behind it, and a pod ztunnel has not acked stays registered for its next snapshot.
 */
export const ADD_ANSWER_MS = 4_000;

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
