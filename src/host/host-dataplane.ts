// The host side of the agent, in the node's network namespace: the probe SNAT rules and the
// probe address sets they read, kept equal to the IPs of the enrolled pods. Per backend, as
// Istio: nftables writes the golden hostprobe transaction (matched on the kubelet's UID) over nft
// sets; iptables writes the golden ISTIO_POSTRT chain (`-m owner --socket-exists`) over kernel
// ip sets, and needs no kubelet UID.
//
// Order, as Istio's initMeshDataplane: sets created and flushed first, then the host rules;
// after the kube sync the enrolled pods are re-added (syncEnrolled). What Istio's agent (or an
// earlier run of this one) left on the node is adopted: sets are reused, never duplicated; the
// rules are rewritten (nft: the table flush) or kept when exactly right (iptables).
import { setTimeout as sleep } from 'node:timers/promises';
import type { NetAddon, NetnsHandle } from '../addon/net-addon.js';
import { silentLogger, type Logger } from '../ops/log.js';
import { NFT_FAMILY, NFT_TABLE_NAT } from '../rules/constants.js';
import { driftReport, mergeDrift, type DriftReport } from '../rules/drift.js';
import { NftablesHostRules } from '../rules/host-manager.js';
import { IptablesHostRules } from '../rules/iptables-host-manager.js';
import type { Backend } from '../rules/manager.js';
import type { RuleSettings } from '../rules/settings.js';
import { IpsetProbeSetStore } from './ipset-probe-sets.js';
import { findKubeletUid } from './kubelet.js';
import { assertValidPodUid, parseProbeIp, ProbeSets, type ProbeAddress, type ProbeSyncResult } from './probe-sets.js';

export interface HostDataplaneOptions {
  addon: NetAddon;
  /**
   * The node's namespace (src/host/host-netns.ts: `<proc>/1/ns/net` with ALLOW_SWITCH_TO_HOST_NS,
   * else the agent's own). The caller owns it and closes it after the dataplane is done.
   */
  hostNetns: NetnsHandle;
  settings: RuleSettings;
  /** The rule backend (NATIVE_NFTABLES); default nftables. */
  backend?: Backend;
  /** Where to look for the kubelet process (`/host/proc` in the DaemonSet). */
  procDir: string;
  /** The kubelet's UID, skipping the /proc scan. */
  kubeletUid?: number;
  log?: Logger;
  /** /proc scans before giving up (Istio: 10). */
  kubeletLookupAttempts?: number;
  /** Pause between scans (Istio: 2 s). */
  kubeletLookupIntervalMs?: number;
}

export interface EnrolledPod {
  uid: string;
  ips: readonly string[];
}

export interface EnrolledSyncResult extends ProbeSyncResult {
  /** False when some enrolled pod had no IP yet, so elements not expected were left alone. */
  pruneApplied: boolean;
}

const DEFAULT_LOOKUP_ATTEMPTS = 10;
const DEFAULT_LOOKUP_INTERVAL_MS = 2_000;

export class HostDataplane {
  readonly probeSets: ProbeSets;
  readonly #opts: HostDataplaneOptions;
  readonly #rules: NftablesHostRules | IptablesHostRules;
  readonly #log: Logger;
  #kubeletUid: number | undefined;
  #lastSync: EnrolledSyncResult | undefined;

  constructor(opts: HostDataplaneOptions) {
    this.#opts = opts;
    this.#log = opts.log ?? silentLogger;
    const iptables = opts.backend === 'iptables';
    this.#rules = iptables ? new IptablesHostRules(opts.addon, opts.settings) : new NftablesHostRules(opts.addon, opts.settings);
    this.probeSets = new ProbeSets(opts.addon, opts.hostNetns, {
      ipv6: opts.settings.ipv6,
      log: this.#log,
      ...(iptables ? { store: new IpsetProbeSetStore(opts.addon, opts.hostNetns, this.#log) } : {}),
    });
    if (opts.kubeletUid !== undefined && (!Number.isSafeInteger(opts.kubeletUid) || opts.kubeletUid < 0)) {
      throw new RangeError(`kubelet UID must be a non-negative integer, got ${String(opts.kubeletUid)}`);
    }
  }

  /** The UID the nft SNAT rule matches, once start() found it (or the override); unused by iptables. */
  get kubeletUid(): number | undefined {
    return this.#kubeletUid ?? this.#opts.kubeletUid;
  }

  get backend(): Backend {
    return this.#rules instanceof IptablesHostRules ? 'iptables' : 'nftables';
  }

  /** What the last syncEnrolled changed (for logs, diagnostics and tests). */
  get lastSync(): EnrolledSyncResult | undefined {
    return this.#lastSync;
  }

  /**
   * Finds the kubelet UID (nftables only: iptables matches `--socket-exists`), creates the probe
   * sets, flushes them and writes the host rules. Safe to repeat (an agent restart does the same).
   */
  async start(): Promise<void> {
    if (this.#rules instanceof IptablesHostRules) {
      await this.probeSets.ensure();
      await this.probeSets.flush();
      await this.#rules.apply(this.#opts.hostNetns);
    } else {
      const uid = await this.#findKubeletUid();
      await this.probeSets.ensure();
      await this.probeSets.flush();
      await this.#rules.apply(this.#opts.hostNetns, uid);
      this.#kubeletUid = uid;
    }
    this.#log.info(
      { backend: this.backend, kubeletUid: this.#kubeletUid, ipv6: this.#opts.settings.ipv6, netns: this.#opts.hostNetns.path },
      'host probe rules applied, probe sets flushed',
    );
  }

  /** Adds the pod's IPs under its UID (an IP still held by an old pod moves to this one). */
  async podEnrolled(uid: string, ips: readonly string[]): Promise<void> {
    for (const address of this.#addresses(uid, ips)) await this.probeSets.upsert(address.ip, uid);
  }

  /** Removes the pod's IPs, each only if still held under this UID (else warned about and kept). */
  async podRemoved(uid: string, ips: readonly string[]): Promise<void> {
    for (const address of this.#addresses(uid, ips)) await this.probeSets.remove(address.ip, uid);
  }

  /**
   * Startup: puts every enrolled pod's IPs in the (just flushed) sets. Elements of pods no longer
   * enrolled are pruned only when every pod has an IP: a pod without one may still own an
   * element (Istio's rule, istio#60882).
   */
  async syncEnrolled(pods: readonly EnrolledPod[]): Promise<void> {
    const expected = new Map<string, string>();
    const withoutIp: string[] = [];
    for (const pod of pods) {
      if (pod.ips.length === 0) withoutIp.push(pod.uid);
      for (const address of this.#addresses(pod.uid, pod.ips)) {
        const other = expected.get(address.ip);
        if (other !== undefined && other !== pod.uid) {
          this.#log.warn({ ip: address.ip, uid: pod.uid, otherUid: other }, 'two enrolled pods report the same IP; the later one wins');
        }
        expected.set(address.ip, pod.uid);
      }
    }
    const prune = withoutIp.length === 0;
    if (!prune) this.#log.info({ podsWithoutIp: withoutIp }, 'probe set prune skipped: some enrolled pods have no IP yet');
    const result = await this.probeSets.sync(expected, { prune });
    this.#lastSync = { ...result, pruneApplied: prune };
  }

  /**
   * Full uninstall (Istio 5.11: delete the host rules, then flush and destroy the probe sets).
   * nftables: deleting the table does all of it in one transaction (`add` first makes it
   * idempotent). iptables: the rules first, since a referenced ip set cannot be destroyed.
   */
  async cleanup(): Promise<void> {
    if (this.#rules instanceof IptablesHostRules) {
      await this.#rules.remove(this.#opts.hostNetns);
      await this.probeSets.destroy();
    } else {
      const table = `${NFT_FAMILY} ${NFT_TABLE_NAT}`;
      await this.#opts.addon.run(this.#opts.hostNetns, [{ op: 'nft', script: `add table ${table}\ndelete table ${table}\n` }]);
    }
    this.#kubeletUid = undefined;
    this.#log.info({ backend: this.backend }, 'host probe rules and probe sets removed');
  }

  /**
   * Puts the host side back after someone removed it (`nft flush ruleset`, a firewalld reload):
   * the sets, the probe rules, and the enrolled pods' IPs in the sets. nftables matches the
   * kubelet UID start() found; iptables needs none.
   */
  async repair(pods: readonly EnrolledPod[]): Promise<void> {
    await this.probeSets.ensure();
    if (this.#rules instanceof IptablesHostRules) {
      await this.#rules.apply(this.#opts.hostNetns);
    } else {
      const uid = this.kubeletUid;
      if (uid === undefined) throw new Error('host dataplane not started: the kubelet UID is not known yet');
      await this.#rules.apply(this.#opts.hostNetns, uid);
    }
    await this.syncEnrolled(pods);
  }

  /** Drift of the host rules (against Istio's golden rules) plus probe sets that are missing. */
  async verify(): Promise<DriftReport> {
    let rules: DriftReport;
    if (this.#rules instanceof IptablesHostRules) {
      rules = await this.#rules.verify(this.#opts.hostNetns);
    } else {
      const uid = this.kubeletUid;
      if (uid === undefined) throw new Error('host dataplane not started: the kubelet UID is not known yet');
      rules = await this.#rules.verify(this.#opts.hostNetns, uid);
    }
    return mergeDrift(rules, driftReport(await this.probeSets.drift(), []));
  }

  #addresses(uid: string, ips: readonly string[]): ProbeAddress[] {
    assertValidPodUid(uid);
    const addresses = ips.map(parseProbeIp); // all validated before any change
    return addresses.filter((a) => {
      if (a.family === 6 && !this.#opts.settings.ipv6) {
        this.#log.debug({ uid, ip: a.ip }, 'IPv6 pod IP skipped: IPv6 is disabled');
        return false;
      }
      return true;
    });
  }

  async #findKubeletUid(): Promise<number> {
    if (this.#opts.kubeletUid !== undefined) return this.#opts.kubeletUid;
    const attempts = this.#opts.kubeletLookupAttempts ?? DEFAULT_LOOKUP_ATTEMPTS;
    const intervalMs = this.#opts.kubeletLookupIntervalMs ?? DEFAULT_LOOKUP_INTERVAL_MS;
    for (let attempt = 1; attempt <= attempts; attempt++) {
      const uid = findKubeletUid(this.#opts.procDir);
      if (uid !== undefined) return uid;
      if (attempt < attempts) {
        this.#log.warn({ procDir: this.#opts.procDir, attempt, attempts }, 'no kubelet process found yet; retrying');
        await sleep(intervalMs);
      }
    }
    throw new Error(
      `no kubelet process (kubelet, kubelite, k3s) found in ${this.#opts.procDir} (${attempts} attempts, ${intervalMs} ms apart)`,
    );
  }
}
