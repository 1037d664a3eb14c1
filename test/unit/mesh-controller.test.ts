// Kubernetes mode's state machine (MeshController: CNI ADD, informer events, start-up
// reconciliation) against the fake addon, a fake ZDS sink and in-memory caches, with Istio's
// default enablement selectors: fast, no API server, no sockets. The end-to-end versions run
// against a fake API server in test/integration/kube-mode.test.ts.
import type { V1Namespace, V1Pod } from '@kubernetes/client-node';
import { readFileSync } from 'node:fs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { systemError } from '../../src/addon/errors.js';
import type { NetnsHandle } from '../../src/addon/net-addon.js';
import type { PluginAddEvent } from '../../src/cni/protocol.js';
import { Enablement, parseEnablementSelectors } from '../../src/kube/enablement.js';
import { ANNOTATION_REDIRECTION, MeshController, NonRetryableError } from '../../src/kube/mesh-controller.js';
import { NftablesInpodRules } from '../../src/rules/nftables-manager.js';
import { defaultRuleSettings } from '../../src/rules/settings.js';
import { PodRegistry } from '../../src/zds/registry.js';
import { FakeNetAddon } from '../fakes/fake-net-addon.js';
import { FakeZdsSink } from '../fakes/fake-zds-sink.js';

const listing = readFileSync(new URL('../fixtures/default-inpod.listing.nft', import.meta.url), 'utf8');
const AMBIENT = { 'istio.io/dataplane-mode': 'ambient' };

function namespace(name: string, labels: Record<string, string> = {}): V1Namespace {
  return { metadata: { name, labels } };
}

interface PodSpec {
  namespace?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  ips?: string[];
  phase?: string;
}

function pod(name: string, spec: PodSpec = {}): V1Pod {
  const ips = spec.ips ?? ['10.1.0.5'];
  return {
    metadata: {
      name,
      namespace: spec.namespace ?? 'shop',
      uid: `uid-${name}`,
      labels: spec.labels ?? {},
      annotations: spec.annotations ?? {},
    },
    spec: { serviceAccountName: `sa-${name}`, containers: [] },
    status: { phase: spec.phase ?? 'Running', podIPs: ips.map((ip) => ({ ip })) },
  };
}

function addEvent(p: V1Pod, ips = ['10.1.0.5']): PluginAddEvent {
  const name = p.metadata!.name!;
  return {
    Netns: `/var/run/netns/${name}`,
    PodName: name,
    PodNamespace: p.metadata!.namespace!,
    IPs: ips.map((IP) => ({ Interface: 0, Address: { IP, Mask: '////AA==' }, Gateway: '' })),
  };
}

describe('MeshController (Kubernetes mode)', () => {
  let addon: FakeNetAddon;
  let zds: FakeZdsSink;
  let registry: PodRegistry;
  let pods: Map<string, V1Pod>;
  let namespaces: Map<string, V1Namespace>;
  let patches: Array<[string, Record<string, string | null>]>;
  let host: string[];
  let found: Map<string, string>;
  let controller: MeshController;

  const key = (p: V1Pod): string => `${p.metadata!.namespace}/${p.metadata!.name}`;
  const put = (p: V1Pod): V1Pod => (pods.set(key(p), p), p);
  const annotation = (p: V1Pod): string | undefined => pods.get(key(p))?.metadata?.annotations?.[ANNOTATION_REDIRECTION];

  beforeEach(() => {
    addon = new FakeNetAddon();
    addon.fresh.listing = listing;
    zds = new FakeZdsSink();
    registry = new PodRegistry(zds);
    pods = new Map();
    namespaces = new Map([
      ['shop', namespace('shop', AMBIENT)],
      ['plain', namespace('plain')],
    ]);
    patches = [];
    host = [];
    found = new Map();
    controller = new MeshController({
      addon,
      rules: new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: false })),
      registry,
      pods: { get: (ns, name) => pods.get(`${ns}/${name}`), list: () => [...pods.values()] },
      namespaces: { get: (name) => namespaces.get(name), list: () => [...namespaces.values()] },
      // The API server and the informer in one: the merge patch lands in the cache.
      api: {
        patchPodAnnotations: async (ns, name, annotations) => {
          patches.push([`${ns}/${name}`, annotations]);
          const current = pods.get(`${ns}/${name}`);
          if (!current) return false;
          const merged = { ...current.metadata!.annotations, ...annotations } as Record<string, string | null>;
          for (const [k, v] of Object.entries(merged)) if (v === null) delete merged[k];
          pods.set(`${ns}/${name}`, { ...current, metadata: { ...current.metadata, annotations: merged as Record<string, string> } });
          return true;
        },
      },
      host: {
        podEnrolled: async (uid, ips) => void host.push(`enrolled ${uid} ${ips.join(',')}`),
        podRemoved: async (uid, ips) => void host.push(`removed ${uid} ${ips.join(',')}`),
        syncEnrolled: async (list) => void host.push(`sync ${list.map((p) => p.uid).join(',')}`),
      },
      finder: {
        find: async (wanted) => {
          const out = new Map<string, NetnsHandle>();
          for (const { uid } of wanted) {
            const path = found.get(uid);
            if (path) out.set(uid, addon.openNetns(path));
          }
          return out;
        },
      },
      enablement: new Enablement({
        selectors: parseEnablementSelectors(undefined),
        excludeNamespaces: ['kube-system'],
        systemNamespace: 'istio-system',
      }),
      netnsRoot: '',
    });
  });

  afterEach(() => {
    controller.queue.stop();
    registry.close();
  });

  describe('CNI ADD', () => {
    it('an ambient pod: rules in its netns, ztunnel gets it with its service account, probe set entry from the event IPs, annotation enabled', async () => {
      const ns = addon.addNetns('/var/run/netns/web');
      const web = put(pod('web'));
      await controller.cniAdd(addEvent(web, ['10.1.0.9']));
      expect(ns.nftScripts).toHaveLength(1);
      expect(zds.calls).toEqual([
        { op: 'add', uid: 'uid-web', info: { name: 'web', namespace: 'shop', serviceAccount: 'sa-web' }, fdOpen: true },
      ]);
      expect(host).toEqual(['enrolled uid-web 10.1.0.9']);
      expect(patches).toEqual([['shop/web', { [ANNOTATION_REDIRECTION]: 'enabled' }]]);
    });

    it('a pod that does not match (not ambient, opted out, host network) is answered and left alone', async () => {
      addon.addNetns('/var/run/netns/plain');
      addon.addNetns('/var/run/netns/optout');
      const plain = put(pod('plain', { namespace: 'plain' }));
      const optOut = put(pod('optout', { labels: { 'istio.io/dataplane-mode': 'none' } }));
      const hostNet = put({ ...pod('hostnet'), spec: { containers: [], hostNetwork: true } });
      for (const p of [plain, optOut, hostNet]) await controller.cniAdd(addEvent(p));
      expect(addon.runs).toEqual([]);
      expect(zds.calls).toEqual([]);
      expect(patches).toEqual([]);
    });

    it('ztunnel refuses: the pod is annotated pending and the ADD fails retryably, with the rules in place', async () => {
      const ns = addon.addNetns('/var/run/netns/web');
      const web = put(pod('web'));
      zds.failAdd = (uid) => FakeZdsSink.rejected(uid);
      await expect(controller.cniAdd(addEvent(web))).rejects.toMatchObject({ code: 'ZDS_ACK_ERROR', retryable: true });
      expect(annotation(web)).toBe('pending');
      expect(ns.nftScripts).toHaveLength(1);
      expect(host).toEqual([]);
    });

    it('the rules cannot be applied: a non-retryable failure, no annotation, the pod not registered', async () => {
      addon.addNetns('/var/run/netns/web');
      const web = put(pod('web'));
      addon.failOn = (step) => (step.op === 'nft' ? systemError('EPERM', -1, 'nft', 'EPERM: operation not permitted') : undefined);
      const err = await controller.cniAdd(addEvent(web)).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(NonRetryableError);
      expect((err as Error).message).toMatch(/^shop\/web: applying in-pod rules: .*EPERM/);
      expect(patches).toEqual([]);
      expect(registry.has('uid-web')).toBe(false);
    });

    it('a pod the cache does not know yet fails only in an ambient namespace (the runtime retries)', async () => {
      await expect(controller.cniAdd(addEvent(pod('late')))).rejects.toThrow('pod shop/late not found in the informer cache');
      await expect(controller.cniAdd(addEvent(pod('late', { namespace: 'plain' })))).resolves.toBeUndefined();
      expect(addon.runs).toEqual([]);
    });
  });

  describe('informer events', () => {
    it('labelling a namespace ambient enrolls its running pods (netns found in /proc), and unlabelling takes them out', async () => {
      const ns = addon.addNetns('/var/run/netns/api');
      found.set('uid-api', '/var/run/netns/api');
      const api = put(pod('api', { namespace: 'plain' }));
      controller.queue.resume();
      const labelled = namespace('plain', AMBIENT);
      namespaces.set('plain', labelled);
      controller.namespaceUpdated(namespace('plain'), labelled);
      await controller.queue.idle();
      expect(annotation(api)).toBe('enabled');
      expect(zds.ops()).toEqual(['add uid-api']);

      namespaces.set('plain', namespace('plain'));
      controller.namespaceUpdated(labelled, namespace('plain'));
      await controller.queue.idle();
      expect(annotation(api)).toBeUndefined();
      expect(zds.ops()).toEqual(['add uid-api', 'del uid-api']);
      expect(ns.nftScripts.at(-1)).toMatch(/^delete table inet/); // not a delete: the pod lives on, so its rules go
      expect(host).toEqual(['enrolled uid-api 10.1.0.5', 'removed uid-api 10.1.0.5']);
    });

    it('a namespace update that does not change whether it matches does nothing', async () => {
      put(pod('api', { namespace: 'plain' }));
      controller.queue.resume();
      controller.namespaceUpdated(namespace('plain'), namespace('plain', { team: 'a' }));
      await controller.queue.idle();
      expect(zds.calls).toEqual([]);
    });

    it("a pod that terminates is removed with the old object's IPs, without touching its (gone) netns", async () => {
      const ns = addon.addNetns('/var/run/netns/job');
      const job = put(pod('job'));
      await controller.cniAdd(addEvent(job));
      const enrolled = pods.get(key(job))!;
      const done = put({ ...enrolled, status: { phase: 'Succeeded', podIPs: [] } });
      controller.queue.resume();
      controller.podUpdated(enrolled, done);
      await controller.queue.idle();
      expect(host.at(-1)).toBe('removed uid-job 10.1.0.5');
      expect(zds.ops().at(-1)).toBe('del uid-job');
      expect(ns.nftScripts).toHaveLength(1); // only the apply
      expect(annotation(job)).toBeUndefined();
    });

    it('a pending pod is retried until ztunnel takes it, then marked enabled', async () => {
      addon.addNetns('/var/run/netns/web');
      const web = put(pod('web'));
      let refusals = 2;
      zds.failAdd = () => (refusals-- > 0 ? FakeZdsSink.noConnection() : undefined);
      await expect(controller.cniAdd(addEvent(web))).rejects.toMatchObject({ code: 'ZDS_NO_CONNECTION' });
      controller.queue.resume();
      const pending = pods.get(key(web))!;
      controller.podUpdated(pending, pending);
      await controller.queue.idle();
      expect(annotation(web)).toBe('enabled');
      expect(zds.ops()).toEqual(['add uid-web', 'add uid-web', 'add uid-web']);
    });

    it('a deleted pod that was enrolled is removed; a deleted pod that never was is ignored', async () => {
      addon.addNetns('/var/run/netns/web');
      const web = put(pod('web'));
      await controller.cniAdd(addEvent(web));
      const enrolled = pods.get(key(web))!;
      pods.delete(key(web));
      controller.queue.resume();
      controller.podDeleted(enrolled);
      controller.podDeleted(pod('stranger', { namespace: 'plain' }));
      await controller.queue.idle();
      expect(zds.ops()).toEqual(['add uid-web', 'del uid-web']);
      expect(registry.has('uid-web')).toBe(false);
    });
  });

  describe('start-up reconciliation', () => {
    it('re-fills the probe sets, finds each enrolled pod in /proc, repairs drifted rules, and registers all for the first snapshot', async () => {
      const good = addon.addNetns('/var/run/netns/good');
      const drifted = addon.addNetns('/var/run/netns/drifted');
      good.listing = listing;
      drifted.listing = listing.replace(/\n.*redirect to :15006/, '');
      for (const ns of [good, drifted]) {
        ns.rules = [{ family: 4, mark: 0x111, mask: 0xfff, priority: 32764, table: 100 }];
        ns.routes = [{ family: 4, dst: '0.0.0.0', dstLen: 0, type: 2, dev: 'lo', table: 100 }];
      }
      const enabled = { annotations: { [ANNOTATION_REDIRECTION]: 'enabled' } };
      for (const name of ['good', 'drifted', 'lost']) put(pod(name, enabled));
      put(pod('other')); // not enrolled: not part of the snapshot
      found.set('uid-good', '/var/run/netns/good');
      found.set('uid-drifted', '/var/run/netns/drifted');

      expect(await controller.reconcileStartup()).toEqual({ pods: 3, withNetns: 2, repaired: 1 });
      expect(host).toEqual(['sync uid-good,uid-drifted,uid-lost']);
      expect(good.nftScripts).toEqual([]);
      expect(drifted.nftScripts).toHaveLength(1);
      expect(registry.snapshot().map((e) => [e.uid, e.netns !== undefined])).toEqual([
        ['uid-good', true],
        ['uid-drifted', true],
        ['uid-lost', false], // goes out as keep
      ]);
      expect(zds.calls).toEqual([]);
    });
  });
});
