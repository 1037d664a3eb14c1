// When the agent gives glibc's free heap back (src/runtime/idle-heap-release.ts): only after a
// quiet spell with no pod event or right as a burst ends, and only when RSS has grown enough
// since the last release.
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { RawHeapRelease } from '../../src/addon/binding.js';
import { IdleHeapRelease } from '../../src/runtime/idle-heap-release.js';

const MB = 2 ** 20;
const RELEASED: RawHeapRelease = { released: true, freeBytes: 12 * MB, arenaBytes: 20 * MB, seconds: 0.0004 };

describe('IdleHeapRelease', () => {
  let calls: number;
  let rss: number;
  let result: () => Promise<RawHeapRelease>;
  let logs: Array<{ level: number; msg: string; err?: string; rssBefore?: number; rssAfter?: number }>;
  let heap: IdleHeapRelease;

  beforeEach(() => {
    vi.useFakeTimers();
    calls = 0;
    rss = 80 * MB; // at the start
    result = async () => {
      rss = 82 * MB; // what the release gave back
      return RELEASED;
    };
    logs = [];
    const log = pino({ level: 'debug', base: undefined }, { write: (l: string) => void logs.push(JSON.parse(l) as (typeof logs)[number]) });
    heap = new IdleHeapRelease(
      () => {
        calls++;
        return result();
      },
      log,
      { quietMs: 1_000, growthBytes: 8 * MB, rss: () => rss },
    );
  });

  afterEach(() => {
    heap.close();
    vi.useRealTimers();
  });

  it('releases after a quiet spell once RSS has grown, and logs what it gave back', async () => {
    rss = 100 * MB; // a burst
    heap.idle();
    await vi.advanceTimersByTimeAsync(999);
    expect(calls).toBe(0); // never while pods may still be coming
    await vi.advanceTimersByTimeAsync(1);
    expect(calls).toBe(1);
    expect(heap.releases).toBe(1);
    expect(logs).toContainEqual(expect.objectContaining({ msg: 'released free heap', rssBefore: 100 * MB, rssAfter: 82 * MB }));
  });

  it('never releases while pod events keep coming, however much RSS grew', async () => {
    rss = 120 * MB;
    for (let i = 0; i < 100; i++) {
      heap.idle();
      await vi.advanceTimersByTimeAsync(500); // an event every half second for 50 s
    }
    expect(calls).toBe(0);
    await vi.advanceTimersByTimeAsync(500);
    expect(calls).toBe(1); // the first quiet second
  });

  it('a pod event that arrives within the quiet spell ends it, even while it runs long', async () => {
    rss = 100 * MB;
    heap.idle();
    await vi.advanceTimersByTimeAsync(900);
    heap.busy(); // an ADD that waits 3 s for a restarting ztunnel
    await vi.advanceTimersByTimeAsync(3_000);
    expect(calls).toBe(0);
    heap.idle();
    await vi.advanceTimersByTimeAsync(1_000);
    expect(calls).toBe(1);
  });

  it('leaves steady churn alone: growth below the threshold since the last release', async () => {
    rss = 87.9 * MB; // 7.9 MB over the start
    heap.idle();
    await vi.advanceTimersByTimeAsync(5_000);
    expect(calls).toBe(0);
    rss = 88 * MB;
    heap.idle();
    await vi.advanceTimersByTimeAsync(1_000);
    expect(calls).toBe(1); // 8 MB: released, and 82 MB is the new baseline
    rss = 89 * MB;
    heap.idle();
    await vi.advanceTimersByTimeAsync(1_000);
    expect(calls).toBe(1); // 7 MB over 82
  });

  it('releases right as a burst ends, when RSS grew, and not again after the quiet spell', async () => {
    heap.busy();
    rss = 95 * MB; // the burst and V8's compiles beside it
    heap.idleAfterBurst();
    await vi.advanceTimersByTimeAsync(0);
    expect(calls).toBe(1);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(calls).toBe(1); // 82 MB is the new baseline
  });

  it('a burst that grew RSS less than the threshold leaves it for the quiet spell to check again', async () => {
    rss = 85 * MB;
    heap.idleAfterBurst();
    await vi.advanceTimersByTimeAsync(0);
    expect(calls).toBe(0);
    rss = 90 * MB; // what was freed late (V8's compiles finishing)
    await vi.advanceTimersByTimeAsync(1_000);
    expect(calls).toBe(1);
  });

  it('never runs two releases at once', async () => {
    let finish: (r: RawHeapRelease) => void = () => {};
    result = () => new Promise((resolve) => (finish = resolve));
    rss = 100 * MB;
    heap.idle();
    await vi.advanceTimersByTimeAsync(1_000);
    heap.idle();
    await vi.advanceTimersByTimeAsync(1_000); // the next quiet spell ends while the first still runs
    expect(calls).toBe(1);
    finish(RELEASED); // gave nothing back in this fake: 100 MB is the new baseline
    await vi.advanceTimersByTimeAsync(0);
    rss = 110 * MB;
    heap.idle();
    await vi.advanceTimersByTimeAsync(1_000);
    expect(calls).toBe(2);
  });

  it('a failed release loses nothing: it is logged, and the next quiet spell tries again', async () => {
    result = async () => {
      throw new Error('ENOMEM: out of memory, malloc_trim');
    };
    rss = 100 * MB;
    heap.idle();
    await vi.advanceTimersByTimeAsync(1_000);
    expect(logs).toContainEqual(
      expect.objectContaining({ level: 40, msg: 'could not release free heap memory', err: 'ENOMEM: out of memory, malloc_trim' }),
    );
    result = async () => RELEASED;
    heap.idle();
    await vi.advanceTimersByTimeAsync(1_000);
    expect(calls).toBe(2);
    expect(heap.releases).toBe(1);
  });

  it('does nothing once closed (the agent stopped)', async () => {
    rss = 100 * MB;
    heap.idle();
    heap.close();
    await vi.advanceTimersByTimeAsync(5_000);
    heap.idle();
    await vi.advanceTimersByTimeAsync(5_000);
    expect(calls).toBe(0);
  });
});
