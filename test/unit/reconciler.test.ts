// The reconciler's state machine with the fake addon and fake timers: events are debounced into
// one check, repairs of one target back off (50 ms doubling to 2 s) with one warning per episode,
// a failed repair is retried without an event, a removed target is never recorded, the sweep
// checks everyone and reopens watches that failed, watches held at start open once released.
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { NetnsHandle } from '../../src/addon/net-addon.js';
import { Reconciler, WATCH_HOLD_MAX_MS, type ReconcileTarget } from '../../src/reconcile/reconciler.js';
import type { RepairOutcome } from '../../src/reconcile/repair.js';
import { FakeNetAddon } from '../fakes/fake-net-addon.js';

const PATH = '/var/run/netns/pod';

describe('Reconciler', () => {
  let addon: FakeNetAddon;
  let netns: NetnsHandle;
  let lines: Array<{ level: number; msg: string }>;
  let reconciler: Reconciler;
  let outcomes: RepairOutcome['status'][];
  let next: () => RepairOutcome;
  let checkTimes: number[];

  const target = (overrides: Partial<ReconcileTarget> = {}): ReconcileTarget => ({
    key: 'uid-1',
    scope: 'pod',
    netns,
    kinds: ['nftables', 'routing'],
    logFields: { pod: 'shop/web', uid: 'uid-1' },
    check: async () => {
      checkTimes.push(Date.now());
      return next();
    },
    onOutcome: (o) => void outcomes.push(o.status),
    ...overrides,
  });

  beforeEach(() => {
    vi.useFakeTimers({ now: 1_000_000 });
    addon = new FakeNetAddon();
    addon.addNetns(PATH);
    netns = addon.openNetns(PATH);
    lines = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        for (const l of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(l) as { level: number; msg: string });
        done();
      },
    });
    reconciler = new Reconciler({ addon, routeTable: 100, intervalMs: 30_000, initialCheckMs: 500, log: pino({ level: 'debug' }, sink) });
    outcomes = [];
    checkTimes = [];
    next = () => ({ status: 'in-sync' });
  });

  afterEach(() => {
    reconciler.stop();
    vi.useRealTimers();
  });

  const drifted = (): RepairOutcome => ({
    status: 'repaired',
    reason: 'nftables',
    drift: ['missing table in inet istio-ambient-nat: table inet istio-ambient-nat'],
  });
  const warnings = (): number => lines.filter((l) => l.level === 40).length;

  it('opens a watch, checks once after it opened, and debounces a burst of events into one check', async () => {
    reconciler.add(target());
    await vi.advanceTimersByTimeAsync(0);
    expect(reconciler.status('uid-1')).toMatchObject({ watched: true, lastVerified: null });
    await vi.advanceTimersByTimeAsync(500);
    expect(checkTimes).toHaveLength(1);
    for (let i = 0; i < 10; i++) addon.notify(PATH);
    await vi.advanceTimersByTimeAsync(100);
    expect(checkTimes).toHaveLength(2);
    expect(reconciler.status('uid-1')?.lastVerified).toBe(new Date(Date.now() - 75).toISOString());
    // Address-only changes are the mode's business (sandbox check), not a rule check.
    const sandbox = vi.fn();
    reconciler.add(target({ key: 'uid-2', onAddressesChanged: sandbox }));
    await vi.advanceTimersByTimeAsync(600);
    const before = checkTimes.length;
    addon.notify(PATH, { addresses: 1 });
    await vi.advanceTimersByTimeAsync(100);
    expect(sandbox).toHaveBeenCalledTimes(1);
    expect(checkTimes.length).toBe(before); // neither target re-checks its rules for an address change
  });

  it('repairs that keep coming back off from 50 ms doubling to 2 s, with one warning per episode', async () => {
    reconciler.add(target());
    await vi.advanceTimersByTimeAsync(600);
    next = drifted;
    const repairTimes: number[] = [];
    for (let i = 0; i < 12; i++) {
      const n = checkTimes.length;
      addon.notify(PATH);
      while (checkTimes.length === n) await vi.advanceTimersByTimeAsync(5);
      repairTimes.push(checkTimes.at(-1)!);
    }
    const gaps = repairTimes.slice(1).map((t, i) => t - repairTimes[i]!);
    expect(gaps.slice(0, 6)).toEqual([50, 100, 200, 400, 800, 1600]);
    expect(gaps.slice(6).every((g) => g === 2_000)).toBe(true);
    expect(reconciler.status('uid-1')?.repairs).toBe(12);
    expect(warnings()).toBe(1);
    expect(lines.filter((l) => l.msg.includes('repaired'))).toHaveLength(12); // one line per repair
    // Quiet for longer than an episode: the next drift is repaired after the debounce only, and warned about again.
    next = () => ({ status: 'in-sync' });
    await vi.advanceTimersByTimeAsync(6_000);
    next = drifted;
    const t0 = Date.now();
    addon.notify(PATH);
    await vi.advanceTimersByTimeAsync(30);
    expect(checkTimes.at(-1)! - t0).toBe(25);
    expect(warnings()).toBe(2);
  });

  it('a failed repair is retried with backoff without any event, and reports recovery', async () => {
    next = () => ({ status: 'failed', reason: 'nftables', drift: ['missing table'], error: new Error('EPERM') });
    reconciler.add(target());
    await vi.advanceTimersByTimeAsync(500);
    expect(outcomes).toEqual(['failed']);
    expect(reconciler.status('uid-1')).toMatchObject({ failing: true });
    await vi.advanceTimersByTimeAsync(50 + 100);
    expect(outcomes).toEqual(['failed', 'failed', 'failed']);
    next = () => ({ status: 'in-sync' });
    await vi.advanceTimersByTimeAsync(200);
    expect(outcomes.at(-1)).toBe('in-sync');
    expect(reconciler.status('uid-1')).toMatchObject({ failing: false });
    await vi.advanceTimersByTimeAsync(5_000);
    expect(outcomes.at(-1)).toBe('in-sync');
    expect(outcomes.filter((o) => o === 'in-sync')).toHaveLength(1); // no more retries once in sync
  });

  it('a target removed while its check runs is not recorded, and its watch is closed', async () => {
    let release: (o: RepairOutcome) => void = () => undefined;
    reconciler.add(target({ check: () => new Promise<RepairOutcome>((r) => (release = r)) }));
    await vi.advanceTimersByTimeAsync(500);
    reconciler.remove('uid-1');
    release(drifted());
    await vi.advanceTimersByTimeAsync(10);
    expect(outcomes).toEqual([]);
    expect(reconciler.status('uid-1')).toBeUndefined();
    expect(addon.watches.get(PATH) ?? []).toHaveLength(0);
  });

  it('the sweep checks every target and reopens a watch that could not be opened', async () => {
    addon.failOn = (step) => (step.op === 'netlinkWatch' ? new Error('EMFILE: too many open files') : undefined);
    reconciler.start();
    reconciler.add(target());
    await vi.advanceTimersByTimeAsync(500);
    expect(reconciler.status('uid-1')).toMatchObject({ watched: false });
    expect(checkTimes).toHaveLength(1); // checked anyway
    expect(warnings()).toBe(1);
    addon.failOn = () => undefined;
    await vi.advanceTimersByTimeAsync(30_000);
    expect(checkTimes.length).toBeGreaterThanOrEqual(2);
    expect(reconciler.status('uid-1')).toMatchObject({ watched: true });
  });

  it('holds the watches of targets added while held (a restart restores every pod at once), then opens them 16 per event-loop turn', async () => {
    const opened = vi.spyOn(addon, 'watchNetns');
    const release = reconciler.holdWatches();
    for (let i = 0; i < 40; i++) reconciler.add(target({ key: `uid-${i}` }));
    reconciler.add(target({ key: 'gone' }));
    reconciler.remove('gone');
    reconciler.sweep(); // the sweep reopens missing watches, but not held ones; it still checks
    await vi.advanceTimersByTimeAsync(600);
    expect(opened).not.toHaveBeenCalled();
    expect(reconciler.status('uid-0')).toMatchObject({ watched: false });
    expect(checkTimes).toHaveLength(40);

    release();
    expect(opened).not.toHaveBeenCalled(); // from the next turn (the last ADD's answer goes out first)
    await vi.advanceTimersToNextTimerAsync(); // the next turn (fake timers run setImmediate too)
    expect(opened).toHaveBeenCalledTimes(16); // the rest wait for the next turns
    await vi.advanceTimersToNextTimerAsync();
    expect(opened).toHaveBeenCalledTimes(32);
    await vi.advanceTimersToNextTimerAsync();
    expect(opened).toHaveBeenCalledTimes(40); // never the removed one
    expect(Array.from({ length: 40 }, (_, i) => reconciler.status(`uid-${i}`)?.watched)).toEqual(Array(40).fill(true));
    await vi.advanceTimersByTimeAsync(500);
    expect(checkTimes).toHaveLength(80); // each checked once after its watch opened
    reconciler.add(target({ key: 'later' })); // released: a new target's watch opens at once
    expect(opened).toHaveBeenCalledTimes(41);
  });

  it('holds overlap (concurrent ADDs): the watches open when the last one is released; a second release does nothing', async () => {
    const opened = vi.spyOn(addon, 'watchNetns');
    const first = reconciler.holdWatches();
    reconciler.add(target({ key: 'uid-a' }));
    const second = reconciler.holdWatches();
    reconciler.add(target({ key: 'uid-b' }));
    first();
    first(); // idempotent: must not release the second hold
    await vi.advanceTimersByTimeAsync(100);
    expect(opened).not.toHaveBeenCalled();
    second();
    await vi.advanceTimersByTimeAsync(1);
    expect(opened).toHaveBeenCalledTimes(2);
    expect(reconciler.status('uid-a')).toMatchObject({ watched: true });
    expect(reconciler.status('uid-b')).toMatchObject({ watched: true });
  });

  it('a hold never released delays a watch by at most WATCH_HOLD_MAX_MS (a node that is never idle is still watched)', async () => {
    const opened = vi.spyOn(addon, 'watchNetns');
    reconciler.holdWatches(); // never released
    reconciler.add(target({ key: 'uid-a' }));
    await vi.advanceTimersByTimeAsync(WATCH_HOLD_MAX_MS / 2);
    reconciler.add(target({ key: 'uid-b' }));
    expect(opened).not.toHaveBeenCalled();
    await vi.advanceTimersByTimeAsync(WATCH_HOLD_MAX_MS / 2 + 1);
    expect(opened).toHaveBeenCalledTimes(2); // the cap counts from the oldest held; both open
    reconciler.add(target({ key: 'uid-c' })); // still held: waits for the next cap at most
    expect(opened).toHaveBeenCalledTimes(2);
    await vi.advanceTimersByTimeAsync(WATCH_HOLD_MAX_MS + 1);
    expect(opened).toHaveBeenCalledTimes(3);
    expect(['uid-a', 'uid-b', 'uid-c'].map((k) => reconciler.status(k)?.watched)).toEqual([true, true, true]);
  });

  it('stop() drops the held watches: nothing opens after it', async () => {
    const opened = vi.spyOn(addon, 'watchNetns');
    const release = reconciler.holdWatches();
    reconciler.add(target({ key: 'uid-a' }));
    reconciler.stop();
    release();
    await vi.advanceTimersByTimeAsync(2 * WATCH_HOLD_MAX_MS);
    expect(opened).not.toHaveBeenCalled();
  });
});
