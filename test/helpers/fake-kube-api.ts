// An in-process fake Kubernetes API server for tests. It speaks real HTTP on 127.0.0.1 so that
// @kubernetes/client-node runs unchanged (its fetch, agents, watch line parser and deserializer are
// part of what we test). It models the parts of the API server protocol that an informer depends on:
// a global resourceVersion, list + watch from a resourceVersion with history replay, 410 Gone after
// compaction, selector transitions (an object that stops matching is a DELETED for that watcher),
// bookmarks, server-side watch timeouts, and the pods/status merge-patch rules that Istio's node
// agent uses. Failure modes (server down, cut streams, 5xx, events that never reach a watcher) are
// driven from the test through the control methods.
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface FakeObjectMeta {
  name?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  creationTimestamp?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  [key: string]: unknown;
}

/** Objects as the API server sends them on the wire (plain JSON, timestamps as strings). */
export interface FakeObject {
  apiVersion?: string;
  kind?: string;
  metadata?: FakeObjectMeta;
  spec?: Record<string, unknown>;
  status?: Record<string, unknown>;
  [key: string]: unknown;
}

export type ResourceName = 'pods' | 'namespaces' | 'daemonsets';
type EventType = 'ADDED' | 'MODIFIED' | 'DELETED';

export interface RecordedRequest {
  method: string;
  path: string;
  query: Record<string, string>;
  watch: boolean;
  /** HTTP status sent. A watch that starts is 200 even when it then carries a 410 ERROR event. */
  status: number;
  /** The watch asked for a compacted resourceVersion and got the 410 ERROR event. */
  expired?: boolean;
}

export interface RecordedPatch {
  namespace: string;
  name: string;
  subresource: string | undefined;
  contentType: string;
  body: unknown;
  /** HTTP status answered. */
  status: number;
  /** Whether the patch changed the object (and so bumped its resourceVersion). */
  changed: boolean;
}

export interface FakeKubeApiOptions {
  /** Interval of BOOKMARK events on watches that ask for them (allowWatchBookmarks=true). */
  bookmarkIntervalMs?: number;
  /** History entries kept for watch replay; older ones are compacted away (410 for watches before them). */
  historyLimit?: number;
}

interface ResourceInfo {
  kind: string;
  apiVersion: string;
  namespaced: boolean;
}

const RESOURCES: Record<ResourceName, ResourceInfo> = {
  pods: { kind: 'Pod', apiVersion: 'v1', namespaced: true },
  namespaces: { kind: 'Namespace', apiVersion: 'v1', namespaced: false },
  daemonsets: { kind: 'DaemonSet', apiVersion: 'apps/v1', namespaced: true },
};

interface HistoryEntry {
  rv: number;
  resource: ResourceName;
  type: EventType;
  object: FakeObject;
  /** The state before a MODIFIED: needed to tell a watcher that an object left its selection. */
  previous?: FakeObject;
}

interface Requirement {
  key: string;
  op: '=' | '!=' | 'exists' | '!exists';
  value?: string;
}

interface Selectors {
  labels: Requirement[];
  fields: Requirement[];
}

interface Watcher {
  resource: ResourceName;
  namespace: string | undefined;
  selectors: Selectors;
  res: http.ServerResponse;
  timers: NodeJS.Timeout[];
}

interface Route {
  resource: ResourceName;
  namespace: string | undefined;
  name: string | undefined;
  subresource: string | undefined;
}

interface Failure {
  remaining: number;
  status: number;
  filter: ((req: { method: string; path: string; watch: boolean }) => boolean) | undefined;
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly reason: string,
    message: string,
  ) {
    super(message);
  }
}

export class FakeKubeApi {
  readonly requests: RecordedRequest[] = [];
  readonly patches: RecordedPatch[] = [];
  readonly token = randomBytes(12).toString('hex');
  /** Misbehave: keep watch streams open past their timeoutSeconds (a server/proxy that never ends them). */
  ignoreWatchTimeouts = false;

  #rv = 0;
  /** Watches from a resourceVersion below this cannot be served from history (410 Gone). */
  #compactedRv = 0;
  #history: HistoryEntry[] = [];
  #store = new Map<ResourceName, Map<string, FakeObject>>([
    ['pods', new Map()],
    ['namespaces', new Map()],
    ['daemonsets', new Map()],
  ]);
  #watchers = new Set<Watcher>();
  #failures: Failure[] = [];
  #server: http.Server | undefined;
  #port = 0;
  #dir = mkdtempSync(join(tmpdir(), 'fake-kube-api-'));
  readonly #bookmarkIntervalMs: number;
  readonly #historyLimit: number;

  constructor(options: FakeKubeApiOptions = {}) {
    this.#bookmarkIntervalMs = options.bookmarkIntervalMs ?? 1000;
    this.#historyLimit = options.historyLimit ?? 10_000;
  }

  static async create(options: FakeKubeApiOptions = {}): Promise<FakeKubeApi> {
    const api = new FakeKubeApi(options);
    await api.start();
    return api;
  }

  // ---------------------------------------------------------------------------------------------
  // Lifecycle

  /** Listens on 127.0.0.1: a random port the first time, the same port again after stop(). */
  async start(): Promise<void> {
    if (this.#server) return;
    const server = http.createServer((req, res) => this.#handle(req, res));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.#port, '127.0.0.1', () => resolve());
    });
    this.#port = (server.address() as AddressInfo).port;
    this.#server = server;
    this.#writeKubeconfig();
  }

  /** "API server down": cuts every watch and connection; state is kept for the next start(). */
  async stop(): Promise<void> {
    const server = this.#server;
    if (!server) return;
    this.#server = undefined;
    this.cutWatches();
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeAllConnections();
    await closed;
  }

  /** stop() and remove the kubeconfig directory. */
  async close(): Promise<void> {
    await this.stop();
    rmSync(this.#dir, { recursive: true, force: true });
  }

  get port(): number {
    return this.#port;
  }

  get url(): string {
    return `http://127.0.0.1:${this.#port}`;
  }

  get running(): boolean {
    return this.#server !== undefined;
  }

  /** A kubeconfig for this server; plain HTTP needs insecure-skip-tls-verify with this client library. */
  get kubeconfigPath(): string {
    return join(this.#dir, 'kubeconfig');
  }

  get resourceVersion(): string {
    return String(this.#rv);
  }

  /** Open watch streams, optionally of one resource. */
  activeWatches(resource?: ResourceName): number {
    let n = 0;
    for (const w of this.#watchers) if (!resource || w.resource === resource) n++;
    return n;
  }

  // ---------------------------------------------------------------------------------------------
  // Test control: objects

  upsertPod(pod: FakeObject): FakeObject {
    return this.#upsert('pods', pod);
  }

  deletePod(namespace: string, name: string): boolean {
    return this.#delete('pods', `${namespace}/${name}`);
  }

  setPodPhase(namespace: string, name: string, phase: string): FakeObject {
    const pod = this.#mustGet('pods', `${namespace}/${name}`);
    pod.status = { ...pod.status, phase };
    return this.#upsert('pods', pod);
  }

  pod(namespace: string, name: string): FakeObject | undefined {
    return this.#get('pods', `${namespace}/${name}`);
  }

  pods(): FakeObject[] {
    return [...this.#store.get('pods')!.values()].map(clone);
  }

  upsertNamespace(ns: FakeObject | string): FakeObject {
    return this.#upsert('namespaces', typeof ns === 'string' ? { metadata: { name: ns } } : ns);
  }

  deleteNamespace(name: string): boolean {
    return this.#delete('namespaces', `/${name}`);
  }

  namespace(name: string): FakeObject | undefined {
    return this.#get('namespaces', `/${name}`);
  }

  /**
   * Creates/replaces a DaemonSet in `namespace`, or deletes one when `ds` is undefined
   * (the one called `name`, or every DaemonSet of the namespace when no name is given).
   */
  setDaemonSet(namespace: string, ds: FakeObject | undefined, name?: string): void {
    if (ds) {
      this.#upsert('daemonsets', { ...ds, metadata: { ...ds.metadata, namespace } });
      return;
    }
    for (const key of [...this.#store.get('daemonsets')!.keys()]) {
      if (key === `${namespace}/${name}` || (name === undefined && key.startsWith(`${namespace}/`))) this.#delete('daemonsets', key);
    }
  }

  /**
   * Changes a pod and bumps its resourceVersion, but no watcher ever hears about it and it is not
   * in the watch history: what a client sees when an event is lost (a stale watch cache, a
   * half-open connection). Only a fresh list shows it. `mutate` returning undefined deletes the pod.
   */
  silentlyChangePod(namespace: string, name: string, mutate: (pod: FakeObject) => FakeObject | undefined): void {
    const key = `${namespace}/${name}`;
    const next = mutate(this.#mustGet('pods', key));
    const store = this.#store.get('pods')!;
    if (!next) {
      store.delete(key);
      this.#rv++;
      return;
    }
    next.metadata = { ...next.metadata, resourceVersion: String(++this.#rv) };
    store.set(key, clone(next));
  }

  // ---------------------------------------------------------------------------------------------
  // Test control: failures

  /** Forgets the watch history: a watch from any resourceVersion before now gets 410 Gone. */
  compact(): void {
    this.#history = [];
    this.#compactedRv = this.#rv;
  }

  /** Ends every watch stream abruptly (socket destroyed mid-stream), like a network cut. */
  cutWatches(): void {
    for (const w of [...this.#watchers]) {
      this.#dropWatcher(w);
      w.res.socket?.destroy();
    }
  }

  /** The next `count` requests (that pass `filter`) are answered with `status` (a Status body). */
  failNext(count: number, status = 500, filter?: (req: { method: string; path: string; watch: boolean }) => boolean): void {
    this.#failures.push({ remaining: count, status, filter });
  }

  // ---------------------------------------------------------------------------------------------
  // Store and history

  #get(resource: ResourceName, key: string): FakeObject | undefined {
    const obj = this.#store.get(resource)!.get(key);
    return obj && clone(obj);
  }

  #mustGet(resource: ResourceName, key: string): FakeObject {
    const obj = this.#get(resource, key);
    if (!obj) throw new Error(`fake kube api: no ${resource} ${key}`);
    return obj;
  }

  /** Fills in what the API server would (uid, creationTimestamp, namespace) and writes it. */
  #upsert(resource: ResourceName, input: FakeObject): FakeObject {
    const info = RESOURCES[resource];
    const obj = clone(input);
    const meta: FakeObjectMeta = { ...obj.metadata };
    if (!meta.name) throw new Error(`fake kube api: ${resource} without metadata.name`);
    if (info.namespaced) meta.namespace ??= 'default';
    else delete meta.namespace;
    const key = keyOf(meta);
    const existing = this.#store.get(resource)!.get(key);
    // An update keeps the identity of the stored object unless the test overrides it.
    meta.uid ??= existing?.metadata?.uid ?? randomUUID();
    meta.creationTimestamp ??= existing?.metadata?.creationTimestamp ?? kubeTime(new Date());
    obj.metadata = meta;
    obj.kind = info.kind;
    obj.apiVersion = info.apiVersion;
    return clone(this.#write(resource, key, obj));
  }

  #delete(resource: ResourceName, key: string): boolean {
    const store = this.#store.get(resource)!;
    const existing = store.get(key);
    if (!existing) return false;
    const rv = ++this.#rv;
    store.delete(key);
    // The DELETED event carries the last state with the resourceVersion of the deletion.
    const final = withRv(existing, rv);
    this.#record({ rv, resource, type: 'DELETED', object: final });
    return true;
  }

  /**
   * The one write path. Like the real API server it skips writes that change nothing: no new
   * resourceVersion, no event. That is what makes re-applying an annotation echo-free.
   */
  #write(resource: ResourceName, key: string, next: FakeObject): FakeObject {
    const store = this.#store.get(resource)!;
    const existing = store.get(key);
    if (existing && deepEqual(withRv(existing, 0), withRv(next, 0))) return existing;
    const rv = ++this.#rv;
    const stored = withRv(next, rv);
    store.set(key, stored);
    const type: EventType = existing ? 'MODIFIED' : 'ADDED';
    this.#record({ rv, resource, type, object: stored, ...(existing ? { previous: existing } : {}) });
    return stored;
  }

  #record(entry: HistoryEntry): void {
    this.#history.push(entry);
    if (this.#history.length > this.#historyLimit) {
      const dropped = this.#history.splice(0, this.#history.length - this.#historyLimit);
      this.#compactedRv = dropped[dropped.length - 1]!.rv;
    }
    for (const w of this.#watchers) {
      if (w.resource === entry.resource) this.#send(w, eventFor(w, entry));
    }
  }

  // ---------------------------------------------------------------------------------------------
  // HTTP

  #handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://fake');
    const query = Object.fromEntries(url.searchParams);
    const method = req.method ?? 'GET';
    const watch = query['watch'] === 'true' || query['watch'] === '1';
    const record: RecordedRequest = { method, path: url.pathname, query, watch, status: 200 };
    this.requests.push(record);
    res.on('finish', () => (record.status = res.statusCode));
    readBody(req)
      .then((body) => this.#dispatch(req, res, record, body))
      .catch((err: unknown) => {
        if (err instanceof HttpError) return sendStatus(res, err.status, err.reason, err.message);
        sendStatus(res, 500, 'InternalError', String(err));
      });
  }

  #dispatch(req: http.IncomingMessage, res: http.ServerResponse, record: RecordedRequest, body: string): void {
    if (req.headers.authorization !== `Bearer ${this.token}`) throw new HttpError(401, 'Unauthorized', 'Unauthorized');
    const failure = this.#failures.find((f) => f.remaining > 0 && (!f.filter || f.filter(record)));
    if (failure) {
      failure.remaining--;
      throw new HttpError(failure.status, 'InternalError', 'injected failure');
    }
    const route = parseRoute(record.path);
    if (!route) throw new HttpError(404, 'NotFound', `the server could not find the requested resource (${record.path})`);
    if (record.method === 'GET' && route.name === undefined) {
      if (record.watch) return this.#watch(route, record, res);
      return this.#list(route, record, res);
    }
    if (record.method === 'GET' && route.subresource === undefined) return this.#getOne(route, res);
    if (record.method === 'GET' && route.resource === 'pods' && route.subresource === 'status') return this.#getOne(route, res);
    if (record.method === 'PATCH' && route.resource === 'pods' && route.subresource === 'status') {
      return this.#patchPodStatus(route, req.headers['content-type'] ?? '', body, res);
    }
    throw new HttpError(405, 'MethodNotAllowed', `${record.method} is not supported by the fake on ${record.path}`);
  }

  #getOne(route: Route, res: http.ServerResponse): void {
    const key = `${route.namespace ?? ''}/${route.name}`;
    const obj = this.#store.get(route.resource)!.get(key);
    if (!obj) throw notFound(route);
    sendJson(res, 200, obj);
  }

  #list(route: Route, record: RecordedRequest, res: http.ServerResponse): void {
    const info = RESOURCES[route.resource];
    const selectors = parseSelectors(record.query);
    const items = [...this.#store.get(route.resource)!.values()]
      .filter((o) => inScope(o, route.namespace) && matches(o, selectors))
      .sort((a, b) => keyOf(a.metadata!).localeCompare(keyOf(b.metadata!)))
      // The real server leaves kind/apiVersion out of list items; clients must not rely on them.
      .map(({ kind: _kind, apiVersion: _apiVersion, ...rest }) => rest);
    sendJson(res, 200, { kind: `${info.kind}List`, apiVersion: info.apiVersion, metadata: { resourceVersion: String(this.#rv) }, items });
  }

  #watch(route: Route, record: RecordedRequest, res: http.ServerResponse): void {
    const info = RESOURCES[route.resource];
    const w: Watcher = { resource: route.resource, namespace: route.namespace, selectors: parseSelectors(record.query), res, timers: [] };
    res.writeHead(200, { 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked' });
    res.flushHeaders();
    const since = record.query['resourceVersion'];
    if (since && since !== '0' && Number(since) < this.#compactedRv) {
      // What the real server does for a compacted revision: a 200 stream with one ERROR event, then end.
      record.expired = true;
      res.end(
        JSON.stringify({
          type: 'ERROR',
          object: {
            kind: 'Status',
            apiVersion: 'v1',
            metadata: {},
            status: 'Failure',
            reason: 'Expired',
            code: 410,
            message: `too old resource version: ${since} (${this.#compactedRv})`,
          },
        }) + '\n',
      );
      return;
    }
    this.#watchers.add(w);
    res.on('close', () => this.#dropWatcher(w));
    if (!since || since === '0') {
      // No resourceVersion: the current state first, as synthetic ADDED events.
      const current = [...this.#store.get(route.resource)!.values()].sort((a, b) => rvOf(a) - rvOf(b));
      for (const o of current) if (inScope(o, w.namespace) && matches(o, w.selectors)) this.#send(w, { type: 'ADDED', object: o });
    } else {
      for (const entry of this.#history)
        if (entry.resource === route.resource && entry.rv > Number(since)) this.#send(w, eventFor(w, entry));
    }
    if (record.query['allowWatchBookmarks'] === 'true') {
      const bookmark = (): void =>
        this.#send(w, {
          type: 'BOOKMARK',
          object: { kind: info.kind, apiVersion: info.apiVersion, metadata: { resourceVersion: String(this.#rv) } },
        });
      w.timers.push(setInterval(bookmark, this.#bookmarkIntervalMs));
    }
    const timeout = Number(record.query['timeoutSeconds']);
    if (timeout > 0 && !this.ignoreWatchTimeouts) {
      // A server-side timeout ends the stream cleanly; the client is expected to re-watch.
      w.timers.push(
        setTimeout(() => {
          this.#dropWatcher(w);
          res.end();
        }, timeout * 1000),
      );
    }
  }

  #send(w: Watcher, event: { type: string; object: FakeObject } | undefined): void {
    if (!event || !this.#watchers.has(w)) return;
    w.res.write(JSON.stringify(event) + '\n');
  }

  #dropWatcher(w: Watcher): void {
    this.#watchers.delete(w);
    for (const t of w.timers) clearTimeout(t);
    w.timers = [];
  }

  /**
   * pods/status with a JSON merge patch (RFC 7386). As on the real subresource only status and
   * metadata (here: labels and annotations) are taken; spec changes are silently ignored.
   */
  #patchPodStatus(route: Route, contentType: string, body: string, res: http.ServerResponse): void {
    const namespace = route.namespace!;
    const name = route.name!;
    const mediaType = contentType.split(';')[0]!.trim();
    const patch: RecordedPatch = {
      namespace,
      name,
      subresource: route.subresource,
      contentType,
      body: undefined,
      status: 200,
      changed: false,
    };
    this.patches.push(patch);
    const fail = (err: HttpError): never => {
      patch.status = err.status;
      throw err;
    };
    try {
      patch.body = JSON.parse(body);
    } catch {
      patch.body = body;
      if (mediaType === 'application/merge-patch+json') fail(new HttpError(400, 'BadRequest', 'invalid JSON in patch body'));
    }
    // Istio sends merge patches only (docs/istio-behaviours.md §1.2); anything else is refused here so
    // that a client still sending the library's default (json-patch) fails loudly in tests.
    if (mediaType !== 'application/merge-patch+json')
      fail(
        new HttpError(
          415,
          'UnsupportedMediaType',
          `the body of the request was in an unknown format - accepted media types include: application/merge-patch+json (got ${mediaType || 'none'})`,
        ),
      );
    if (!isPlainObject(patch.body)) fail(new HttpError(400, 'BadRequest', 'a merge patch must be a JSON object'));
    const key = `${namespace}/${name}`;
    const current = this.#store.get('pods')!.get(key);
    if (!current) fail(notFound(route));
    const patchBody = patch.body as Record<string, unknown>;
    const wantRv = (patchBody['metadata'] as FakeObjectMeta | undefined)?.resourceVersion;
    if (wantRv !== undefined && wantRv !== current!.metadata?.resourceVersion) {
      fail(new HttpError(409, 'Conflict', `Operation cannot be fulfilled on pods "${name}": the object has been modified`));
    }
    const merged = mergePatch(current, patchBody) as FakeObject;
    const next = clone(current!);
    next.metadata = { ...next.metadata };
    setOrDrop(next.metadata, 'labels', merged.metadata?.labels);
    setOrDrop(next.metadata, 'annotations', merged.metadata?.annotations);
    setOrDrop(next as Record<string, unknown>, 'status', merged.status);
    const stored = this.#write('pods', key, next);
    patch.changed = stored.metadata?.resourceVersion !== current!.metadata?.resourceVersion;
    sendJson(res, 200, stored);
  }

  #writeKubeconfig(): void {
    const config = {
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'fake', cluster: { server: this.url, 'insecure-skip-tls-verify': true } }],
      users: [{ name: 'fake', user: { token: this.token } }],
      contexts: [{ name: 'fake', context: { cluster: 'fake', user: 'fake', namespace: 'default' } }],
      'current-context': 'fake',
    };
    // JSON is YAML: the client's YAML loader reads it as is.
    writeFileSync(this.kubeconfigPath, JSON.stringify(config, null, 2));
  }
}

// -----------------------------------------------------------------------------------------------
// Watch event selection

/**
 * What one watcher sees of one change. Selectors are evaluated on the old and the new state, as the
 * API server's watch cache does: entering the selection is ADDED, leaving it is DELETED (with the
 * old state, stamped with the new resourceVersion), staying in it is MODIFIED.
 */
function eventFor(w: Watcher, entry: HistoryEntry): { type: EventType; object: FakeObject } | undefined {
  const visible = (o: FakeObject | undefined): boolean => !!o && inScope(o, w.namespace) && matches(o, w.selectors);
  const now = visible(entry.object);
  if (entry.type !== 'MODIFIED') return now ? { type: entry.type, object: entry.object } : undefined;
  const before = visible(entry.previous);
  if (now && before) return { type: 'MODIFIED', object: entry.object };
  if (now) return { type: 'ADDED', object: entry.object };
  if (before) return { type: 'DELETED', object: withRv(entry.previous!, entry.rv) };
  return undefined;
}

function inScope(o: FakeObject, namespace: string | undefined): boolean {
  return namespace === undefined || o.metadata?.namespace === namespace;
}

// -----------------------------------------------------------------------------------------------
// Selectors: equality-based only (a=b, a==b, a!=b, a, !a; comma means AND); enough for the agent.

function parseSelectors(query: Record<string, string>): Selectors {
  return { labels: parseRequirements(query['labelSelector'] ?? '', true), fields: parseRequirements(query['fieldSelector'] ?? '', false) };
}

function parseRequirements(selector: string, allowExists: boolean): Requirement[] {
  const out: Requirement[] = [];
  for (const raw of selector.split(',')) {
    const part = raw.trim();
    if (!part) continue;
    const m = /^([^!=]+?)\s*(==|=|!=)\s*(.*)$/.exec(part);
    if (m) {
      out.push({ key: m[1]!, op: m[2] === '!=' ? '!=' : '=', value: m[3]!.trim() });
    } else if (allowExists) {
      out.push(part.startsWith('!') ? { key: part.slice(1).trim(), op: '!exists' } : { key: part, op: 'exists' });
    } else {
      throw new HttpError(400, 'BadRequest', `invalid field selector: ${part}`);
    }
  }
  return out;
}

function matches(o: FakeObject, selectors: Selectors): boolean {
  const labels = o.metadata?.labels ?? {};
  const labelOk = selectors.labels.every((r) => test(r, labels[r.key]));
  return labelOk && selectors.fields.every((r) => test(r, fieldValue(o, r.key)));
}

function test(r: Requirement, actual: string | undefined): boolean {
  switch (r.op) {
    case 'exists':
      return actual !== undefined;
    case '!exists':
      return actual === undefined;
    case '=':
      return actual === r.value;
    case '!=':
      return actual !== r.value;
  }
}

/** Field selectors see a missing field as "" (so `spec.nodeName=` selects unscheduled pods). */
function fieldValue(o: FakeObject, path: string): string {
  let cur: unknown = o;
  for (const seg of path.split('.')) cur = isPlainObject(cur) ? cur[seg] : undefined;
  return cur === undefined || cur === null ? '' : String(cur);
}

// -----------------------------------------------------------------------------------------------
// Small helpers

function parseRoute(path: string): Route | undefined {
  const seg = path.split('/').filter(Boolean).map(decodeURIComponent);
  let rest: string[];
  if (seg[0] === 'api' && seg[1] === 'v1') rest = seg.slice(2);
  else if (seg[0] === 'apis' && seg[1] === 'apps' && seg[2] === 'v1') rest = seg.slice(3);
  else return undefined;
  const core = seg[0] === 'api';
  const valid = (r: string | undefined): r is ResourceName => (core ? r === 'pods' || r === 'namespaces' : r === 'daemonsets');
  // /namespaces and /namespaces/{name} are the Namespace resource itself.
  if (rest[0] === 'namespaces' && core && rest.length <= 2)
    return { resource: 'namespaces', namespace: undefined, name: rest[1], subresource: undefined };
  if (rest[0] === 'namespaces') {
    const [, namespace, resource, name, subresource, extra] = rest;
    if (!valid(resource) || extra !== undefined) return undefined;
    return { resource, namespace, name, subresource };
  }
  const [resource, extra] = rest;
  if (!valid(resource) || extra !== undefined || !RESOURCES[resource].namespaced) return undefined;
  return { resource, namespace: undefined, name: undefined, subresource: undefined };
}

function notFound(route: Route): HttpError {
  return new HttpError(404, 'NotFound', `${route.resource} "${route.name}" not found`);
}

function sendJson(res: http.ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

function sendStatus(res: http.ServerResponse, code: number, reason: string, message: string): void {
  if (res.headersSent) return void res.destroy();
  sendJson(res, code, { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code });
}

function readBody(req: http.IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

/** RFC 7386 JSON merge patch: objects merge recursively, null deletes, anything else replaces. */
export function mergePatch(target: unknown, patch: unknown): unknown {
  if (!isPlainObject(patch)) return clone(patch);
  const result: Record<string, unknown> = isPlainObject(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete result[k];
    else result[k] = mergePatch(result[k], v);
  }
  return result;
}

/** The API server omits empty maps; so does the fake, so that "remove the last annotation" twice is a no-op. */
function setOrDrop(target: Record<string, unknown>, key: string, value: unknown): void {
  if (value === undefined || (isPlainObject(value) && Object.keys(value).length === 0)) delete target[key];
  else target[key] = value;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function deepEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((v, i) => deepEqual(v, b[i]));
  if (isPlainObject(a) && isPlainObject(b)) {
    const ka = Object.keys(a).filter((k) => a[k] !== undefined);
    const kb = Object.keys(b).filter((k) => b[k] !== undefined);
    return ka.length === kb.length && ka.every((k) => deepEqual(a[k], b[k]));
  }
  return false;
}

/** Through JSON, like the wire: Dates become strings, undefined disappears, nothing is shared. */
function clone<T>(v: T): T {
  return v === undefined ? v : (JSON.parse(JSON.stringify(v)) as T);
}

function withRv(o: FakeObject, rv: number): FakeObject {
  return { ...o, metadata: { ...o.metadata, resourceVersion: String(rv) } };
}

function rvOf(o: FakeObject): number {
  return Number(o.metadata?.resourceVersion ?? 0);
}

function keyOf(meta: FakeObjectMeta): string {
  return `${meta.namespace ?? ''}/${meta.name ?? ''}`;
}

/** metav1.Time on the wire: RFC 3339 with second precision. */
export function kubeTime(d: Date): string {
  return d.toISOString().replace(/\.\d{3}Z$/, 'Z');
}
