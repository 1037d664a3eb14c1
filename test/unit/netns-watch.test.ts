// NativeNetnsWatch and NftGenerationPoller over a stand-in of the raw addon: how the nftables
// generation is asked for and reported, and what happens when asking fails (the real kernel side
// is in test/priv/addon.test.ts).
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { RawAddon, RawFdPoller } from '../../src/addon/binding.js';
import { NativeNetnsWatch, NFT_POLL_MS, type NetnsChanges, type WatchOptions } from '../../src/addon/netns-watch.js';
import { NftGenerationPoller } from '../../src/addon/nft-generation-poller.js';

/** The parts of the raw addon a watch uses: generations to hand out (per fd), closed fds, pollers. */
function rawStandIn(generations: Array<number | Error> | Map<number, Array<number | Error>>) {
  const closed: number[] = [];
  const pollers: Array<{ fd: number; closed: boolean }> = [];
  const asked: number[] = [];
  const raw = {
    nftWatchGeneration(fd: number): number {
      asked.push(fd);
      const list = generations instanceof Map ? generations.get(fd)! : generations;
      const next = list.length > 1 ? list.shift()! : list[0]!;
      if (next instanceof Error) throw next;
      return next;
    },
    netlinkWatchDrain: () => ({ rules: 0, routes: 0, addresses: 0, overrun: false }),
    closeFd: (fd: number) => void closed.push(fd),
    pollEvents: { readable: 1, writable: 2, disconnect: 4 },
    FdPoller: class implements Pick<RawFdPoller, 'start' | 'unref' | 'close'> {
      readonly state: { fd: number; closed: boolean };
      constructor(fd: number) {
        this.state = { fd, closed: false };
        pollers.push(this.state);
      }
      start(): void {}
      unref(): void {}
      close(): void {
        this.state.closed = true;
      }
    },
  };
  return { raw: raw as unknown as RawAddon, closed, pollers, asked };
}

function options(overrides: Partial<WatchOptions> = {}): WatchOptions & { changes: NetnsChanges[]; errors: Error[] } {
  const changes: NetnsChanges[] = [];
  const errors: Error[] = [];
  return {
    kinds: ['nftables', 'routing'],
    routeTable: 100,
    onChange: (c) => changes.push(c),
    onError: (e) => errors.push(e),
    changes,
    errors,
    ...overrides,
  };
}

describe('NativeNetnsWatch', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('takes the generation at open as the baseline and reports each move once, at the poll interval', () => {
    const { raw, pollers, asked } = rawStandIn([7, 7, 8, 8, 8, 11]);
    const opts = options();
    const watch = new NativeNetnsWatch(raw, [30, 31], opts, undefined, new NftGenerationPoller(raw, NFT_POLL_MS));
    expect(asked).toEqual([30]); // the baseline, asked at once; the routing socket gets a poller
    expect(pollers).toEqual([{ fd: 31, closed: false }]);
    vi.advanceTimersByTime(NFT_POLL_MS); // 7: unchanged
    expect(opts.changes).toEqual([]);
    vi.advanceTimersByTime(NFT_POLL_MS); // 8
    vi.advanceTimersByTime(2 * NFT_POLL_MS); // 8, 8
    vi.advanceTimersByTime(NFT_POLL_MS); // 11: two commits between polls are one report
    expect(opts.changes).toEqual([
      { nftables: 1, rules: 0, routes: 0, addresses: 0, overrun: false },
      { nftables: 1, rules: 0, routes: 0, addresses: 0, overrun: false },
    ]);
    watch.close();
    vi.advanceTimersByTime(10 * NFT_POLL_MS);
    expect(asked).toHaveLength(6); // closed: never asked again
  });

  it('a failed ask closes the watch (its sockets too) and tells the owner once', () => {
    const failure = Object.assign(new Error('sendto NETLINK_NETFILTER: EBADF'), { code: 'EBADF', syscall: 'sendto' });
    const { raw, closed, pollers } = rawStandIn([3, failure]);
    const opts = options({ nftPollMs: 50 });
    const watch = new NativeNetnsWatch(raw, [40, 41], opts, undefined, new NftGenerationPoller(raw, 50));
    vi.advanceTimersByTime(200);
    expect(watch.closed).toBe(true);
    expect(opts.errors).toEqual([failure]);
    expect(closed).toEqual([40, 41]);
    expect(pollers.every((p) => p.closed)).toBe(true);
  });

  it('a baseline that cannot be asked fails the open and leaves nothing open', () => {
    const { raw, closed } = rawStandIn([Object.assign(new Error('recv NETLINK_NETFILTER: ETIMEDOUT'), { code: 'ETIMEDOUT' })]);
    expect(() => new NativeNetnsWatch(raw, [50, 51], options(), undefined, new NftGenerationPoller(raw, NFT_POLL_MS))).toThrow(/ETIMEDOUT/);
    expect(closed).toEqual([50, 51]);
  });

  it('without a poller (nftPollMs 0): the socket is kept (it may hold the namespace) and never asked', () => {
    const { raw, asked } = rawStandIn([1]);
    const watch = new NativeNetnsWatch(raw, [60], options({ kinds: ['nftables'], nftPollMs: 0 }));
    vi.advanceTimersByTime(10 * NFT_POLL_MS);
    expect(asked).toEqual([]);
    expect(watch.fds).toEqual([60]);
    watch.close();
  });

  it('the poller asks each watch once per period: up to 128 in one wake-up, more in the next tenths of it', () => {
    const fds = Array.from({ length: 300 }, (_, i) => 1000 + i);
    const { raw, asked } = rawStandIn(new Map(fds.map((fd) => [fd, [1]])));
    const poller = new NftGenerationPoller(raw, 1_000);
    const stops = fds.map((fd) =>
      poller.add(
        fd,
        () => undefined,
        () => undefined,
      ),
    );
    asked.length = 0; // the baselines
    const askedBy = (ms: number): number => {
      vi.advanceTimersByTime(ms);
      return asked.length;
    };
    expect(askedBy(999)).toBe(0);
    expect(askedBy(1)).toBe(128);
    expect(askedBy(100)).toBe(256);
    expect(askedBy(100)).toBe(300);
    expect(askedBy(799)).toBe(300); // nothing in the other seven tenths: no wake-up
    expect(askedBy(1)).toBe(428);
    expect(askedBy(200)).toBe(600);
    expect([...asked].sort()).toEqual([...fds, ...fds].sort());
    stops.forEach((stop) => stop());
    expect(poller.size).toBe(0);
    expect(askedBy(5_000)).toBe(600); // no watch left: no timer either
  });

  it('a watch closed by an earlier callback of the same tick is not asked again', () => {
    const { raw, asked } = rawStandIn(
      new Map([
        [1, [5, 6]],
        [2, [5, 6]],
      ]),
    );
    const poller = new NftGenerationPoller(raw, 10); // one slot: both in the same tick
    let stopSecond = (): void => undefined;
    poller.add(
      1,
      () => stopSecond(),
      () => undefined,
    );
    stopSecond = poller.add(
      2,
      () => undefined,
      () => undefined,
    );
    asked.length = 0;
    vi.advanceTimersByTime(10);
    expect(asked).toEqual([1]);
  });
});
