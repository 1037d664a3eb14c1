// The shapes of the pod fields the plugin sends and the agent keeps (names, IDs, IPs, netns
// paths), checked the same way wherever they are parsed: the plugin-event body and the pod state
// files. The plugin (native/cni-plugin/config.cc) applies the same rules before sending.
import { isIP } from 'node:net';

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
/** libcni's rule for container IDs (and the plugin's for pod UIDs): ^[a-zA-Z0-9][a-zA-Z0-9_.-]*$ */
const CNI_IDENTIFIER = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;

export const MAX_CONTAINER_ID_BYTES = 1024;
export const MAX_PATH_BYTES = 4095;

/** Kubernetes' IsDNS1123Subdomain (pod and service account names). */
export const isDnsSubdomain = (v: string): boolean => v.length <= 253 && DNS_SUBDOMAIN.test(v);
/** Kubernetes' IsDNS1123Label (namespaces). */
export const isDnsLabel = (v: string): boolean => v.length <= 63 && DNS_LABEL.test(v);
export const isCniIdentifier = (v: string, maxBytes: number): boolean => v.length <= maxBytes && CNI_IDENTIFIER.test(v);
/** An IP address as Go prints a net.IP: no zone (Node's isIP accepts "fe80::1%eth0"). */
export const isPlainIp = (v: string): boolean => isIP(v) !== 0 && !v.includes('%');

/**
 * A netns path the agent may open: absolute, no NUL, within PATH_MAX, and no ".." segment (the
 * path is joined under --netns-root, which ".." would escape). Returns the problem, if any.
 */
export function netnsPathProblem(v: string): string | undefined {
  if (!v.startsWith('/')) return 'is not an absolute path';
  if (v.includes('\0')) return 'contains NUL';
  if (Buffer.byteLength(v, 'utf8') > MAX_PATH_BYTES) return 'is longer than PATH_MAX';
  if (v.split('/').includes('..')) return 'has a ".." segment';
  return undefined;
}
