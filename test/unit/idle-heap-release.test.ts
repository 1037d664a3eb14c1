// When the agent gives glibc's free heap back (src/runtime/idle-heap-release.ts): at the first
// idle moment, then at most once per interval, and once more after the last idle moment.
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { RawHeapRelease } from '../../src/addon/binding.js';
import { IdleHeapRelease } from '../../src/runtime/idle-heap-release.js';

const RELEASED: RawHeapRelease = { released: true, freeBytes: 12 << 20, arenaBytes: 20 << 20, seconds: 0.0004 };

describe('IdleHeapRelease', () => {
  let calls: number;
  let result: () => Promise<RawHeapRelease>;
  let logs: Array<{ level: number; msg: string; err?: string; freeBytes?: number }>;
  let heap: IdleHeapRelease;

  beforeEach(() => {
    vi.useFakeTimers();
    calls = 0;
    result = async () => RELEASED;
    logs = [];
    const log = pino({ level: 'debug', base: undefined }, { write: (l: string) => void logs.push(JSON.parse(l) as (typeof logs)[number]) });
    heap = new IdleHeapRelease(
      () => {
        calls++;
        return result();
      },
      log,
      { minIntervalMs: 1_000, settleMs: 500 },
    );
  });

  afterEach(() => {
    heap.close();
    vi.useRealTimers();
  });

  it('releases at the first idle moment, and logs what the arenas held', async () => {
    heap.idle();
    expect(calls).toBe(1);
    await vi.advanceTimersByTimeAsync(0);
    expect(heap.releases).toBe(1);
    expect(logs).toContainEqual(expect.objectContaining({ msg: 'released free heap', freeBytes: 12 << 20 }));
  });

  it('releases at most once per interval while pods keep coming, then once after they stop', async () => {
    for (let i = 0; i < 40; i++) {
      heap.idle();
      await vi.advanceTimersByTimeAsync(100); // an ADD every 100 ms for 4 s
    }
    expect(calls).toBe(4); // at 0, 1000, 2000 and 3000 ms: never twice within the interval
    await vi.advanceTimersByTimeAsync(399); // the last idle moment was at 3900 ms
    expect(calls).toBe(4);
    await vi.advanceTimersByTimeAsync(1);
    expect(calls).toBe(5); // the settling release, 500 ms after the last idle moment
    await vi.advanceTimersByTimeAsync(10_000);
    expect(calls).toBe(5); // and nothing more while nothing happens
  });

  it('never runs two releases at once', async () => {
    let finish: (r: RawHeapRelease) => void = () => {};
    result = () => new Promise((resolve) => (finish = resolve));
    heap.idle();
    await vi.advanceTimersByTimeAsync(1_500); // the settling timer fires while the first still runs
    expect(calls).toBe(1);
    finish(RELEASED);
    await vi.advanceTimersByTimeAsync(0);
    heap.idle();
    expect(calls).toBe(2);
  });

  it('a failed release loses nothing: it is logged, and the next idle moment tries again', async () => {
    result = async () => {
      throw new Error('ENOMEM: out of memory, malloc_trim');
    };
    heap.idle();
    await vi.advanceTimersByTimeAsync(0);
    expect(logs).toContainEqual(
      expect.objectContaining({ level: 40, msg: 'could not release free heap memory', err: 'ENOMEM: out of memory, malloc_trim' }),
    );
    await vi.advanceTimersByTimeAsync(1_500); // the settling one (at 500 ms) failed too
    expect(calls).toBe(2);
    expect(heap.releases).toBe(0);
    result = async () => RELEASED;
    heap.idle();
    expect(calls).toBe(3);
    await vi.advanceTimersByTimeAsync(0);
    expect(heap.releases).toBe(1);
  });

  it('does nothing once closed (the agent stopped)', async () => {
    heap.idle();
    heap.close();
    await vi.advanceTimersByTimeAsync(5_000);
    heap.idle();
    expect(calls).toBe(1);
  });
});
