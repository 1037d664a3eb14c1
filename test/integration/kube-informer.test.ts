// ResilientInformer (and the KubeApi helpers) against the fake API server, through the real
// @kubernetes/client-node: sync, events with the old object, selectors, and every failure mode the
// library leaves to the application (server down, cut streams, 410, 5xx, stale server, stop()).
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import ts from 'typescript';
import { CoreV1Api, KubeConfig, type V1Namespace, type V1Pod } from '@kubernetes/client-node';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { KubeApi, kubeAvailable, loadKubeConfig, SERVICE_ACCOUNT_TOKEN_PATH } from '../../src/kube/client.js';
import { ResilientInformer, type ResilientInformerOptions } from '../../src/kube/informer.js';
import { FakeKubeApi, type FakeObject } from '../helpers/fake-kube-api.js';

const NODE = 'node-a';

const pod = (
  name: string,
  nodeName = NODE,
  extra: { labels?: Record<string, string>; status?: Record<string, unknown>; namespace?: string } = {},
): FakeObject => ({
  metadata: { name, namespace: extra.namespace ?? 'default', labels: extra.labels ?? { app: name } },
  spec: { nodeName, containers: [{ name: 'c', image: 'busybox' }] },
  status: extra.status ?? { phase: 'Pending' },
});

type Recorded = [event: string, name: string | undefined, detail?: string];

/** Records events as [event, name, detail]: update details are "oldRV->newRV", others the RV. */
function record(informer: ResilientInformer<V1Pod>) {
  const events: Recorded[] = [];
  const updates: Array<{ oldObj: V1Pod; newObj: V1Pod }> = [];
  const errors: unknown[] = [];
  const errorTimes: number[] = [];
  const connection: string[] = [];
  informer.on('add', (o) => events.push(['add', o.metadata?.name, o.metadata?.resourceVersion]));
  informer.on('update', (oldObj, newObj) => {
    updates.push({ oldObj, newObj });
    events.push(['update', newObj.metadata?.name, `${oldObj.metadata?.resourceVersion}->${newObj.metadata?.resourceVersion}`]);
  });
  informer.on('delete', (o) => events.push(['delete', o.metadata?.name, o.metadata?.resourceVersion]));
  informer.on('error', (err) => {
    errors.push(err);
    errorTimes.push(Date.now());
  });
  informer.on('connected', () => connection.push('connected'));
  informer.on('disconnected', () => connection.push('disconnected'));
  return { events, updates, errors, errorTimes, connection };
}

const names = (informer: ResilientInformer<V1Pod>): string[] =>
  informer
    .list()
    .map((p) => p.metadata!.name!)
    .sort();

/** Lets in-flight events arrive, to check that nothing more (e.g. a duplicate) comes. */
const settle = (ms = 300): Promise<void> => new Promise((r) => setTimeout(r, ms));

const waitFor = <T>(fn: () => T, timeout = 5000): Promise<T> => vi.waitFor(fn, { timeout, interval: 10 });

describe('ResilientInformer against the fake API server', () => {
  let api: FakeKubeApi;
  let kc: KubeConfig;
  let core: CoreV1Api;
  const informers: Array<ResilientInformer<V1Pod> | ResilientInformer<V1Namespace>> = [];

  beforeEach(async () => {
    api = await FakeKubeApi.create({ bookmarkIntervalMs: 200 });
    kc = loadKubeConfig({ kubeconfig: api.kubeconfigPath })!;
    core = kc.makeApiClient(CoreV1Api);
  });

  afterEach(async () => {
    await Promise.all(informers.splice(0).map((i) => i.stop()));
    await api.close();
  });

  function podInformer(opts: Partial<ResilientInformerOptions<V1Pod>> = {}) {
    const fieldSelector = `spec.nodeName=${NODE}`;
    const informer = new ResilientInformer<V1Pod>({
      kc,
      path: '/api/v1/pods',
      list: () => core.listPodForAllNamespaces({ fieldSelector }),
      fieldSelector,
      backoff: { initialMs: 50, maxMs: 400 },
      resyncMs: 0,
      ...opts,
    });
    informers.push(informer);
    const rec = record(informer);
    informer.start();
    return { informer, ...rec };
  }

  /** Requests the informer made after `from` (index into api.requests), as "LIST"/"WATCH@rv". */
  const requestsSince = (from: number): string[] =>
    api.requests
      .slice(from)
      .map((r) =>
        r.watch ? `WATCH@${r.query['resourceVersion'] ?? ''}${r.expired ? ' (410)' : ''}` : `${r.method === 'GET' ? 'LIST' : r.method}`,
      );

  it('syncs this node’s pods into the cache, in the watch (wire) shape', async () => {
    api.upsertPod(pod('a'));
    api.upsertPod(pod('b', NODE, { namespace: 'other' }));
    api.upsertPod(pod('elsewhere', 'node-b'));
    const { informer, events, connection } = podInformer();
    expect(informer.isSynced).toBe(false);
    await informer.synced();
    expect(names(informer)).toEqual(['a', 'b']);
    expect(events).toEqual([
      ['add', 'a', '1'],
      ['add', 'b', '2'],
    ]);
    expect(connection).toEqual(['connected']);
    expect(informer.connected).toBe(true);
    // Listed objects are normalised to what the server sends: timestamps as strings, kind/apiVersion set.
    expect(informer.get('other', 'b')).toEqual(api.pod('other', 'b'));
    expect(typeof informer.get('default', 'a')!.metadata!.creationTimestamp).toBe('string');
    expect(informer.get('default', 'elsewhere')).toBeUndefined();
    expect(api.requests[0]).toMatchObject({
      method: 'GET',
      path: '/api/v1/pods',
      watch: false,
      query: { fieldSelector: 'spec.nodeName=node-a' },
    });
    // The watch asks for bookmarks and a server-side timeout, with the field selector.
    await waitFor(() => expect(api.activeWatches()).toBe(1));
    expect(api.requests[1]).toMatchObject({
      watch: true,
      query: { fieldSelector: 'spec.nodeName=node-a', allowWatchBookmarks: 'true', resourceVersion: '3' },
    });
    expect(Number(api.requests[1]!.query['timeoutSeconds'])).toBeGreaterThanOrEqual(300);
  });

  it('emits add, update (with the cached old object) and delete from the watch', async () => {
    api.upsertPod(pod('a', NODE, { status: { phase: 'Running', podIP: '10.0.0.7', podIPs: [{ ip: '10.0.0.7' }] } }));
    const { informer, events, updates } = podInformer();
    await informer.synced();
    await waitFor(() => expect(api.activeWatches()).toBe(1));

    api.upsertPod(pod('b'));
    // kubernetes#125370: the terminal status may come without the pod IPs; the old object has them.
    api.upsertPod(pod('a', NODE, { status: { phase: 'Succeeded' } }));
    api.deletePod('default', 'b');
    await waitFor(() => expect(events).toHaveLength(4));
    expect(events).toEqual([
      ['add', 'a', '1'],
      ['add', 'b', '2'],
      ['update', 'a', '1->3'],
      ['delete', 'b', '4'],
    ]);
    expect(updates[0]!.oldObj.status).toEqual({ phase: 'Running', podIP: '10.0.0.7', podIPs: [{ ip: '10.0.0.7' }] });
    expect(updates[0]!.newObj.status).toEqual({ phase: 'Succeeded' });
    expect(informer.get('default', 'a')!.status?.phase).toBe('Succeeded');
    expect(names(informer)).toEqual(['a']);
  });

  it('sees only this node’s pods: a pod bound to the node later arrives as an add', async () => {
    const { informer, events } = podInformer();
    await informer.synced();
    await waitFor(() => expect(api.activeWatches()).toBe(1));
    api.upsertPod(pod('other-node', 'node-b'));
    api.upsertPod(pod('unbound', ''));
    api.setPodPhase('default', 'other-node', 'Running');
    api.upsertPod(pod('unbound', NODE)); // scheduled onto our node
    await waitFor(() => expect(events).toEqual([['add', 'unbound', '4']]));
    await settle(100);
    expect(events).toHaveLength(1);
    expect(names(informer)).toEqual(['unbound']);
  });

  it('keeps the cache while the API server is down, backs off, and catches up after it returns', async () => {
    api.upsertPod(pod('keep'));
    api.upsertPod(pod('change'));
    api.upsertPod(pod('remove'));
    const { informer, events, errors, errorTimes, connection } = podInformer({ backoff: { initialMs: 50, maxMs: 400 } });
    await informer.synced();
    await waitFor(() => expect(api.activeWatches()).toBe(1));
    await settle(250); // a bookmark moves the watch's resourceVersion to the server's

    await api.stop();
    await waitFor(() => expect(connection).toEqual(['connected', 'disconnected']));
    expect(informer.connected).toBe(false);
    // Changes while the informer cannot see them.
    api.upsertPod(pod('new'));
    api.setPodPhase('default', 'change', 'Running');
    api.deletePod('default', 'remove');
    await waitFor(() => expect(errors.length).toBeGreaterThanOrEqual(5), 5000);
    expect(names(informer)).toEqual(['change', 'keep', 'remove']); // served from the cache meanwhile
    expect(errors[0]).toMatchObject({ code: 'ERR_STREAM_PREMATURE_CLOSE' }); // the stream, cut by the shutdown
    expect(errors.slice(1).every((e) => (e as { code?: string }).code === 'ECONNREFUSED')).toBe(true);
    // Exponential backoff: the gaps between attempts grow (50, 100, 200 ms ± 20 %).
    const gaps = errorTimes.slice(2).map((t, i) => t - errorTimes[i + 1]!);
    expect(gaps[2]!).toBeGreaterThan(gaps[0]!);
    expect(gaps[0]!).toBeGreaterThanOrEqual(30);

    const before = api.requests.length;
    await api.start();
    await waitFor(() => expect(events.slice(3)).toHaveLength(3), 5000);
    expect(events.slice(3)).toEqual([
      ['add', 'new', '4'],
      ['update', 'change', '2->5'],
      ['delete', 'remove', '6'],
    ]);
    expect(connection).toEqual(['connected', 'disconnected', 'connected']);
    expect(names(informer)).toEqual(['change', 'keep', 'new']);
    // The history still had everything: resumed from the resourceVersion, no re-list.
    expect(requestsSince(before)[0]).toBe('WATCH@3');
    expect(requestsSince(before)).not.toContain('LIST');
    await settle();
    expect(events).toHaveLength(6);
  });

  it('re-lists after 410 Gone (compacted history) and synthesises each missed change once', async () => {
    api.upsertPod(pod('keep'));
    api.upsertPod(pod('change'));
    api.upsertPod(pod('remove'));
    const { informer, events, connection } = podInformer();
    await informer.synced();
    await waitFor(() => expect(api.activeWatches()).toBe(1));
    const before = api.requests.length;

    api.cutWatches();
    api.upsertPod(pod('new'));
    api.setPodPhase('default', 'change', 'Running');
    api.deletePod('default', 'remove');
    api.compact();
    await waitFor(() => expect(events.slice(3)).toHaveLength(3));
    // In list order, then deletions; the deleted object is the cached one (the deletion was never seen).
    expect(events.slice(3)).toEqual([
      ['update', 'change', '2->5'],
      ['add', 'new', '4'],
      ['delete', 'remove', '3'],
    ]);
    await waitFor(() => expect(api.activeWatches()).toBe(1));
    expect(requestsSince(before)).toEqual(['WATCH@3 (410)', 'LIST', 'WATCH@6']);
    await settle();
    expect(events).toHaveLength(6); // the library's own re-list diff added nothing
    expect(names(informer)).toEqual(['change', 'keep', 'new']);
    expect(connection[0]).toBe('connected');
    expect(connection.at(-1)).toBe('connected');
  });

  it('resumes a watch cut mid-stream from its resourceVersion, without a re-list', async () => {
    api.upsertPod(pod('a'));
    const { informer, events, errors } = podInformer();
    await informer.synced();
    await waitFor(() => expect(api.activeWatches()).toBe(1));
    const before = api.requests.length;
    api.cutWatches();
    api.setPodPhase('default', 'a', 'Running');
    await waitFor(() =>
      expect(events).toEqual([
        ['add', 'a', '1'],
        ['update', 'a', '1->2'],
      ]),
    );
    expect(errors[0]).toMatchObject({ code: 'ERR_STREAM_PREMATURE_CLOSE' });
    expect(informer.lastError).toBe(errors[0]);
    expect(requestsSince(before)).toEqual(['WATCH@1']);
    // And the stream keeps working after the resume.
    api.upsertPod(pod('b'));
    await waitFor(() => expect(events.at(-1)).toEqual(['add', 'b', '3']));
  });

  it('retries through 5xx answers', async () => {
    api.upsertPod(pod('a'));
    const { informer, events, errors } = podInformer();
    await informer.synced();
    await waitFor(() => expect(api.activeWatches()).toBe(1));
    api.failNext(2, 500, (r) => r.watch);
    api.cutWatches();
    api.upsertPod(pod('b'));
    await waitFor(() => expect(events.at(-1)).toEqual(['add', 'b', '2']));
    expect(errors.map((e) => (e as { statusCode?: number; code?: unknown }).statusCode ?? (e as { code?: unknown }).code)).toEqual([
      'ERR_STREAM_PREMATURE_CLOSE',
      500,
      500,
    ]);
  });

  it('retries a failed initial list until it succeeds', async () => {
    api.upsertPod(pod('a'));
    api.failNext(2, 503, (r) => !r.watch);
    const { informer, events, errors, connection } = podInformer();
    await informer.synced();
    expect(errors.map((e) => (e as { code?: unknown }).code)).toEqual([503, 503]);
    expect(events).toEqual([['add', 'a', '1']]);
    expect(connection).toEqual(['connected']); // never connected before: no 'disconnected'
  });

  it('periodic resync catches changes the watch never delivered', async () => {
    api.upsertPod(pod('a'));
    api.upsertPod(pod('b'));
    const { informer, events } = podInformer({ resyncMs: 300 });
    await informer.synced();
    await waitFor(() => expect(api.activeWatches()).toBe(1));
    api.silentlyChangePod('default', 'a', (p) => ({ ...p, metadata: { ...p.metadata, annotations: { lost: 'event' } } }));
    api.silentlyChangePod('default', 'b', () => undefined);
    await waitFor(() => expect(events.length).toBe(4), 3000);
    expect(events.slice(2)).toEqual([
      ['update', 'a', '1->3'],
      ['delete', 'b', '2'],
    ]);
    expect(informer.get('default', 'a')!.metadata!.annotations).toEqual({ lost: 'event' });
    // Each resync replaces the watch: never more than one open at a time, nothing duplicated.
    await settle(700);
    expect(api.activeWatches()).toBe(1);
    expect(events).toHaveLength(4);
    expect(api.requests.filter((r) => !r.watch).length).toBeGreaterThanOrEqual(3);
  });

  it('aborts a watch the server keeps open past its timeoutSeconds, then resumes', async () => {
    api.ignoreWatchTimeouts = true;
    api.upsertPod(pod('a'));
    const { informer, events, errors } = podInformer({ watchTimeoutSeconds: 1 });
    await informer.synced();
    await waitFor(() => expect(api.activeWatches()).toBe(1));
    const before = api.requests.length;
    // timeoutSeconds 1 + 1 s grace: the informer gives up on the stream after ~2 s.
    await waitFor(() => expect(errors).toHaveLength(1), 4000);
    expect((errors[0] as Error).name).toBe('AbortError');
    await waitFor(() => expect(requestsSince(before)).toEqual(['WATCH@1']));
    api.upsertPod(pod('b'));
    await waitFor(() => expect(events.at(-1)).toEqual(['add', 'b', '2']));
  });

  it('isolates throwing event handlers', async () => {
    api.upsertPod(pod('a'));
    const { informer, events } = podInformer();
    informer.on('add', () => {
      throw new Error('handler bug');
    });
    await informer.synced();
    await waitFor(() => expect(api.activeWatches()).toBe(1));
    api.upsertPod(pod('b'));
    await waitFor(() =>
      expect(events).toEqual([
        ['add', 'a', '1'],
        ['add', 'b', '2'],
      ]),
    );
    expect(informer.connected).toBe(true);
  });

  it('handles cluster-scoped objects (namespaces)', async () => {
    api.upsertNamespace({ metadata: { name: 'default', labels: { 'istio.io/dataplane-mode': 'ambient' } } });
    const informer = new ResilientInformer<V1Namespace>({ kc, path: '/api/v1/namespaces', list: () => core.listNamespace(), resyncMs: 0 });
    informers.push(informer);
    const updates: Array<[string | undefined, string | undefined]> = [];
    informer.on('update', (o, n) =>
      updates.push([o.metadata?.labels?.['istio.io/dataplane-mode'], n.metadata?.labels?.['istio.io/dataplane-mode']]),
    );
    informer.start();
    await informer.synced();
    expect(informer.get('', 'default')).toEqual(api.namespace('default'));
    expect(informer.get(undefined, 'default')?.kind).toBe('Namespace');
    await waitFor(() => expect(api.activeWatches('namespaces')).toBe(1));
    api.upsertNamespace({ metadata: { name: 'default' } });
    await waitFor(() => expect(updates).toEqual([['ambient', undefined]]));
  });

  it('stop() closes every watch, socket and timer', async () => {
    const baseline = await quietBaseline();
    api.upsertPod(pod('a'));
    const { informer } = podInformer({ resyncMs: 60_000, backoff: { initialMs: 10_000, maxMs: 20_000 } });
    await informer.synced();
    await waitFor(() => expect(api.activeWatches()).toBe(1));
    expect(resourceCounts().TCPSocketWrap).toBeGreaterThan(baseline.TCPSocketWrap);
    await informer.stop();
    await waitFor(() => expect(api.activeWatches()).toBe(0));
    // Closed client-side: the fake still runs; its end of the connection is gone too.
    await waitFor(() => expect(noMoreThan(resourceCounts(), baseline)).toBe(true));
    expect(informer.connected).toBe(false);
    expect(() => informer.start()).toThrow(/after stop/);
  });

  it('stop() while the server is down (in backoff) or never answering leaves nothing behind', async () => {
    const baseline = await quietBaseline();
    api.upsertPod(pod('a'));
    const down = podInformer({ backoff: { initialMs: 5000, maxMs: 5000 } });
    await down.informer.synced();
    await api.stop();
    await waitFor(() => expect(down.errors).toHaveLength(1)); // now waiting ~5 s to retry
    await down.informer.stop();

    // A server that accepts the connection but never answers: the watch fetch is still pending.
    await api.start();
    const sockets = new Set<Socket>();
    const silent = createServer((s) => {
      sockets.add(s);
      s.resume(); // read, so that the client's FIN is seen
      s.on('end', () => s.destroy());
    });
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const silentKc = new KubeConfig();
    silentKc.loadFromClusterAndUser(
      { name: 'silent', server: `http://127.0.0.1:${(silent.address() as AddressInfo).port}`, skipTLSVerify: true },
      { name: 'u' },
    );
    const hanging = new ResilientInformer<V1Pod>({
      kc: silentKc,
      path: '/api/v1/pods',
      list: () => core.listPodForAllNamespaces(),
      resyncMs: 0,
    });
    hanging.start(); // lists from the fake (core), watches the silent server
    await hanging.synced();
    await waitFor(() => expect(sockets.size).toBe(1));
    await hanging.stop();
    await waitFor(() => expect([...sockets].every((s) => s.destroyed)).toBe(true));
    await new Promise<void>((r) => silent.close(() => r()));
    await api.stop();
    await waitFor(() => expect(noMoreThan(resourceCounts(), { ...baseline, TCPServerWrap: 0 })).toBe(true));
  });
});

describe('a process using the informer', () => {
  it('exits by itself after stop(), even with a retry pending and a watch the server never answered', async () => {
    const dir = transpileForNode(['src/kube/informer.ts', 'src/ops/log.ts', 'src/ops/log-levels.ts', 'test/helpers/fake-kube-api.ts']);
    // The silent server lives in this process: only the child's own handles can keep it alive.
    const silent = createServer((s) => s.resume().on('end', () => s.destroy()));
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const script = `
      import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
      import { ResilientInformer } from './src/kube/informer.js';
      import { FakeKubeApi } from './test/helpers/fake-kube-api.js';
      const api = await FakeKubeApi.create();
      api.upsertPod({ metadata: { name: 'a' }, spec: { nodeName: 'n' } });
      const kc = new KubeConfig();
      kc.loadFromFile(api.kubeconfigPath);
      const core = kc.makeApiClient(CoreV1Api);
      const list = () => core.listPodForAllNamespaces();
      const watching = new ResilientInformer({ kc, path: '/api/v1/pods', list, resyncMs: 60000 });
      const retrying = new ResilientInformer({ kc, path: '/api/v1/pods', list, backoff: { initialMs: 20000, maxMs: 20000 } });
      const silentKc = new KubeConfig();
      silentKc.loadFromClusterAndUser({ name: 's', server: 'http://127.0.0.1:${(silent.address() as AddressInfo).port}', skipTLSVerify: true }, { name: 'u' });
      const hanging = new ResilientInformer({ kc: silentKc, path: '/api/v1/pods', list });
      let failed = 0;
      retrying.on('error', () => failed++);
      for (const i of [watching, retrying, hanging]) i.start();
      await Promise.all([watching.synced(), retrying.synced(), hanging.synced()]);
      while (api.activeWatches() < 2) await new Promise((r) => setTimeout(r, 10));
      api.cutWatches(); // both fake watches: each informer now retries, 'retrying' only in 20 s
      while (failed === 0) await new Promise((r) => setTimeout(r, 10));
      await Promise.all([watching.stop(), retrying.stop(), hanging.stop()]);
      await api.close();
      console.log('stopped ' + Date.now());
    `;
    writeFileSync(join(dir, 'main.mjs'), script);
    try {
      const child = spawn(process.execPath, ['main.mjs'], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      let err = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      child.stderr.on('data', (d: Buffer) => (err += d.toString()));
      const killer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      const code = await new Promise<number | null>((r) => child.on('exit', (c) => r(c)));
      const exitedAt = Date.now();
      clearTimeout(killer);
      expect(err).toBe('');
      expect(code).toBe(0);
      const stoppedAt = Number(/stopped (\d+)/.exec(out)?.[1]);
      expect(exitedAt - stoppedAt).toBeLessThan(2000); // not held by the 20 s retry timer or a socket
    } finally {
      await new Promise<void>((r) => silent.close(() => r()));
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/** Transpiles repository files (type-only, no checking) into a temp dir that can resolve node_modules. */
function transpileForNode(files: string[]): string {
  const root = join(import.meta.dirname, '..', '..');
  const dir = mkdtempSync(join(tmpdir(), 'informer-exit-'));
  writeFileSync(join(dir, 'package.json'), '{"type":"module"}');
  symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'), 'dir');
  for (const file of files) {
    const out = ts.transpileModule(readFileSync(join(root, file), 'utf8'), {
      compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022, verbatimModuleSyntax: false },
    });
    const target = join(dir, file.replace(/\.ts$/, '.js'));
    mkdirSync(dirname(target), { recursive: true });
    writeFileSync(target, out.outputText);
  }
  return dir;
}

/**
 * Counts once the sockets of earlier tests have finished closing. Taken inside waitFor, like the
 * final comparison, so that waitFor's own timers are in both.
 */
async function quietBaseline(): Promise<ReturnType<typeof resourceCounts>> {
  let baseline: ReturnType<typeof resourceCounts> | undefined;
  await waitFor(() => {
    baseline = resourceCounts();
    expect(baseline).toMatchObject({ TCPSocketWrap: 0, TCPServerWrap: 1 }); // only this test's fake
  });
  return baseline!;
}

/** Vitest's own timers come and go, so "at most the baseline" rather than equality. */
function noMoreThan(now: ReturnType<typeof resourceCounts>, baseline: ReturnType<typeof resourceCounts>): boolean {
  return now.TCPSocketWrap <= baseline.TCPSocketWrap && now.TCPServerWrap <= baseline.TCPServerWrap && now.Timeout <= baseline.Timeout;
}

/** Handles that would keep the process alive (vitest's own ones are part of the baseline). */
function resourceCounts(): { TCPSocketWrap: number; TCPServerWrap: number; Timeout: number } {
  const info = process.getActiveResourcesInfo();
  const count = (name: string): number => info.filter((r) => r === name).length;
  return { TCPSocketWrap: count('TCPSocketWrap'), TCPServerWrap: count('TCPServerWrap'), Timeout: count('Timeout') };
}

describe('KubeApi and kubeconfig loading', () => {
  let api: FakeKubeApi;
  let kube: KubeApi;
  let dir: string;

  beforeEach(async () => {
    api = await FakeKubeApi.create();
    kube = new KubeApi(loadKubeConfig({ kubeconfig: api.kubeconfigPath })!);
    dir = mkdtempSync(join(tmpdir(), 'kube-client-'));
  });

  afterEach(async () => {
    await api.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('patches annotations with a merge patch on pods/status; a missing pod resolves false', async () => {
    api.upsertPod(pod('a', NODE));
    expect(await kube.patchPodAnnotations('default', 'a', { 'ambient.istio.io/redirection': 'enabled' })).toBe(true);
    expect(api.pod('default', 'a')!.metadata!.annotations).toEqual({ 'ambient.istio.io/redirection': 'enabled' });
    expect(await kube.patchPodAnnotations('default', 'a', { 'ambient.istio.io/redirection': 'enabled' })).toBe(true);
    expect(await kube.patchPodAnnotations('default', 'a', { 'ambient.istio.io/redirection': null })).toBe(true);
    expect(api.pod('default', 'a')!.metadata!.annotations).toBeUndefined();
    expect(await kube.patchPodAnnotations('default', 'gone', { 'ambient.istio.io/redirection': null })).toBe(false);
    expect(api.patches.map((p) => [p.subresource, p.contentType, p.status, p.changed])).toEqual([
      ['status', 'application/merge-patch+json', 200, true],
      ['status', 'application/merge-patch+json', 200, false],
      ['status', 'application/merge-patch+json', 200, true],
      ['status', 'application/merge-patch+json', 404, false],
    ]);
    api.failNext(1, 500);
    await expect(kube.patchPodAnnotations('default', 'a', { x: 'y' })).rejects.toMatchObject({ code: 500 });
  });

  it('reads pods and DaemonSets, undefined when missing', async () => {
    api.upsertPod(pod('a', NODE));
    api.setDaemonSet('istio-system', { metadata: { name: 'istio-cni-node' }, spec: {} });
    expect((await kube.getPod('default', 'a'))?.spec?.nodeName).toBe(NODE);
    expect(await kube.getPod('default', 'b')).toBeUndefined();
    expect((await kube.getDaemonSet('istio-system', 'istio-cni-node'))?.metadata?.name).toBe('istio-cni-node');
    expect(await kube.getDaemonSet('istio-system', 'other')).toBeUndefined();
    expect((await kube.listPodsOnNode(NODE)()).items).toHaveLength(1);
    expect((await kube.listPodsOnNode('node-b')()).items).toHaveLength(0);
  });

  it('picks an explicit kubeconfig, then in-cluster, then KUBECONFIG; undefined when none', () => {
    const saPrefix = join(dir, 'sa');
    const env = { KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '443' };
    expect(loadKubeConfig({ env: {}, serviceAccountPrefix: saPrefix })).toBeUndefined();
    expect(kubeAvailable({}, { serviceAccountPrefix: saPrefix })).toBe(false);
    // KUBERNETES_SERVICE_HOST alone is not enough: the token must be mounted.
    expect(loadKubeConfig({ env, serviceAccountPrefix: saPrefix })).toBeUndefined();

    mkdirSync(join(saPrefix, SERVICE_ACCOUNT_TOKEN_PATH, '..'), { recursive: true });
    writeFileSync(join(saPrefix, SERVICE_ACCOUNT_TOKEN_PATH), 'token');
    const inCluster = loadKubeConfig({ env, serviceAccountPrefix: saPrefix })!;
    expect(inCluster.getCurrentCluster()?.server).toBe('https://[fd00::1]:443');
    expect(inCluster.getCurrentUser()?.authProvider?.config?.tokenFile).toBe(join(saPrefix, SERVICE_ACCOUNT_TOKEN_PATH));
    expect(kubeAvailable(env, { serviceAccountPrefix: saPrefix })).toBe(true);

    const fromEnv = loadKubeConfig({
      env: { KUBECONFIG: `${join(dir, 'missing')}:${api.kubeconfigPath}` },
      serviceAccountPrefix: saPrefix,
    })!;
    expect(fromEnv.getCurrentCluster()?.server).toBe(api.url);
    expect(kubeAvailable({ KUBECONFIG: join(dir, 'missing') }, { serviceAccountPrefix: saPrefix })).toBe(false);
    // The explicit path wins over in-cluster; a missing explicit path is an error, not "standalone".
    expect(loadKubeConfig({ kubeconfig: api.kubeconfigPath, env, serviceAccountPrefix: saPrefix })!.getCurrentCluster()?.server).toBe(
      api.url,
    );
    expect(() => loadKubeConfig({ kubeconfig: join(dir, 'missing') })).toThrow(/does not exist/);
  });
});
