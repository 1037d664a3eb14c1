import { describe, expect, it } from 'vitest';
import { RetryQueue } from '../../src/kube/retry-queue.js';

describe('RetryQueue', () => {
  it('runs nothing until resumed, then one task per key at a time, newest task winning', async () => {
    const q = new RetryQueue();
    const ran: string[] = [];
    q.enqueue('a', async () => void ran.push('a1'));
    q.enqueue('a', async () => void ran.push('a2')); // replaces a1, which never started
    q.enqueue('b', async () => void ran.push('b1'));
    expect(ran).toEqual([]);
    q.resume();
    await q.idle();
    expect(ran.sort()).toEqual(['a2', 'b1']);
  });

  it('retries a failing task with backoff until it succeeds', async () => {
    const q = new RetryQueue({ initialBackoffMs: 1, maxBackoffMs: 4 });
    q.resume();
    let attempts = 0;
    q.enqueue('k', async () => {
      if (++attempts < 4) throw new Error('not yet');
    });
    await q.idle();
    expect(attempts).toBe(4);
    expect(q.retries).toBe(3);
  });

  it('drops a scheduled retry when a newer event for the key arrives', async () => {
    const q = new RetryQueue({ initialBackoffMs: 50 });
    q.resume();
    const ran: string[] = [];
    q.enqueue('k', async () => {
      ran.push('old');
      throw new Error('fails');
    });
    await new Promise((r) => setTimeout(r, 5));
    q.enqueue('k', async () => void ran.push('new'));
    await q.idle();
    expect(ran).toEqual(['old', 'new']);
  });

  it('serialises a key: a task queued while one runs starts after it', async () => {
    const q = new RetryQueue();
    q.resume();
    const order: string[] = [];
    let release!: () => void;
    q.enqueue('k', () => new Promise<void>((r) => (release = () => (order.push('first'), r()))));
    q.enqueue('k', async () => void order.push('second'));
    await new Promise((r) => setTimeout(r, 5));
    expect(order).toEqual([]);
    release();
    await q.idle();
    expect(order).toEqual(['first', 'second']);
  });
});
