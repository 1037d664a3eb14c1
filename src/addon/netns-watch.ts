// Change notifications from one network namespace, on Node's own event loop. The sockets are
// opened inside the namespace by a netlinkWatch job on an addon thread (a netlink socket stays
// bound to the namespace it was created in, so the JS thread never enters it); readiness comes
// through the addon's fd poller, and each wake-up drains the socket and reports what changed.
import type { RawAddon, RawFdPoller } from './binding.js';

export type WatchKind = 'nftables' | 'routing';

/** What changed since the last report (routes and ip rules: of the watched table only). */
export interface NetnsChanges {
  nftables: number;
  rules: number;
  routes: number;
  addresses: number;
  /** The kernel dropped notifications (receive buffer full): anything may have changed. */
  overrun: boolean;
}

export interface WatchOptions {
  kinds: readonly WatchKind[];
  /** Routes and rules of other tables are ignored (the pod's own routing churns). */
  routeTable: number;
  /**
   * Only nf_tables changes to these tables count (a node's kube-proxy or CNI commits to its own
   * tables all the time); omitted: every nf_tables change (the iptables backend's tables).
   */
  nftTables?: readonly string[];
  onChange(changes: NetnsChanges): void;
  /** The socket failed; the watch is closed and the caller decides whether to reopen it. */
  onError(err: Error): void;
}

/** An open watch. Holds one fd per kind; close() releases them exactly once. */
export interface NetnsWatch {
  readonly fds: readonly number[];
  readonly closed: boolean;
  close(): void;
}

export function hasChanges(c: NetnsChanges): boolean {
  return c.overrun || c.nftables + c.rules + c.routes + c.addresses > 0;
}

/** Wraps the fds a netlinkWatch job returned: one poller each, unref'd (a watch keeps no process alive). */
export class NativeNetnsWatch implements NetnsWatch {
  readonly #pollers: RawFdPoller[] = [];
  #closed = false;

  constructor(
    private readonly raw: RawAddon,
    readonly fds: readonly number[],
    private readonly opts: WatchOptions,
  ) {
    for (const fd of fds) {
      const poller = new raw.FdPoller(fd, (status) => this.#onReadable(fd, status));
      poller.start(raw.pollEvents.readable);
      poller.unref();
      this.#pollers.push(poller);
    }
  }

  get closed(): boolean {
    return this.#closed;
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const poller of this.#pollers) poller.close();
    for (const fd of this.fds) this.raw.closeFd(fd);
  }

  #onReadable(fd: number, status: number): void {
    if (this.#closed) return;
    try {
      if (status < 0) throw new Error(`netlink watch poll failed (uv status ${status})`);
      const changes = this.raw.netlinkWatchDrain(fd, this.opts.routeTable, this.opts.nftTables);
      if (hasChanges(changes)) this.opts.onChange(changes);
    } catch (err) {
      this.close();
      this.opts.onError(err as Error);
    }
  }
}
