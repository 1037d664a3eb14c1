// The fake API server, driven by the real @kubernetes/client-node (CoreV1Api, AppsV1Api, Watch):
// if the library accepts what it serves, tests built on it exercise the library for real.
import { AppsV1Api, CoreV1Api, KubeConfig, PatchStrategy, setHeaderOptions, Watch } from '@kubernetes/client-node';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FakeKubeApi, mergePatch, type FakeObject } from '../helpers/fake-kube-api.js';

const pod = (name: string, nodeName: string, extra: Partial<FakeObject> = {}): FakeObject => ({
  metadata: { name, namespace: 'default', labels: { app: name }, ...extra.metadata },
  spec: { nodeName, containers: [{ name: 'c', image: 'busybox' }] },
  status: { phase: 'Pending' },
});

interface WatchEvent {
  type: string;
  object: FakeObject & { code?: number; reason?: string };
}

/** A raw watch through the library's Watch class, collecting events until done. */
function startWatch(kc: KubeConfig, path: string, query: Record<string, string | number | boolean>) {
  const events: WatchEvent[] = [];
  let ended: ((err: unknown) => void) | undefined;
  const done = new Promise<unknown>((resolve) => (ended = resolve));
  const controller = new Watch(kc).watch(
    path,
    query,
    (type, object) => events.push({ type, object }),
    (err) => ended?.(err),
  );
  return { events, done, controller };
}

async function until(cond: () => boolean, ms = 3000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('FakeKubeApi with the real client library', () => {
  let api: FakeKubeApi;
  let kc: KubeConfig;
  let core: CoreV1Api;
  const controllers: Array<Promise<AbortController>> = [];

  beforeEach(async () => {
    api = await FakeKubeApi.create({ bookmarkIntervalMs: 100 });
    kc = new KubeConfig();
    kc.loadFromFile(api.kubeconfigPath);
    core = kc.makeApiClient(CoreV1Api);
  });

  afterEach(async () => {
    for (const c of controllers.splice(0)) (await c).abort();
    await api.close();
  });

  function watch(path: string, query: Record<string, string | number | boolean>) {
    const w = startWatch(kc, path, query);
    controllers.push(w.controller);
    return w;
  }

  it('stamps objects and lists with fieldSelector and labelSelector', async () => {
    const a = api.upsertPod(pod('a', 'node-a'));
    api.upsertPod(pod('b', 'node-b'));
    api.upsertPod(pod('c', 'node-a', { metadata: { name: 'c', namespace: 'other', labels: { app: 'c', tier: 'web' } } }));
    expect(a.metadata).toMatchObject({ namespace: 'default', resourceVersion: '1', uid: expect.stringMatching(/^[0-9a-f-]{36}$/) });
    expect(a.metadata?.creationTimestamp).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);

    const onNode = await core.listPodForAllNamespaces({ fieldSelector: 'spec.nodeName=node-a' });
    expect(onNode.kind).toBe('PodList');
    expect(onNode.metadata?.resourceVersion).toBe('3');
    expect(onNode.items.map((p) => p.metadata?.name)).toEqual(['a', 'c']);
    // The library deserializes lists: timestamps become Dates (watch events keep strings).
    expect(onNode.items[0]!.metadata?.creationTimestamp).toBeInstanceOf(Date);

    const inNs = await core.listNamespacedPod({ namespace: 'other' });
    expect(inNs.items.map((p) => p.metadata?.name)).toEqual(['c']);
    const byLabel = await core.listPodForAllNamespaces({ labelSelector: 'tier=web' });
    expect(byLabel.items.map((p) => p.metadata?.name)).toEqual(['c']);
    const notWeb = await core.listPodForAllNamespaces({ labelSelector: 'app,tier!=web' });
    expect(notWeb.items.map((p) => p.metadata?.name)).toEqual(['a', 'b']);
    const byName = await core.listPodForAllNamespaces({ fieldSelector: 'metadata.name=b' });
    expect(byName.items.map((p) => p.metadata?.name)).toEqual(['b']);

    api.upsertNamespace({ metadata: { name: 'default', labels: { 'istio.io/dataplane-mode': 'ambient' } } });
    api.upsertNamespace('other');
    const namespaces = await core.listNamespace({ labelSelector: 'istio.io/dataplane-mode=ambient' });
    expect(namespaces.kind).toBe('NamespaceList');
    expect(namespaces.items.map((n) => n.metadata?.name)).toEqual(['default']);
    expect(api.requests.some((r) => r.path === '/api/v1/pods' && r.query['fieldSelector'] === 'spec.nodeName=node-a')).toBe(true);
  });

  it('serves single objects and 404 Status for missing ones', async () => {
    api.upsertPod(pod('a', 'node-a'));
    api.upsertNamespace('default');
    api.setDaemonSet('istio-system', { metadata: { name: 'istio-cni-node' }, spec: { selector: { matchLabels: { k8s: 'cni' } } } });
    const apps = kc.makeApiClient(AppsV1Api);

    expect((await core.readNamespacedPod({ namespace: 'default', name: 'a' })).spec?.nodeName).toBe('node-a');
    expect((await core.readNamespace({ name: 'default' })).metadata?.name).toBe('default');
    const ds = await apps.readNamespacedDaemonSet({ namespace: 'istio-system', name: 'istio-cni-node' });
    expect(ds).toMatchObject({ kind: 'DaemonSet', apiVersion: 'apps/v1', metadata: { namespace: 'istio-system' } });

    await expect(core.readNamespacedPod({ namespace: 'default', name: 'nope' })).rejects.toMatchObject({
      code: 404,
      body: expect.stringContaining('NotFound'),
    });
    await expect(core.readNamespace({ name: 'nope' })).rejects.toMatchObject({ code: 404 });
    api.setDaemonSet('istio-system', undefined, 'istio-cni-node');
    await expect(apps.readNamespacedDaemonSet({ namespace: 'istio-system', name: 'istio-cni-node' })).rejects.toMatchObject({ code: 404 });
  });

  it('rejects requests without the kubeconfig token', async () => {
    const anonymous = new KubeConfig();
    anonymous.loadFromClusterAndUser({ name: 'c', server: api.url, skipTLSVerify: true }, { name: 'u' });
    await expect(anonymous.makeApiClient(CoreV1Api).listNamespace()).rejects.toMatchObject({ code: 401 });
  });

  it('streams the current state, then changes matching the selectors (entering and leaving them)', async () => {
    api.upsertPod(pod('a', 'node-a'));
    api.upsertPod(pod('b', 'node-b'));
    const w = watch('/api/v1/pods', { fieldSelector: 'spec.nodeName=node-a' });
    await until(() => w.events.length === 1);
    expect(w.events[0]).toMatchObject({ type: 'ADDED', object: { kind: 'Pod', metadata: { name: 'a' } } });
    // Watch objects are not deserialized: the timestamp stays a string.
    expect(typeof w.events[0]!.object.metadata?.creationTimestamp).toBe('string');

    api.setPodPhase('default', 'a', 'Running');
    api.upsertPod(pod('b', 'node-b', { metadata: { name: 'b', namespace: 'default', labels: { app: 'b', x: 'y' } } })); // not on node-a
    api.upsertPod(pod('unbound', ''));
    api.upsertPod(pod('unbound', 'node-a')); // enters the selection: ADDED for this watcher
    api.deletePod('default', 'a');
    await until(() => w.events.length === 4);
    expect(w.events.map((e) => [e.type, e.object.metadata?.name, e.object.metadata?.resourceVersion])).toEqual([
      ['ADDED', 'a', '1'],
      ['MODIFIED', 'a', '3'],
      ['ADDED', 'unbound', '6'],
      ['DELETED', 'a', '7'],
    ]);
    expect(w.events[1]!.object.status).toMatchObject({ phase: 'Running' });
    // Leaving a label selection is a DELETED for that watcher, with the new resourceVersion.
    const byLabel = watch('/api/v1/namespaces/default/pods', { labelSelector: 'app=b' });
    await until(() => byLabel.events.length === 1);
    api.upsertPod(pod('b', 'node-b', { metadata: { name: 'b', namespace: 'default', labels: { app: 'changed' } } }));
    await until(() => byLabel.events.length === 2);
    expect(byLabel.events[1]).toMatchObject({
      type: 'DELETED',
      object: { metadata: { name: 'b', resourceVersion: '8', labels: { app: 'b' } } },
    });
  });

  it('replays history after a resourceVersion, and answers 410 Expired once it is compacted', async () => {
    api.upsertPod(pod('a', 'node-a')); // rv 1
    api.upsertPod(pod('b', 'node-a')); // rv 2
    api.setPodPhase('default', 'a', 'Running'); // rv 3
    const replay = watch('/api/v1/pods', { resourceVersion: '1' });
    await until(() => replay.events.length === 2);
    expect(replay.events.map((e) => [e.type, e.object.metadata?.name])).toEqual([
      ['ADDED', 'b'],
      ['MODIFIED', 'a'],
    ]);

    api.compact();
    const expired = watch('/api/v1/pods', { resourceVersion: '2' });
    expect(await expired.done).toBeNull(); // the stream ends cleanly after the ERROR event
    expect(expired.events).toEqual([
      { type: 'ERROR', object: expect.objectContaining({ kind: 'Status', status: 'Failure', reason: 'Expired', code: 410 }) },
    ]);
    expect(api.requests.at(-1)).toMatchObject({ watch: true, expired: true });

    // Watching from the compaction point itself misses nothing: no 410.
    const fresh = watch('/api/v1/pods', { resourceVersion: '3' });
    api.deletePod('default', 'b');
    await until(() => fresh.events.length === 1);
    expect(fresh.events[0]).toMatchObject({ type: 'DELETED', object: { metadata: { name: 'b', resourceVersion: '4' } } });
  });

  it('sends bookmarks with the current resourceVersion when asked, and ends the stream at timeoutSeconds', async () => {
    api.upsertPod(pod('a', 'node-a'));
    api.upsertPod(pod('b', 'node-b'));
    const w = watch('/api/v1/pods', {
      resourceVersion: '2',
      allowWatchBookmarks: true,
      timeoutSeconds: 1,
      fieldSelector: 'spec.nodeName=node-a',
    });
    await until(() => w.events.some((e) => e.type === 'BOOKMARK'));
    expect(w.events.find((e) => e.type === 'BOOKMARK')).toEqual({
      type: 'BOOKMARK',
      object: { kind: 'Pod', apiVersion: 'v1', metadata: { resourceVersion: '2' } },
    });
    const started = Date.now();
    expect(await w.done).toBeNull();
    expect(Date.now() - started).toBeLessThan(1500);
    expect(api.activeWatches()).toBe(0);

    const noBookmarks = watch('/api/v1/pods', { resourceVersion: '2', timeoutSeconds: 1 });
    expect(await noBookmarks.done).toBeNull();
    expect(noBookmarks.events).toEqual([]);
  });

  it('cutWatches() and stop() end streams abruptly; start() serves again on the same port', async () => {
    const w = watch('/api/v1/pods', { resourceVersion: '0' });
    await until(() => api.activeWatches() === 1);
    api.cutWatches();
    expect(await w.done).toMatchObject({ code: 'ERR_STREAM_PREMATURE_CLOSE' });

    const port = api.port;
    await api.stop();
    await expect(core.listNamespace()).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    api.upsertNamespace('while-down'); // state changes while the server is down are kept
    await api.start();
    expect(api.port).toBe(port);
    expect((await core.listNamespace()).items.map((n) => n.metadata?.name)).toEqual(['while-down']);
  });

  it('injects failures for matching requests', async () => {
    api.failNext(1, 503, (r) => r.watch);
    const w = watch('/api/v1/pods', {});
    expect(await w.done).toMatchObject({ statusCode: 503 });
    expect((await core.listNamespace()).items).toEqual([]); // not a watch: unaffected
    const again = watch('/api/v1/pods', { timeoutSeconds: 1 });
    expect(await again.done).toBeNull();
  });

  describe('PATCH pods/status', () => {
    const merge = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);

    it('applies a JSON merge patch to annotations, labels and status only; null deletes', async () => {
      api.upsertPod(pod('a', 'node-a', { metadata: { name: 'a', namespace: 'default', annotations: { keep: 'me', drop: 'me' } } }));
      const patched = await core.patchNamespacedPodStatus(
        {
          name: 'a',
          namespace: 'default',
          body: {
            metadata: { annotations: { 'ambient.istio.io/redirection': 'enabled', drop: null }, labels: { added: 'yes' } },
            spec: { nodeName: 'elsewhere' },
            status: { podIP: '10.0.0.5' },
          },
        },
        merge,
      );
      expect(patched.metadata?.annotations).toEqual({ keep: 'me', 'ambient.istio.io/redirection': 'enabled' });
      expect(patched.metadata?.resourceVersion).toBe('2');
      const stored = api.pod('default', 'a')!;
      expect(stored.metadata?.labels).toEqual({ app: 'a', added: 'yes' });
      expect(stored.spec?.['nodeName']).toBe('node-a'); // spec is ignored on pods/status
      expect(stored.status).toEqual({ phase: 'Pending', podIP: '10.0.0.5' });
      expect(api.patches).toEqual([
        expect.objectContaining({
          namespace: 'default',
          name: 'a',
          subresource: 'status',
          contentType: 'application/merge-patch+json',
          status: 200,
          changed: true,
        }),
      ]);
    });

    it('does not bump the resourceVersion nor emit an event for a patch that changes nothing', async () => {
      api.upsertPod(pod('a', 'node-a'));
      const w = watch('/api/v1/pods', { resourceVersion: '1' });
      await until(() => api.activeWatches() === 1);
      const body = { metadata: { annotations: { 'ambient.istio.io/redirection': 'enabled' } } };
      await core.patchNamespacedPodStatus({ name: 'a', namespace: 'default', body }, merge);
      const again = await core.patchNamespacedPodStatus({ name: 'a', namespace: 'default', body }, merge);
      expect(again.metadata?.resourceVersion).toBe('2');
      // Removing an annotation twice: the second removal is a no-op too (empty maps are omitted).
      const remove = { metadata: { annotations: { 'ambient.istio.io/redirection': null } } };
      await core.patchNamespacedPodStatus({ name: 'a', namespace: 'default', body: remove }, merge);
      const removedAgain = await core.patchNamespacedPodStatus({ name: 'a', namespace: 'default', body: remove }, merge);
      expect(removedAgain.metadata?.resourceVersion).toBe('3');
      expect(removedAgain.metadata?.annotations).toBeUndefined();
      expect(api.patches.map((p) => p.changed)).toEqual([true, false, true, false]);
      api.setPodPhase('default', 'a', 'Running'); // a marker event, to know the stream has caught up
      await until(() => w.events.length === 3);
      expect(w.events.map((e) => e.object.metadata?.resourceVersion)).toEqual(['2', '3', '4']);
    });

    it('refuses other content types (415), answers 404 for a missing pod and 409 on a stale resourceVersion', async () => {
      api.upsertPod(pod('a', 'node-a'));
      // The generated client's default content type is json-patch.
      await expect(
        core.patchNamespacedPodStatus({ name: 'a', namespace: 'default', body: { metadata: { annotations: { x: 'y' } } } }),
      ).rejects.toMatchObject({ code: 415 });
      await expect(
        core.patchNamespacedPodStatus(
          { name: 'a', namespace: 'default', body: {} },
          setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch),
        ),
      ).rejects.toMatchObject({ code: 415 });
      await expect(core.patchNamespacedPodStatus({ name: 'gone', namespace: 'default', body: {} }, merge)).rejects.toMatchObject({
        code: 404,
      });
      await expect(
        core.patchNamespacedPodStatus(
          { name: 'a', namespace: 'default', body: { metadata: { resourceVersion: '999', annotations: { x: 'y' } } } },
          merge,
        ),
      ).rejects.toMatchObject({ code: 409 });
      expect(api.patches.map((p) => p.status)).toEqual([415, 415, 404, 409]);
      expect(api.pod('default', 'a')!.metadata?.resourceVersion).toBe('1');
    });
  });

  it('mergePatch follows RFC 7386', () => {
    expect(mergePatch({ a: 'b', c: { d: 'e', f: 'g' } }, { a: 'z', c: { f: null } })).toEqual({ a: 'z', c: { d: 'e' } });
    expect(mergePatch({ a: [1, 2] }, { a: [3] })).toEqual({ a: [3] });
    expect(mergePatch({ a: 'b' }, { a: { c: null } })).toEqual({ a: {} });
    expect(mergePatch('x', { a: 1 })).toEqual({ a: 1 });
  });
});
