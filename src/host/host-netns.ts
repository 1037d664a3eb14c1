// Which network namespace is the node's, for the host-side work (probe SNAT rules, probe sets),
// exactly as Istio decides it (cni/pkg/constants HostNetNSPath, cni/pkg/util RunAsHost):
// with ALLOW_SWITCH_TO_HOST_NS=true it is `<proc-dir>/1/ns/net` (Istio's chart sets that when
// the DaemonSet is not on the host network, its default); otherwise the agent's own namespace is
// assumed to be the node's. The agent's own sockets (health, metrics, ZDS, plugin) never move:
// only addon threads enter the host namespace, for the host-side steps.
//
// Istio trusts the assumption blindly; a DaemonSet without hostNetwork and without the switch
// would then put the node's probe rules into the agent's pod namespace, and probes of ambient
// pods fail with nothing in the logs. When `<proc-dir>/1/ns/net` is readable and is provably not
// the agent's own, that is reported as a problem instead (readiness and one loud log line) and
// nothing is written to the wrong namespace.
import { statSync } from 'node:fs';
import { sameNetns, type NetAddon, type NetnsHandle, type NetnsIdentity } from '../addon/net-addon.js';

export const SELF_NETNS_PATH = '/proc/self/ns/net';

/** `<procDir>/1/ns/net`: PID 1 of the host's PID namespace lives in the node's network namespace. */
export function hostNetnsPathIn(procDir: string): string {
  return `${procDir.replace(/\/+$/, '')}/1/ns/net`;
}

export interface HostNetnsOptions {
  /** --proc-dir: the host's /proc as mounted in the agent (/host/proc). */
  procDir: string;
  /** ALLOW_SWITCH_TO_HOST_NS. */
  allowSwitch: boolean;
  /** The agent's own namespace (tests point it elsewhere). */
  selfPath?: string;
}

export interface HostNetns {
  /** Where the host-side steps run; the caller owns it and closes it when done. */
  handle: NetnsHandle;
  /** True when that is `<proc-dir>/1/ns/net` rather than the agent's own namespace. */
  switched: boolean;
  /**
   * Set when the host-side work must not run: the node's namespace is provably not the agent's
   * own and switching is not allowed. The text names the fix.
   */
  problem?: string;
}

function identity(path: string): NetnsIdentity | undefined {
  try {
    const st = statSync(path); // follows the magic link; unreadable without ptrace access to PID 1
    return { ino: st.ino, dev: st.dev };
  } catch {
    return undefined;
  }
}

/**
 * Opens the namespace the host-side steps run in. Throws (with the path and the fix) only when
 * switching is allowed and `<proc-dir>/1/ns/net` cannot be opened: Istio fails then too.
 */
export function openHostNetns(addon: NetAddon, opts: HostNetnsOptions): HostNetns {
  const hostPath = hostNetnsPathIn(opts.procDir);
  const selfPath = opts.selfPath ?? SELF_NETNS_PATH;
  if (opts.allowSwitch) {
    let handle: NetnsHandle;
    try {
      handle = addon.openNetns(hostPath);
    } catch (err) {
      const reason = err instanceof Error ? err.message : String(err);
      throw Object.assign(
        new Error(
          `ALLOW_SWITCH_TO_HOST_NS is true but the host network namespace ${hostPath} cannot be opened (${reason}): ` +
            `mount the host's /proc at ${opts.procDir} (--proc-dir / PROC_DIR) and grant SYS_PTRACE and SYS_ADMIN, or run with hostNetwork: true and ALLOW_SWITCH_TO_HOST_NS unset`,
          { cause: err },
        ),
        { code: (err as { code?: unknown }).code ?? 'ERR_HOST_NETNS' },
      );
    }
    return { handle, switched: true };
  }
  const handle = addon.openNetns(selfPath);
  const host = identity(hostPath);
  if (host && !sameNetns(host, handle)) {
    return {
      handle,
      switched: false,
      problem:
        `the node's network namespace (${hostPath}) is not the agent's own and ALLOW_SWITCH_TO_HOST_NS is not "true", ` +
        `so the kubelet probe SNAT rules and the istio-inpod-probes sets would land in the agent's pod namespace; ` +
        `set ALLOW_SWITCH_TO_HOST_NS=true (Istio's chart does unless ambient.shareHostNetworkNamespace) or run the DaemonSet with hostNetwork: true`,
    };
  }
  return { handle, switched: false };
}
