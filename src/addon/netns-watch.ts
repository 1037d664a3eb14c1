// Change notifications from one network namespace, on Node's own event loop. The sockets are
// opened inside the namespace by a netlinkWatch job on an addon thread (a netlink socket stays
// bound to the namespace it was created in, so the JS thread never enters it). Routing: readiness
// comes through the addon's fd poller, and each wake-up drains the socket and reports what
// changed. nftables: the namespace's ruleset generation is asked for (NftGenerationPoller) and a
// new number is reported. Subscribing to nf_tables notifications instead would tax every
// nf_tables commit on the node, in every namespace (see native/netlink_watch.h).
import type { RawAddon, RawFdPoller } from './binding.js';
import type { NftGenerationPoller } from './nft-generation-poller.js';

export type WatchKind = 'nftables' | 'routing';

/** What changed since the last report (routes and ip rules: of the watched table only). */
export interface NetnsChanges {
  /** 1 when the nftables generation moved (some transaction committed, in any table). */
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
  /** How often the nftables generation is asked for (default NFT_POLL_MS; 0: never, the socket only holds the namespace). */
  nftPollMs?: number;
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

/**
 * A tampered ruleset is noticed within about two seconds. An ask costs ~10-20 us of CPU per
 * namespace on the 2-vCPU VM; at 1 s, 330 idle pods cost 0.80-0.93% of a core with the 30 s
 * sweep, too close to the 1% budget of test/priv/reconcile-idle.test.ts.
 */
export const NFT_POLL_MS = 2_000;

const NO_CHANGES: NetnsChanges = { nftables: 0, rules: 0, routes: 0, addresses: 0, overrun: false };
const GENERATION_MOVED: NetnsChanges = { ...NO_CHANGES, nftables: 1 };

export function hasChanges(c: NetnsChanges): boolean {
  return c.overrun || c.nftables + c.rules + c.routes + c.addresses > 0;
}

/** The namespace's handle, which a watch socket may hold the namespace for (see NativeNetnsHandle). */
export interface NetnsHolder {
  holdBy(socket: number, stopPolling: () => void): boolean;
  release(): void;
}

/**
 * Wraps the fds a netlinkWatch job returned (one per kind, in `kinds` order): an fd poller for
 * the routing socket, the shared generation poller for the nftables one (none: never asked), all
 * unref'd (a watch keeps no process alive). With the namespace's handle, the first socket also
 * holds the namespace for it, so the handle closes its namespace file: the pod costs the watch's
 * sockets and nothing more.
 */
export class NativeNetnsWatch implements NetnsWatch {
  readonly #pollers: Array<RawFdPoller | undefined> = [];
  #stopAsking: (() => void) | undefined;
  #closed = false;
  /** The handle our first socket holds the namespace for; undefined once it is given back. */
  #holder: NetnsHolder | undefined;
  /** The handle closed: it closed the first socket (nothing reads or asks it any more). */
  #lentGone = false;
  readonly #fds: readonly number[];

  constructor(
    private readonly raw: RawAddon,
    fds: readonly number[],
    private readonly opts: WatchOptions,
    holder?: NetnsHolder,
    private readonly generations?: NftGenerationPoller,
  ) {
    this.#fds = fds;
    try {
      fds.forEach((fd, i) => this.#start(fd, opts.kinds[i]));
    } catch (err) {
      this.close(); // a socket that cannot be asked is no watch: nothing of it stays open
      throw err;
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
    this.#pollers.forEach((poller, i) => (i === 0 && this.#lentGone ? undefined : poller?.close()));
    this.#stopAsking?.();
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
    if (this.#closed) return;
    this.#pollers[0]?.close();
    if (this.opts.kinds[0] === 'nftables') this.#stopAsking?.();
  }

  #start(fd: number, kind: WatchKind | undefined): void {
    if (kind === 'nftables') {
      this.#pollers.push(undefined);
      this.#watchGeneration(fd);
      return;
    }
    const poller = new this.raw.FdPoller(fd, (status) => this.#onReadable(fd, status));
    poller.start(this.raw.pollEvents.readable);
    poller.unref();
    this.#pollers.push(poller);
  }

  /** The generation now is the baseline (it includes whatever the caller just applied). */
  #watchGeneration(fd: number): void {
    this.#stopAsking = this.generations?.add(
      fd,
      () => this.#report(() => GENERATION_MOVED),
      (err) => this.#fail(err),
    );
  }

  #onReadable(fd: number, status: number): void {
    if (this.#lentGone && fd === this.#fds[0]) return;
    this.#report(() => {
      if (status < 0) throw new Error(`netlink watch poll failed (uv status ${status})`);
      return { ...this.raw.netlinkWatchDrain(fd, this.opts.routeTable), nftables: 0 };
    });
  }

  /** Reports what `read` saw; a failed read closes the watch and tells the owner. */
  #report(read: () => NetnsChanges): void {
    if (this.#closed) return;
    try {
      const changes = read();
      if (hasChanges(changes)) this.opts.onChange(changes);
    } catch (err) {
      this.#fail(err as Error);
    }
  }

  #fail(err: Error): void {
    if (this.#closed) return;
    this.close();
    this.opts.onError(err);
  }
}
