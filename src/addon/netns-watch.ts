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

/** The namespace's handle, which a watch socket may hold the namespace for (see NativeNetnsHandle). */
export interface NetnsHolder {
  holdBy(socket: number, stopPolling: () => void): boolean;
  release(): void;
}

/**
 * Wraps the fds a netlinkWatch job returned: one poller each, unref'd (a watch keeps no process
 * alive). With the namespace's handle, the first socket also holds the namespace for it, so the
 * handle closes its namespace file: the pod costs the watch's sockets and nothing more.
 */
export class NativeNetnsWatch implements NetnsWatch {
  readonly #pollers: RawFdPoller[] = [];
  #closed = false;
  /** The handle our first socket holds the namespace for; undefined once it is given back. */
  #holder: NetnsHolder | undefined;
  /** The handle closed: it closed the first socket (its poller is stopped). */
  #lentGone = false;
  readonly #fds: readonly number[];

  constructor(
    private readonly raw: RawAddon,
    fds: readonly number[],
    private readonly opts: WatchOptions,
    holder?: NetnsHolder,
  ) {
    this.#fds = fds;
    for (const fd of fds) {
      const poller = new raw.FdPoller(fd, (status) => this.#onReadable(fd, status));
      poller.start(raw.pollEvents.readable);
      poller.unref();
      this.#pollers.push(poller);
    }
    if (holder && fds.length > 0 && holder.holdBy(fds[0]!, () => this.#lentSocketClosing())) this.#holder = holder;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** The sockets this watch reads (one of them may hold the namespace for its handle). */
  get fds(): readonly number[] {
    return this.#lentGone ? this.#fds.slice(1) : this.#fds;
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#pollers.forEach((poller, i) => (i === 0 && this.#lentGone ? undefined : poller.close()));
    let keepFirst = this.#lentGone;
    if (this.#holder) {
      try {
        this.#holder.release(); // the handle takes a namespace fd again; the socket is ours to close
      } catch {
        keepFirst = true; // the handle keeps holding the namespace by the socket (closed with it)
      }
    }
    this.#holder = undefined;
    this.#fds.forEach((fd, i) => (i === 0 && keepFirst ? undefined : this.raw.closeFd(fd)));
  }

  /** The handle is about to close our first socket: stop reading it first. */
  #lentSocketClosing(): void {
    if (this.#lentGone) return;
    this.#lentGone = true;
    this.#holder = undefined;
    if (!this.#closed) this.#pollers[0]?.close();
  }

  #onReadable(fd: number, status: number): void {
    if (this.#closed || (this.#lentGone && fd === this.#fds[0])) return;
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
