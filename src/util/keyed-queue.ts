// Runs tasks one at a time per key (a pod's ADD and DEL must not interleave), different keys in
// parallel. Keys with nothing queued are forgotten.
export class KeyedQueue {
  readonly #tails = new Map<string, Promise<unknown>>();

  run<T>(key: string, task: () => Promise<T>): Promise<T> {
    const previous = this.#tails.get(key) ?? Promise.resolve();
    const result = previous.then(task, task);
    const tail = result.catch(() => undefined);
    this.#tails.set(key, tail);
    void tail.then(() => {
      if (this.#tails.get(key) === tail) this.#tails.delete(key);
    });
    return result;
  }

  /** Whether a task for `key` is queued or running. */
  busy(key: string): boolean {
    return this.#tails.has(key);
  }

  get size(): number {
    return this.#tails.size;
  }
}
