// The waiting logic of issue 17 without sockets: PodAddDelivery and ZtunnelGaps over fake
// ztunnel connections (each answers the pods it was given, or dies), and the enroller on top of
// a fake ZDS sink built from them, with the fake addon.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PodEnroller } from '../../src/standalone/enroller.js';
import { PodStateStore } from '../../src/standalone/state-store.js';
import { NftablesInpodRules } from '../../src/rules/nftables-manager.js';
import { defaultRuleSettings } from '../../src/rules/settings.js';
import type { WorkloadInfo } from '../../src/zds/codec.js';
import type { FdSource } from '../../src/zds/connection.js';
import { ZdsError } from '../../src/zds/errors.js';
import { PodAddDelivery, type PodAddTarget } from '../../src/zds/pod-add-delivery.js';
import { PodRegistry } from '../../src/zds/registry.js';
import type { ZdsSink } from '../../src/zds/server.js';
import { ZtunnelGaps } from '../../src/zds/ztunnel-gaps.js';
import { FakeNetAddon } from '../fakes/fake-net-addon.js';

/** One fake ztunnel connection: records every pod it is given; acks now, later, or never. */
class FakeConnection implements PodAddTarget {
  readonly received: string[] = [];
  readonly #pending = new Map<string, { resolve(e: string): void; reject(err: Error): void }>();
  constructor(
    readonly id: number,
    private readonly answer: (uid: string) => string | 'hold' = () => '',
  ) {}

  addPod(uid: string): Promise<string> {
    this.received.push(uid);
    const a = this.answer(uid);
    if (a !== 'hold') return Promise.resolve(a);
    return new Promise((resolve, reject) => this.#pending.set(uid, { resolve, reject }));
  }

  ackAll(): void {
    for (const p of this.#pending.values()) p.resolve('');
    this.#pending.clear();
  }

  /** The connection closes: what is in flight fails as ZdsConnection fails it. */
  die(): void {
    for (const p of this.#pending.values())
      p.reject(new ZdsError('ZDS_CONNECTION_CLOSED', `ztunnel connection ${this.id} closed: ztunnel closed the connection`, true));
    this.#pending.clear();
  }
}

/** The server's side: the connection list, accept wake-ups, the gaps; a ZdsSink for the registry. */
class FakeZds implements ZdsSink {
  readonly connections: FakeConnection[] = [];
  readonly lines: Array<{ msg: string; goneMs?: number; waited?: number; failed?: number }> = [];
  readonly waits: Array<{ seconds: number; enrolled: boolean }> = [];
  readonly deletes: string[] = [];
  readonly gaps: ZtunnelGaps;
  readonly delivery: PodAddDelivery;
  #wake: Array<() => void> = [];
  #nextId = 1;

  constructor(waitMs: number) {
    const sink = new Writable({ write: (chunk: Buffer, _e, done) => void (this.lines.push(JSON.parse(chunk.toString())), done()) });
    this.gaps = new ZtunnelGaps(pino({ level: 'info' }, sink), (seconds, enrolled) => this.waits.push({ seconds, enrolled }));
    this.delivery = new PodAddDelivery({
      newest: () => this.connections.at(-1),
      nextConnection: () => new Promise((r) => this.#wake.push(r)),
      gaps: this.gaps,
      waitMs,
    });
  }

  connect(answer?: (uid: string) => string | 'hold'): FakeConnection {
    const conn = new FakeConnection(this.#nextId++, answer);
    this.connections.push(conn);
    this.gaps.connectionCount(this.connections.length);
    for (const w of this.#wake.splice(0)) w();
    return conn;
  }

  kill(conn: FakeConnection): void {
    this.connections.splice(this.connections.indexOf(conn), 1);
    this.gaps.connectionCount(this.connections.length); // close() reports before what was in flight fails
    conn.die();
  }

  podAdded(uid: string, info: WorkloadInfo, netns: FdSource): Promise<void> {
    return this.delivery.add(uid, info, netns);
  }

  async podDeleted(uid: string): Promise<void> {
    this.deletes.push(uid);
  }

  gapLines(): string[] {
    return this.lines.map((l) => l.msg).filter((m) => m.startsWith('ztunnel '));
  }
}

const INFO = { name: 'p', namespace: 'ns', serviceAccount: 'default' };
const NETNS: FdSource = { fd: 3, closed: false };
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const outcome = (p: Promise<unknown>): Promise<string> =>
  p.then(
    () => 'ok',
    (e: Error) => e.message,
  );

describe('PodAddDelivery: waiting for a ztunnel', () => {
  it("with waitMs 0 fails at once without a connection, with Istio's text", async () => {
    const zds = new FakeZds(0);
    await expect(zds.podAdded('a', INFO, NETNS)).rejects.toMatchObject({ code: 'ZDS_NO_CONNECTION', message: 'no ztunnel connection' });
    expect(zds.waits).toEqual([]);
  });

  it('a connected ztunnel gets the add at once; nothing waits', async () => {
    const zds = new FakeZds(1000);
    const conn = zds.connect();
    await zds.podAdded('a', INFO, NETNS);
    expect(conn.received).toEqual(['a']);
    expect(zds.waits).toEqual([]);
  });

  it('ztunnel restarted: 10 adds made in the gap are all answered by the next connection, each sent once, one gap line', async () => {
    const zds = new FakeZds(1000);
    const old = zds.connect();
    zds.kill(old);
    const adds = Array.from({ length: 10 }, (_, i) => zds.podAdded(`p${i}`, INFO, NETNS));
    await sleep(50);
    const fresh = zds.connect();
    expect(await Promise.all(adds.map(outcome))).toEqual(Array(10).fill('ok'));
    expect(old.received).toEqual([]);
    expect(fresh.received.sort()).toEqual(Array.from({ length: 10 }, (_, i) => `p${i}`).sort());
    expect(zds.waits.map((w) => w.enrolled)).toEqual(Array(10).fill(true));
    expect(zds.waits.every((w) => w.seconds >= 0.04 && w.seconds < 1)).toBe(true);
    expect(zds.gapLines()).toHaveLength(1);
    expect(zds.gapLines()[0]).toMatch(/^ztunnel gone for \d+ ms, 10 pods waited, all enrolled$/);
    const gone = zds.lines.find((l) => l.msg.startsWith('ztunnel gone'))!;
    expect(gone.goneMs).toBeGreaterThanOrEqual(45);
  });

  it('a connection that dies with adds in flight: they are answered by the next one, not failed', async () => {
    const zds = new FakeZds(1000);
    const dying = zds.connect(() => 'hold');
    const adds = Array.from({ length: 5 }, (_, i) => zds.podAdded(`p${i}`, INFO, NETNS));
    await sleep(5);
    expect(dying.received).toHaveLength(5);
    zds.kill(dying);
    await sleep(20);
    const next = zds.connect();
    expect(await Promise.all(adds.map(outcome))).toEqual(Array(5).fill('ok'));
    expect(next.received.sort()).toEqual(['p0', 'p1', 'p2', 'p3', 'p4']);
    expect(zds.gapLines()).toEqual([expect.stringMatching(/^ztunnel gone for \d+ ms, 5 pods waited, all enrolled$/)]);
  });

  it('with no ztunnel until the wait runs out: fails closed naming ztunnel; the gap line counts the failure', async () => {
    const zds = new FakeZds(60);
    zds.kill(zds.connect());
    const started = Date.now();
    await expect(zds.podAdded('a', INFO, NETNS)).rejects.toMatchObject({
      code: 'ZDS_NO_CONNECTION',
      retryable: true,
      message: 'no ztunnel connection (waited 60 ms for one; the pod stays registered for the next snapshot)',
    });
    expect(Date.now() - started).toBeGreaterThanOrEqual(55);
    expect(zds.gapLines()).toEqual([]); // the gap is not over yet
    zds.connect();
    expect(zds.gapLines()).toEqual([expect.stringMatching(/^ztunnel gone for \d+ ms, 1 pod waited, 0 enrolled, 1 failed closed$/)]);
    expect(zds.waits.map((w) => w.enrolled)).toEqual([false]);
  });

  it("a ztunnel that connects but does not ack within the wait: fails naming ztunnel's missing ack", async () => {
    const zds = new FakeZds(60);
    const adding = zds.podAdded('a', INFO, NETNS);
    await sleep(10);
    zds.connect(() => 'hold');
    await expect(adding).rejects.toMatchObject({
      code: 'ZDS_ACK_TIMEOUT',
      message: expect.stringMatching(/^ztunnel reconnected but did not acknowledge pod a within 60 ms/),
    });
  });

  it("an error ack from the next ztunnel fails the add with ztunnel's text (not retried)", async () => {
    const zds = new FakeZds(1000);
    const adding = zds.podAdded('a', INFO, NETNS);
    const conn = zds.connect(() => 'failure to start proxy : Bind');
    await expect(adding).rejects.toMatchObject({ code: 'ZDS_ACK_ERROR', message: 'ztunnel rejected pod a: failure to start proxy : Bind' });
    expect(conn.received).toEqual(['a']);
  });

  it('a replacement that dies too: the add goes on to the third connection, still within the bound', async () => {
    const zds = new FakeZds(1000);
    const adding = zds.podAdded('a', INFO, NETNS);
    const second = zds.connect(() => 'hold');
    await sleep(5);
    zds.kill(second);
    const third = zds.connect();
    expect(await outcome(adding)).toBe('ok');
    expect([second.received, third.received]).toEqual([['a'], ['a']]);
  });

  it('the newest connection dies while an older one lives (rolling update): its adds go to the older one at once', async () => {
    const zds = new FakeZds(1000);
    const older = zds.connect();
    const newest = zds.connect(() => 'hold');
    const adding = zds.podAdded('a', INFO, NETNS);
    await sleep(5);
    zds.kill(newest);
    expect(await outcome(adding)).toBe('ok');
    expect([newest.received, older.received]).toEqual([['a'], ['a']]);
    expect(zds.gapLines()).toEqual([
      'ztunnel connection lost with adds in flight, an older connection took them: 1 pod waited, all enrolled',
    ]);
  });

  it('the first connection ever: the line says so, only when adds waited', async () => {
    const quiet = new FakeZds(1000);
    quiet.connect();
    expect(quiet.gapLines()).toEqual([]);
    const zds = new FakeZds(1000);
    const adding = zds.podAdded('a', INFO, NETNS);
    zds.connect();
    await adding;
    expect(zds.gapLines()).toEqual(['ztunnel connected for the first time, 1 pod waited, all enrolled']);
  });
});

describe('PodEnroller over a fake ZDS sink: one pod waiting holds up nothing else', () => {
  let dir: string;
  let addon: FakeNetAddon;
  let zds: FakeZds;
  let enroller: PodEnroller;
  let registry: PodRegistry;

  const cniPod = (name: string) => ({
    uid: `uid-${name}`,
    name,
    namespace: 'shop',
    netnsPath: `/var/run/netns/${name}`,
    containerId: `c-${name}`,
    ips: ['10.0.0.1'],
  });

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'ztunnel-wait-'));
    addon = new FakeNetAddon();
    for (const name of ['a', 'b', 'c']) addon.addNetns(`/host/var/run/netns/${name}`);
    zds = new FakeZds(1000);
    registry = new PodRegistry(zds);
    const settings = defaultRuleSettings({ ipv6: false, dnsCapture: true });
    enroller = new PodEnroller({
      addon,
      rules: new NftablesInpodRules(addon, settings),
      registry,
      store: new PodStateStore(join(dir, 'run')),
      netnsRoot: '/host',
      excludeNamespaces: [],
    });
  });

  afterEach(() => {
    registry.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('while a pod waits for ztunnel, other pods are removed at once; it completes when ztunnel is back, enrolled once', async () => {
    const live = zds.connect();
    await enroller.add(cniPod('b'));
    zds.kill(live);
    const waiting = enroller.add(cniPod('a'));
    await sleep(10);
    expect(enroller.pendingAdd('uid-a')).toMatch(/^ztunnel has not acknowledged it/);
    await enroller.remove('uid-b'); // a DEL of another pod does not wait
    expect(zds.deletes).toEqual(['uid-b']);
    const back = zds.connect();
    await waiting;
    expect(back.received).toEqual(['uid-a']);
    expect(addon.namespaces.get('/host/var/run/netns/a')!.nftScripts).toHaveLength(1); // rules applied once
    expect(registry.has('uid-a')).toBe(true);
  });

  it('a pod whose wait ran out stays registered and recorded; the retried ADD completes', async () => {
    zds = new FakeZds(30);
    registry = new PodRegistry(zds);
    const settings = defaultRuleSettings({ ipv6: false, dnsCapture: true });
    const store = new PodStateStore(join(dir, 'run2'));
    enroller = new PodEnroller({
      addon,
      rules: new NftablesInpodRules(addon, settings),
      registry,
      store,
      netnsRoot: '/host',
      excludeNamespaces: [],
    });
    await expect(enroller.add(cniPod('c'))).rejects.toThrow(/^no ztunnel connection \(waited 30 ms/);
    expect(registry.has('uid-c')).toBe(true);
    expect(store.get('uid-c')).toBeDefined();
    const conn = zds.connect();
    await enroller.add(cniPod('c'));
    expect(conn.received).toEqual(['uid-c']);
    expect(addon.openFds).toBe(1); // one netns handle for the pod, the retry's duplicate closed
  });
});
