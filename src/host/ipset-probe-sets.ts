// The probe sets of the iptables backend: kernel ip sets `istio-inpod-probes-v4` (family inet)
// and `-v6` (inet6), `hash:ip` with comments, written through the addon's raw nfnetlink ipset
// steps exactly as Istio's agent writes them (cni/pkg/ipset over vishvananda/netlink): created
// without NLM_F_EXCL, elements added with replace (the comment, the pod UID, is overwritten),
// deleted one by one. The iptables SNAT rule matches them with `-m set --match-set`.
import type { NetAddon, NetnsHandle } from '../addon/net-addon.js';
import type { IpsetListResult, IpsetStep } from '../addon/steps.js';
import { silentLogger, type Logger } from '../ops/log.js';
import type { DriftItem } from '../rules/drift.js';
import { parseProbeIp, probeSetName, type ProbeChange, type ProbeEntries, type ProbeFamily, type ProbeSetStore } from './probe-sets.js';

export class IpsetProbeSetStore implements ProbeSetStore {
  constructor(
    private readonly addon: NetAddon,
    private readonly hostNetns: NetnsHandle,
    private readonly log: Logger = silentLogger,
  ) {}

  /**
   * A set of that name with other parameters (created without comments, say) is kept, as Istio
   * keeps it; it is logged, and drift() reports it, because its elements cannot carry UIDs.
   */
  async ensure(families: readonly ProbeFamily[]): Promise<void> {
    const results = await this.#run(families.map((family): IpsetStep => ({ op: 'ipsetCreate', name: probeSetName(family), family })));
    results.forEach((r, i) => {
      if ((r as { skipped?: boolean }).skipped) {
        this.log.error(
          { set: probeSetName(families[i] ?? 4) },
          'an ip set of this name exists with other parameters (not hash:ip with comments); kept as Istio keeps it, but pod UIDs cannot be recorded in it',
        );
      }
    });
  }

  async flush(families: readonly ProbeFamily[]): Promise<void> {
    await this.#run(families.map((family): IpsetStep => ({ op: 'ipsetFlush', name: probeSetName(family) })));
  }

  async list(families: readonly ProbeFamily[]): Promise<ProbeEntries> {
    const entries: ProbeEntries = new Map();
    for (const listing of await this.#listings(families)) {
      for (const entry of listing.entries) {
        try {
          entries.set(parseProbeIp(entry.ip).ip, entry.comment);
        } catch {
          this.log.warn({ ip: entry.ip }, 'probe set listing: skipped an entry that is not an address');
        }
      }
    }
    return entries;
  }

  /** Deletes first, then adds with replace: a replacement is one add (the kernel swaps the comment). */
  async apply(changes: readonly ProbeChange[]): Promise<void> {
    const steps: IpsetStep[] = [
      ...changes.flatMap((c): IpsetStep[] =>
        c.kind === 'delete' ? [{ op: 'ipsetDel', name: probeSetName(c.address.family), ip: c.address.ip }] : [],
      ),
      ...changes.flatMap((c): IpsetStep[] =>
        c.kind === 'delete'
          ? []
          : [{ op: 'ipsetAdd', name: probeSetName(c.address.family), ip: c.address.ip, comment: c.uid, replace: true }],
      ),
    ];
    if (steps.length > 0) await this.#run(steps);
  }

  /** Istio flushes, then destroys; destroying takes the elements with it (a missing set is fine). */
  async destroy(families: readonly ProbeFamily[]): Promise<void> {
    await this.#run(families.map((family): IpsetStep => ({ op: 'ipsetDestroy', name: probeSetName(family) })));
  }

  async drift(families: readonly ProbeFamily[]): Promise<DriftItem[]> {
    const listings = await this.#listings(families);
    const items: DriftItem[] = [];
    listings.forEach((listing, i) => {
      const family = families[i] ?? 4;
      const want = `${probeSetName(family)} hash:ip family ${family === 4 ? 'inet' : 'inet6'} comment`;
      const ok = listing.exists && listing.typeName === 'hash:ip' && listing.family === family && listing.comments;
      if (!ok)
        items.push({
          kind: 'set',
          where: 'ipset',
          text: listing.exists ? `${want} (found ${listing.typeName} family ${listing.family}${listing.comments ? ' comment' : ''})` : want,
        });
    });
    return items;
  }

  async #listings(families: readonly ProbeFamily[]): Promise<IpsetListResult[]> {
    return (await this.#run(families.map((family): IpsetStep => ({ op: 'ipsetList', name: probeSetName(family) })))) as IpsetListResult[];
  }

  async #run(steps: IpsetStep[]): Promise<unknown[]> {
    try {
      return await this.addon.run(this.hostNetns, steps);
    } catch (err) {
      if (err instanceof Error) err.message = `probe ip sets in ${this.hostNetns.path}: ${err.message}`;
      throw err;
    }
  }
}
