// A resilient informer over @kubernetes/client-node's ListWatch (1.4.0).
//
// What ListWatch does by itself (dist/cache.js, dist/watch.js), and what this wrapper adds:
//
//  - Stream ended cleanly by the server (timeoutSeconds, or after a 410 ERROR event): the library
//    re-watches from its last resourceVersion, or re-lists if a 410 cleared it. Nothing to add,
//    except a guard against a server that ends every watch at once (a tight reconnect loop).
//  - 410 Gone (HTTP status or ERROR event): the library re-lists and diffs the list against its own
//    cache, firing add/update/delete. But its `update` callback gets only the new object, and we need
//    the old one (kubernetes#125370: a terminal pod may be published without its IPs), so this
//    wrapper keeps its own cache and derives every event from it (by resourceVersion / presence).
//  - Any other error (ECONNREFUSED, ERR_STREAM_PREMATURE_CLOSE, 5xx, a failed list): the library
//    fires `error` and STOPS for good. The wrapper restarts it after an exponential backoff, on the
//    same ListWatch, so it resumes from its resourceVersion (cheap) or re-lists when that is gone.
//    The cache is kept meanwhile: the agent keeps serving existing pods while the API server is down.
//  - A silent server: the library asks for neither bookmarks nor a timeout, and its own 30 s
//    AbortSignal.timeout is overwritten on the next line of watch.js, so a half-open connection
//    leaves it stale forever. The wrapper asks for bookmarks (keeps the resourceVersion fresh so
//    a reconnect rarely needs a re-list) and a server-side timeoutSeconds, aborts a watch the server
//    does not end by then, bounds every list with a timeout, and re-lists periodically (resyncMs)
//    on a fresh ListWatch, emitting whatever the watch missed.
//  - Shapes: list items are deserialized into model classes (Date timestamps, no kind/apiVersion,
//    undefined-valued fields), watch objects are plain JSON. The cache holds the JSON shape.
//  - stop(): ListWatch.stop() aborts only the request it knows about; a watch whose fetch is still
//    pending when stop() runs is stored afterwards and keeps running. The wrapper tracks every watch
//    with an abort signal of its own and tears them all down.
//  - A throwing event handler: inside the library it would be swallowed by the watch line parser,
//    or fail a list and restart the loop. The wrapper isolates handlers.
import { KubeConfig, ListWatch, Watch, type KubernetesListObject, type KubernetesObject } from '@kubernetes/client-node';
import { silentLogger, type Logger } from '../ops/log.js';

export interface BackoffOptions {
  /** First retry delay (default 500 ms); doubles per failed attempt, ±20 % jitter. */
  initialMs?: number;
  /** Cap (default 30 s). */
  maxMs?: number;
}

export interface ResilientInformerOptions<T extends KubernetesObject> {
  kc: KubeConfig;
  /** Collection path, e.g. '/api/v1/pods' or '/api/v1/namespaces'. */
  path: string;
  /** Lists the collection with the same selectors as the watch (e.g. CoreV1Api.listPodForAllNamespaces). */
  list: () => Promise<KubernetesListObject<T>>;
  fieldSelector?: string;
  labelSelector?: string;
  log?: Logger;
  backoff?: BackoffOptions;
  /** Periodic full re-list on a fresh watch; catches changes a silent or stale server never sent. Default 5 min, 0 disables. */
  resyncMs?: number;
  /** Server-side timeout asked for each watch (default 300 s, +0-50 % jitter, like client-go's 5-10 min). */
  watchTimeoutSeconds?: number;
  /** A list call that has not answered by then counts as failed (default 60 s). */
  listTimeoutMs?: number;
}

export interface InformerEvents<T> {
  add: (obj: T) => void;
  /** `oldObj` is the cached object before the change. */
  update: (oldObj: T, newObj: T) => void;
  /** The last known state (the watch's DELETED object, or the cached one after a re-list). */
  delete: (obj: T) => void;
  /** Every failure of the list/watch loop; the informer retries by itself. */
  error: (err: unknown) => void;
  /** A list succeeded or a watch stream was established after being disconnected (or at first). */
  connected: () => void;
  /** The first failure after being connected. */
  disconnected: (err: unknown) => void;
}

type EventName = keyof InformerEvents<unknown>;

interface Session<T extends KubernetesObject> {
  id: number;
  lw: ListWatch<T>;
  watch: TrackedWatch;
}

const DEFAULT_RESYNC_MS = 5 * 60_000;
const DEFAULT_WATCH_TIMEOUT_S = 300;
const DEFAULT_LIST_TIMEOUT_MS = 60_000;

export class ResilientInformer<T extends KubernetesObject> {
  #opts: ResilientInformerOptions<T>;
  #log: Logger;
  #initialMs: number;
  #maxMs: number;
  #cache = new Map<string, T>();
  #listeners = new Map<EventName, Array<(...args: never[]) => void>>();
  #session: Session<T> | undefined;
  #sessionIds = 0;
  #closing = new Set<Promise<void>>();
  #started = false;
  #stopped = false;
  #connected = false;
  #lastError: unknown;
  #attempt = 0;
  #restartTimer: NodeJS.Timeout | undefined;
  #resyncTimer: NodeJS.Timeout | undefined;
  #synced: Promise<void>;
  #resolveSynced!: () => void;
  #isSynced = false;

  constructor(opts: ResilientInformerOptions<T>) {
    this.#opts = opts;
    this.#log = (opts.log ?? silentLogger).child({
      informer: opts.path,
      fieldSelector: opts.fieldSelector,
      labelSelector: opts.labelSelector,
    });
    this.#initialMs = opts.backoff?.initialMs ?? 500;
    this.#maxMs = Math.max(this.#initialMs, opts.backoff?.maxMs ?? 30_000);
    this.#synced = new Promise((resolve) => (this.#resolveSynced = resolve));
  }

  // ---------------------------------------------------------------------------------------------
  // Public API

  start(): void {
    if (this.#stopped) throw new Error('ResilientInformer cannot be restarted after stop()');
    if (this.#started) return;
    this.#started = true;
    this.#startSession();
    const resyncMs = this.#opts.resyncMs ?? DEFAULT_RESYNC_MS;
    if (resyncMs > 0) {
      this.#resyncTimer = setInterval(() => this.#resync(), resyncMs);
      this.#resyncTimer.unref();
    }
  }

  /** Ends every timer, watch and socket of this informer. Resolves once the watches are closed. */
  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    clearTimeout(this.#restartTimer);
    clearInterval(this.#resyncTimer);
    this.#restartTimer = this.#resyncTimer = undefined;
    const session = this.#session;
    this.#session = undefined;
    this.#sessionIds++; // whatever the old session still reports is ignored from now on
    if (session) this.#retire(session);
    this.#connected = false;
    await Promise.all([...this.#closing]);
  }

  /** Resolves after the first successful list (stays pending if stop() comes first). */
  synced(): Promise<void> {
    return this.#synced;
  }

  get isSynced(): boolean {
    return this.#isSynced;
  }

  get connected(): boolean {
    return this.#connected;
  }

  get lastError(): unknown {
    return this.#lastError;
  }

  list(): T[] {
    return [...this.#cache.values()];
  }

  /** Cluster-scoped objects (namespaces) have namespace '' or undefined. */
  get(namespace: string | undefined, name: string): T | undefined {
    return this.#cache.get(`${namespace ?? ''}/${name}`);
  }

  on<E extends EventName>(event: E, listener: InformerEvents<T>[E]): this {
    const list = this.#listeners.get(event) ?? [];
    list.push(listener as (...args: never[]) => void);
    this.#listeners.set(event, list);
    return this;
  }

  off<E extends EventName>(event: E, listener: InformerEvents<T>[E]): this {
    const list = this.#listeners.get(event);
    const i = list?.indexOf(listener as (...args: never[]) => void) ?? -1;
    if (list && i >= 0) list.splice(i, 1);
    return this;
  }

  // ---------------------------------------------------------------------------------------------
  // Sessions: one ListWatch each. Errors restart the same session; a resync replaces it.

  #startSession(): void {
    const id = ++this.#sessionIds;
    const watch = new TrackedWatch(this.#opts.kc, {
      timeoutSeconds: this.#opts.watchTimeoutSeconds ?? DEFAULT_WATCH_TIMEOUT_S,
      initialMs: this.#initialMs,
      maxMs: this.#maxMs,
      onEstablished: () => id === this.#sessionIds && this.#markConnected(),
      onOverdue: () => this.#log.warn('watch not ended by the server after its timeout: aborting it'),
      log: this.#log,
    });
    const lw = new ListWatch<T>(this.#opts.path, watch, () => this.#list(id), false, this.#opts.labelSelector, this.#opts.fieldSelector);
    // The library's callbacks only feed our cache; events are derived there, with the old object.
    const upsert = (obj: T): void => {
      if (id !== this.#sessionIds) return;
      // After each list the library replays every item; skip those our reconcile already has.
      const cached = this.#cache.get(keyOf(obj));
      if (!cached || !sameVersion(cached, obj)) this.#upsert(normalizeObject(obj));
    };
    lw.on('add', upsert);
    lw.on('update', upsert);
    lw.on('delete', (obj) => id === this.#sessionIds && this.#remove(normalizeObject(obj)));
    lw.on('error', (err) => this.#onError(id, err));
    const session = { id, lw, watch };
    this.#session = session;
    this.#run(session);
  }

  #run(session: Session<T>): void {
    // start() resolves once the watch is up or the library has reported the failure; it only
    // rejects on a bug, which is then handled like any other error.
    session.lw.start().catch((err: unknown) => this.#onError(session.id, err));
  }

  /** Stops a session's ListWatch and every watch it opened; stop() waits for these. */
  #retire(session: Session<T>): void {
    void session.lw.stop();
    const closing = session.watch.close().finally(() => this.#closing.delete(closing));
    this.#closing.add(closing);
  }

  /** Periodic re-list on a fresh ListWatch: the old one is only stopped once the new one exists. */
  #resync(): void {
    if (this.#stopped || !this.#connected || this.#restartTimer || !this.#session) return;
    this.#log.debug('periodic resync');
    const old = this.#session;
    this.#startSession();
    this.#retire(old);
  }

  /** The list function handed to ListWatch: our cache is reconciled before the library's. */
  async #list(id: number): Promise<KubernetesListObject<T>> {
    const list = await withTimeout(this.#opts.list(), this.#opts.listTimeoutMs ?? DEFAULT_LIST_TIMEOUT_MS, `list ${this.#opts.path}`);
    // A superseded session must not touch the cache; throwing makes the library stop it there.
    if (id !== this.#sessionIds) throw new Error('informer session superseded');
    this.#reconcile(list);
    this.#markConnected();
    if (!this.#isSynced) {
      this.#isSynced = true;
      this.#resolveSynced();
    }
    return list;
  }

  /** A full list against the cache: synthesises what changed while we were not watching. */
  #reconcile(list: KubernetesListObject<T>): void {
    const typeMeta = { kind: list.kind?.replace(/List$/, ''), apiVersion: list.apiVersion };
    const seen = new Set<string>();
    for (const item of list.items) {
      const obj = normalizeObject(item, typeMeta);
      seen.add(keyOf(obj));
      this.#upsert(obj);
    }
    for (const [key, obj] of [...this.#cache]) {
      if (seen.has(key)) continue;
      this.#cache.delete(key);
      this.#emit('delete', obj);
    }
  }

  #upsert(obj: T): void {
    const key = keyOf(obj);
    const old = this.#cache.get(key);
    if (old && sameVersion(old, obj)) return; // the library replaying what our list already applied
    this.#cache.set(key, obj);
    if (old) this.#emit('update', old, obj);
    else this.#emit('add', obj);
  }

  #remove(obj: T): void {
    const key = keyOf(obj);
    if (!this.#cache.delete(key)) return;
    this.#emit('delete', obj);
  }

  // ---------------------------------------------------------------------------------------------
  // Connection state and backoff

  #onError(id: number, err: unknown): void {
    // Errors of a retired session are the aborts we caused ourselves.
    if (id !== this.#sessionIds || this.#stopped) return;
    this.#lastError = err;
    this.#log.warn({ err: describeError(err) }, 'list/watch failed; retrying with backoff');
    this.#emit('error', err);
    if (this.#connected) {
      this.#connected = false;
      this.#emit('disconnected', err);
    }
    this.#scheduleRestart();
  }

  #scheduleRestart(): void {
    if (this.#restartTimer || this.#stopped) return;
    const delay = backoffDelay(this.#attempt++, this.#initialMs, this.#maxMs);
    this.#log.debug({ delayMs: Math.round(delay), attempt: this.#attempt }, 'restarting list/watch');
    this.#restartTimer = setTimeout(() => {
      this.#restartTimer = undefined;
      if (this.#session && !this.#stopped) this.#run(this.#session);
    }, delay);
  }

  #markConnected(): void {
    this.#attempt = 0;
    if (this.#connected) return;
    this.#connected = true;
    this.#log.info('connected to the API server');
    this.#emit('connected');
  }

  #emit<E extends EventName>(event: E, ...args: Parameters<InformerEvents<T>[E]>): void {
    for (const listener of [...(this.#listeners.get(event) ?? [])]) {
      try {
        (listener as (...a: unknown[]) => void)(...args);
      } catch (err) {
        // A throwing handler must not break the list/watch loop (inside the library it would
        // either be swallowed by the line parser or fail a list and trigger a restart).
        this.#log.error({ err: describeError(err), event }, 'informer event handler threw');
      }
    }
  }
}

// -----------------------------------------------------------------------------------------------
// The Watch used by each ListWatch: adds bookmarks and a server timeout, tracks every stream.

interface TrackedWatchOptions {
  timeoutSeconds: number;
  initialMs: number;
  maxMs: number;
  onEstablished: () => void;
  onOverdue: () => void;
  log: Logger;
}

interface LiveWatch {
  /** Ours, merged into the request's signal: aborts the fetch before or after the headers. */
  abort: AbortController;
  finished: boolean;
  sawEvent: boolean;
  startedAt: number;
  overdue?: NodeJS.Timeout;
  ended: Promise<void>;
}

type WatchParams = Parameters<Watch['watch']>;

/** How many watches in a row may end cleanly at once, without any event, before we slow down. */
const QUICK_END_LIMIT = 3;
const QUICK_END_MS = 1000;

class TrackedWatch extends Watch {
  #o: TrackedWatchOptions;
  #live = new Set<LiveWatch>();
  #closed = false;
  #registering: LiveWatch | undefined;
  #quickEnds = 0;
  #pause: { timer: NodeJS.Timeout; resolve: () => void } | undefined;

  constructor(kc: KubeConfig, o: TrackedWatchOptions) {
    super(kc);
    this.#o = o;
    // Watch.watch() only hands back its AbortController once the response headers are in, so a
    // watch to a server that never answers cannot be aborted with it. It builds the fetch options
    // with config.applyToFetchOptions() and then sets `signal` on them: a prototype proxy of the
    // KubeConfig intercepts that assignment and merges in our own signal. Everything else about
    // the KubeConfig (auth, TLS, agent) is untouched.
    const proxy = Object.create(kc) as KubeConfig;
    proxy.applyToFetchOptions = async (opts) => {
      const entry = this.#registering; // set synchronously around the super.watch() call
      const init = await kc.applyToFetchOptions(opts);
      if (entry) {
        let signal: AbortSignal | undefined;
        Object.defineProperty(init, 'signal', {
          configurable: true,
          enumerable: true,
          get: () => signal,
          set: (s: AbortSignal | null | undefined) => (signal = s ? AbortSignal.any([s, entry.abort.signal]) : entry.abort.signal),
        });
      }
      return init;
    };
    this.config = proxy;
  }

  override async watch(
    path: WatchParams[0],
    queryParams: WatchParams[1],
    callback: WatchParams[2],
    done: WatchParams[3],
  ): Promise<AbortController> {
    let end!: () => void;
    const ended = new Promise<void>((r) => (end = r));
    const entry: LiveWatch = { abort: new AbortController(), finished: false, sawEvent: false, startedAt: Date.now(), ended };
    this.#live.add(entry);
    const finish = (err: unknown): void => {
      if (entry.finished) return;
      entry.finished = true;
      clearTimeout(entry.overdue);
      this.#live.delete(entry);
      this.#countQuickEnd(entry, err);
      end();
      // ListWatch's doneHandler is async and nobody awaits it when it is called from here.
      Promise.resolve(done(err) as unknown).catch((e: unknown) =>
        this.#o.log.error({ err: describeError(e) }, 'watch done handler failed'),
      );
    };
    await this.#pauseIfLooping();
    if (this.#closed) {
      finish(new Error('watch closed'));
      return entry.abort;
    }
    const timeoutSeconds = Math.max(1, Math.floor(this.#o.timeoutSeconds * (1 + Math.random() * 0.5)));
    const params = { ...queryParams, allowWatchBookmarks: true, timeoutSeconds };
    const onEvent: WatchParams[2] = (phase, obj, raw) => {
      entry.sawEvent = true;
      callback(phase, obj, raw);
    };
    let controller: AbortController;
    try {
      this.#registering = entry;
      const pending = super.watch(path, params, onEvent, finish);
      this.#registering = undefined;
      controller = await pending;
    } catch (err) {
      // Credentials are applied outside the library's try/catch (an unreadable token file, a
      // failing exec plugin): without this, the rejection would escape ListWatch unhandled.
      this.#registering = undefined;
      finish(err);
      return entry.abort;
    }
    if (entry.finished) return controller;
    if (this.#closed) {
      entry.abort.abort();
      return controller;
    }
    // A server honours timeoutSeconds; one that does not end the stream well after it is gone
    // (half-open connection) or broken. Aborting turns that into an error → backoff → re-watch.
    const graceMs = Math.min(30_000, Math.max(1000, timeoutSeconds * 500));
    entry.overdue = setTimeout(
      () => {
        this.#o.onOverdue();
        entry.abort.abort();
      },
      timeoutSeconds * 1000 + graceMs,
    );
    entry.overdue.unref();
    this.#o.onEstablished();
    return controller;
  }

  /** Aborts every stream (pending or established) and resolves when their done callbacks ran. */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#pause) {
      clearTimeout(this.#pause.timer);
      this.#pause.resolve();
    }
    const live = [...this.#live];
    for (const entry of live) entry.abort.abort();
    await Promise.all(live.map((e) => e.ended));
  }

  #countQuickEnd(entry: LiveWatch, err: unknown): void {
    const quick = !err && !entry.sawEvent && Date.now() - entry.startedAt < QUICK_END_MS;
    this.#quickEnds = quick ? this.#quickEnds + 1 : 0;
  }

  /** ListWatch re-watches immediately after a clean end; a server ending every watch at once would spin. */
  async #pauseIfLooping(): Promise<void> {
    if (this.#quickEnds < QUICK_END_LIMIT || this.#closed) return;
    const delay = backoffDelay(this.#quickEnds - QUICK_END_LIMIT, this.#o.initialMs, this.#o.maxMs);
    this.#o.log.warn({ delayMs: Math.round(delay) }, 'watches end as soon as they start; slowing down');
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.#pause = undefined;
        resolve();
      }, delay);
      this.#pause = { timer, resolve };
    });
  }
}

// -----------------------------------------------------------------------------------------------
// Helpers

/**
 * The wire (watch) shape of an object: plain JSON, metav1.Time as RFC 3339 with second precision,
 * kind/apiVersion filled in from the list when the server left them out of the items.
 * Note: list items went through the library's model classes, which drop fields unknown to them;
 * watch objects keep such fields. No pod or namespace field is renamed by the models.
 */
export function normalizeObject<T extends KubernetesObject>(
  obj: T,
  typeMeta?: { kind?: string | undefined; apiVersion?: string | undefined },
): T {
  const plain = JSON.parse(JSON.stringify(obj, kubeTimeReplacer)) as T;
  if (typeMeta?.kind && !plain.kind) plain.kind = typeMeta.kind;
  if (typeMeta?.apiVersion && !plain.apiVersion) plain.apiVersion = typeMeta.apiVersion;
  return plain;
}

function kubeTimeReplacer(this: unknown, key: string, value: unknown): unknown {
  // JSON.stringify has already applied Date.toJSON to `value`; the holder still has the Date.
  const original = (this as Record<string, unknown>)[key];
  if (!(original instanceof Date)) return value;
  const iso = original.toISOString();
  return original.getUTCMilliseconds() === 0 ? iso.replace(/\.000Z$/, 'Z') : iso;
}

function keyOf(obj: KubernetesObject): string {
  return `${obj.metadata?.namespace ?? ''}/${obj.metadata?.name ?? ''}`;
}

function sameVersion(a: KubernetesObject, b: KubernetesObject): boolean {
  const rv = a.metadata?.resourceVersion;
  return rv !== undefined && rv !== null && rv === b.metadata?.resourceVersion;
}

function backoffDelay(attempt: number, initialMs: number, maxMs: number): number {
  const base = initialMs * 2 ** Math.min(attempt, 30);
  return Math.min(maxMs, base * (0.8 + Math.random() * 0.4));
}

function withTimeout<V>(promise: Promise<V>, ms: number, what: string): Promise<V> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms);
    timer.unref();
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function describeError(err: unknown): string {
  if (err instanceof Error) {
    const code = (err as { code?: unknown; statusCode?: unknown }).statusCode ?? (err as { code?: unknown }).code;
    return code !== undefined ? `${err.message} (${String(code)})` : err.message;
  }
  return String(err);
}
