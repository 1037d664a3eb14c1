// Waiting for a directory to change: fs.watch (inotify) to wake at once, plus a timer because
// events can be missed and the directory may not exist yet.

import { type FSWatcher, watch as fsWatch } from 'node:fs';

export function abortError(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException('This operation was aborted', 'AbortError');
}

/**
 * Wakes a waiter when the directory changes (fs.watch), or after `intervalMs` anyway (events can
 * be missed, and the directory may not exist yet). arm() before checking, wait() after: a change
 * in between is not lost.
 */
export class DirWaiter {
  #watcher: FSWatcher | null = null;
  #dirty = false;
  #wake: (() => void) | null = null;

  constructor(
    private readonly dir: string,
    private readonly intervalMs: number,
  ) {}

  arm(): void {
    this.#dirty = false;
    if (this.#watcher !== null) return;
    try {
      const w = fsWatch(this.dir, { persistent: false }, () => this.#fire());
      w.on('error', () => {
        w.close();
        if (this.#watcher === w) this.#watcher = null;
        this.#fire();
      });
      this.#watcher = w;
    } catch {
      this.#watcher = null; // not there yet: poll
    }
  }

  #fire(): void {
    this.#dirty = true;
    this.#wake?.();
  }

  wait(signal?: AbortSignal): Promise<void> {
    if (this.#dirty) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const done = (): void => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        this.#wake = null;
      };
      const onAbort = (): void => {
        done();
        reject(abortError(signal as AbortSignal));
      };
      const timer = setTimeout(() => {
        done();
        resolve();
      }, this.intervalMs);
      this.#wake = () => {
        done();
        resolve();
      };
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  close(): void {
    this.#watcher?.close();
    this.#watcher = null;
  }
}
