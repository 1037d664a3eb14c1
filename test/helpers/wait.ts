// Polling for a condition in tests that watch something asynchronous (an agent, a kernel, an API).

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Polls `predicate` until it holds; the elapsed milliseconds, or a failure naming `what` after `ms`. */
export async function waitUntil(predicate: () => boolean | Promise<boolean>, ms: number, what: string, everyMs = 10): Promise<number> {
  const started = Date.now();
  for (;;) {
    if (await predicate()) return Date.now() - started;
    if (Date.now() - started > ms) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(everyMs);
  }
}
