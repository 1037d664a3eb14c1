// Istio's migration guard (cni/pkg/nodeagent/server_linux.go, detect_artifacts_linux.go): with
// NATIVE_NFTABLES=true, a node where the ip set `istio-inpod-probes-v4` (or `-v6` with IPv6)
// exists still has pods redirected by the iptables backend, so the agent keeps using iptables
// until the node reboots. Without this, the nftables host rules would match an empty nft set
// while the old iptables rule keeps matching the ip set, and the pods' rules would be a mix of
// both backends. A failed detection keeps nftables, as Istio does.
import type { NetAddon } from '../addon/net-addon.js';
import type { IpsetListResult } from '../addon/steps.js';
import type { Logger } from '../ops/log.js';
import { PROBE_SET_V4, PROBE_SET_V6 } from '../rules/constants.js';
import type { Backend } from '../rules/manager.js';
import { openHostNetns } from './host-netns.js';

export interface BackendChoiceOptions {
  backend: Backend;
  ipv6: boolean;
  procDir: string;
  allowSwitchToHostNs: boolean;
  /** The agent's own netns (tests stand another in for it). */
  selfNetnsPath?: string;
}

/** The backend to use: the configured one, or iptables when its ip sets are on the node. */
export async function chooseBackend(addon: NetAddon, opts: BackendChoiceOptions, log: Logger): Promise<Backend> {
  if (opts.backend !== 'nftables') return opts.backend;
  const names = opts.ipv6 ? [PROBE_SET_V4, PROBE_SET_V6] : [PROBE_SET_V4];
  let host;
  try {
    host = openHostNetns(addon, {
      procDir: opts.procDir,
      allowSwitch: opts.allowSwitchToHostNs,
      ...(opts.selfNetnsPath ? { selfPath: opts.selfNetnsPath } : {}),
    });
  } catch (err) {
    log.warn(
      { err: (err as Error).message },
      'iptables artifacts could not be detected; proceeding with the nftables backend as configured',
    );
    return 'nftables';
  }
  try {
    const listed = (await addon.run(
      host.handle,
      names.map((name) => ({ op: 'ipsetList' as const, name })),
    )) as IpsetListResult[];
    const found = names.filter((_, i) => listed[i]?.exists);
    if (found.length > 0) {
      log.warn(
        { ipsets: found },
        'iptables artifacts detected (ip sets exist): overriding NATIVE_NFTABLES and continuing with the iptables backend; reboot the node to complete the migration to nftables',
      );
      return 'iptables';
    }
    log.info('iptables artifacts not found, proceeding with the nftables backend');
  } catch (err) {
    log.warn(
      { err: (err as Error).message },
      'iptables artifacts could not be detected; proceeding with the nftables backend as configured',
    );
  } finally {
    host.handle.close();
  }
  return 'nftables';
}
