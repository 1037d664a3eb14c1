// Privileged: the demo's building blocks, assembled like the demo does but without the agent.
// A throw-away node namespace; three pod namespaces wired by the real `bridge` + `host-local`
// (+ `loopback`) CNI plugins, exec'd by CniRuntime inside the node namespace; the in-pod
// nftables rules applied by NftablesInpodRules; the pods handed over a real ZDS server to the
// ztunnel stand-in, which binds 15001/15006/15053 in each pod. Then real traffic: pod → pod
// TCP through both stand-in listeners with the client IP preserved, DNS over UDP and TCP
// answered by 15053. Finally everything is torn down and nothing may be left: namespaces,
// links, IPAM reservations, fds.
import dgram from 'node:dgram';
import { closeSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { NativeNetAddon, type NetnsHandle } from '../../src/addon/net-addon.js';
import { fdCount } from '../helpers/netns-files.js';
import { SeqpacketListener, type SeqpacketSocket } from '../../src/addon/seqpacket.js';
import { CniPluginError, CniRuntime, type CniResult } from '../../src/demo/cni-runtime.js';
import { dnsQuery, EchoApp, tcpExchange } from '../../src/demo/demo-apps.js';
import { answerDnsQuery, buildDnsQuery, DNS_RCODE, DNS_TYPE_AAAA, parseDnsQuery, parseDnsResponse } from '../../src/demo/ztunnel/dns.js';
import { ZtunnelStandIn, type StandInEvent } from '../../src/demo/ztunnel/zds-client.js';
import { INPOD_MARK } from '../../src/rules/constants.js';
import { NftablesInpodRules } from '../../src/rules/nftables-manager.js';
import { defaultRuleSettings, NO_OVERRIDES } from '../../src/rules/settings.js';
import { decodeAck, encodeRequest } from '../../src/zds/codec.js';
import { PodRegistry } from '../../src/zds/registry.js';
import { ZdsServer } from '../../src/zds/server.js';
import {
  createNetns,
  deleteNetns,
  execIn,
  ip,
  ipIn,
  privilegedSkipReason,
  requirePrivilegedInCi,
  type TestNetns,
} from '../helpers/netns.js';

requirePrivilegedInCi();

const PLUGIN_DIRS = ['/usr/lib/cni', '/opt/cni/bin'];
const NEEDED_PLUGINS = ['bridge', 'host-local', 'loopback'];

function pluginSkipReason(): string | undefined {
  const missing = NEEDED_PLUGINS.filter((p) => !PLUGIN_DIRS.some((d) => existsSync(join(d, p))));
  if (missing.length === 0) return undefined;
  const reason = `needs the CNI plugins ${missing.join(', ')} (apt-get install containernetworking-plugins)`;
  if (process.env['CI']) throw new Error(`privileged tests cannot run in CI: ${reason}`);
  return reason;
}

const skipReason = privilegedSkipReason() ?? pluginSkipReason();

const SUBNET_THIRD = 100 + (process.pid % 100);
const SUBNET = `198.18.${SUBNET_THIRD}.0/24`;
const GATEWAY = `198.18.${SUBNET_THIRD}.1`;
/** Nothing answers here: only the rules' DNS redirect makes queries to it work. */
const CLUSTER_DNS = '10.96.0.10';
const APP_PORT = 8080;
const CASE_TIMEOUT_MS = 30_000;

interface DemoPod {
  key: 'a' | 'b' | 'c';
  ns: TestNetns;
  uid: string;
  name: string;
  containerId: string;
  /** Opened by the test (rules, traffic); the registry gets its own handle. */
  handle: NetnsHandle;
  result: CniResult;
  ip: string;
  app: EchoApp | undefined;
}

/** One raw datagram from inside `ns` to the cluster DNS address; the reply, or undefined. */
async function udpRaw(addon: NativeNetAddon, ns: NetnsHandle, bytes: Buffer, waitMs: number): Promise<Buffer | undefined> {
  const [{ fd }] = await addon.run(ns, [{ op: 'socket', family: 4, type: 'udp', bindAddress: '0.0.0.0', bindPort: 0 }] as const);
  const sock = dgram.createSocket('udp4');
  try {
    sock.bind({ fd });
  } catch (err) {
    closeSync(fd);
    throw err;
  }
  try {
    return await new Promise<Buffer | undefined>((resolve) => {
      const timer = setTimeout(() => resolve(undefined), waitMs);
      sock.on('message', (msg) => {
        clearTimeout(timer);
        resolve(msg);
      });
      sock.on('error', () => undefined);
      sock.send(bytes, 53, CLUSTER_DNS);
    });
  } finally {
    await new Promise<void>((resolve) => sock.close(() => resolve()));
  }
}

function hostLinks(): string[] {
  return ip(['-o', 'link', 'show'])
    .split('\n')
    .map((l) => l.split(':')[1]?.trim() ?? '')
    .filter(Boolean)
    .sort();
}

function ourNamespaces(): string[] {
  return ip(['netns', 'list'])
    .split('\n')
    .map((l) => l.split(' ')[0] ?? '')
    .filter((n) => n.startsWith(`ana${process.pid}-`));
}

async function settleFds(expected: number, ms = 3_000): Promise<number> {
  const deadline = Date.now() + ms;
  for (;;) {
    const n = fdCount();
    if (n <= expected || Date.now() > deadline) return n;
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('ztunnel stand-in DNS codec (no privileges)', () => {
  const records = new Map([['web.demo', '198.18.0.7']]);

  it('answers A for a mapped .demo name, NODATA for other types, NXDOMAIN otherwise', () => {
    const a = parseDnsResponse(answerDnsQuery(buildDnsQuery(7, 'Web.Demo.'), records).response!);
    expect(a).toMatchObject({ id: 7, rcode: DNS_RCODE.NOERROR, question: { name: 'Web.Demo', type: 1 } });
    expect(a.answers.map((x) => x.data)).toEqual(['198.18.0.7']);
    const aaaa = parseDnsResponse(answerDnsQuery(buildDnsQuery(8, 'web.demo', DNS_TYPE_AAAA), records).response!);
    expect(aaaa).toMatchObject({ rcode: DNS_RCODE.NOERROR, answers: [] });
    for (const name of ['nothing.demo', 'web.demo.example', 'example.com']) {
      const v = answerDnsQuery(buildDnsQuery(9, name), records);
      expect(v.answer).toBe('NXDOMAIN');
      expect(parseDnsResponse(v.response!)).toMatchObject({ id: 9, rcode: DNS_RCODE.NXDOMAIN, answers: [] });
    }
  });

  it('rejects malformed queries without throwing', () => {
    const good = buildDnsQuery(0x1234, 'web.demo');
    // Too short for a header, or a response: dropped.
    expect(answerDnsQuery(Buffer.from([1, 2, 3]), records).response).toBeUndefined();
    const response = Buffer.from(good);
    response.writeUInt16BE(0x8000, 2);
    expect(answerDnsQuery(response, records).response).toBeUndefined();
    // Readable header, broken body: FORMERR with the query's id.
    const broken = [
      good.subarray(0, 14), // name runs off the end
      Buffer.concat([good.subarray(0, 12), Buffer.from([0xc0, 0x0c, 0, 1, 0, 1])]), // pointer loop
      Buffer.concat([good.subarray(0, 12), Buffer.from([0x40, 0])]), // reserved label type
      Buffer.concat([good.subarray(0, 12), Buffer.from([3, 0x61, 0x62, 0x63, 0])]), // no type/class
      (() => {
        const b = Buffer.from(good);
        b.writeUInt16BE(2, 4);
        return b;
      })(), // two questions
      Buffer.concat([
        good.subarray(0, 12),
        ...Array.from({ length: 5 }, () => Buffer.concat([Buffer.from([63]), Buffer.alloc(63, 0x61)])),
        Buffer.from([0, 0, 1, 0, 1]),
      ]), // > 255 bytes
    ];
    for (const msg of broken) {
      const v = answerDnsQuery(msg, records);
      expect(v.answer).toBe('FORMERR');
      expect(parseDnsResponse(v.response!)).toMatchObject({ id: 0x1234, rcode: DNS_RCODE.FORMERR });
    }
    const notQuery = Buffer.from(good);
    notQuery.writeUInt16BE(0x2800, 2); // opcode UPDATE
    expect(parseDnsResponse(answerDnsQuery(notQuery, records).response!).rcode).toBe(DNS_RCODE.NOTIMP);
    expect(parseDnsQuery(good).question).toEqual({ name: 'web.demo', type: 1, class: 1 });
  });
});

describe.skipIf(skipReason)(
  `demo parts: CNI runtime + ztunnel stand-in + in-pod rules${skipReason ? ` (skipped: ${skipReason})` : ''}`,
  () => {
    let addon: NativeNetAddon;
    let fdsBefore = 0;
    let linksBefore: string[] = [];
    let tmp: string | undefined;
    let nodeNs: TestNetns | undefined;
    let node: NetnsHandle | undefined;
    let cni: CniRuntime;
    let server: ZdsServer | undefined;
    let registry: PodRegistry | undefined;
    let standIn: ZtunnelStandIn | undefined;
    const pods: DemoPod[] = [];
    const namespaces: TestNetns[] = [];
    const logs: string[] = [];
    const bridgeName = `anb${process.pid}`;
    const networkName = `ana-demo-${process.pid}`;
    let dataDir = '';
    /** A fourth pod (no CNI) for the pending/retry and reconnect cases. */
    const extraUid = `uid-${process.pid}-d`;
    const extraHandles: NetnsHandle[] = [];
    let torndown = false;

    const log = (line: string): void => {
      logs.push(line);
      if (process.env['DEMO_PARTS_LOG']) console.log(line);
    };
    const pod = (key: DemoPod['key']): DemoPod => {
      const p = pods.find((x) => x.key === key);
      if (!p) throw new Error(`pod ${key} was not set up`);
      return p;
    };
    const cniPod = (p: DemoPod) => ({
      containerId: p.containerId,
      netnsPath: p.ns.path,
      args: { K8S_POD_NAMESPACE: 'demo', K8S_POD_NAME: p.name, K8S_POD_INFRA_CONTAINER_ID: p.containerId, K8S_POD_UID: p.uid },
    });
    const eventsOf = (kind: StandInEvent['kind'], p: DemoPod): StandInEvent[] =>
      (standIn?.events ?? []).filter((e) => e.kind === kind && e.uid === p.uid);

    beforeAll(async () => {
      addon = new NativeNetAddon();
      const rules = new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: false }));
      await rules.warmUp(); // worker threads, libnftables init: paid before the fd baseline
      fdsBefore = fdCount();
      linksBefore = hostLinks();
      tmp = mkdtempSync(join(tmpdir(), 'ana-demo-parts-'));
      dataDir = join(tmp, 'ipam');

      nodeNs = createNetns('node');
      namespaces.push(nodeNs);
      node = addon.openNetns(nodeNs.path);
      const conflist = {
        cniVersion: '1.0.0',
        name: networkName,
        plugins: [
          {
            type: 'bridge',
            bridge: bridgeName,
            isGateway: true,
            isDefaultGateway: true,
            ipMasq: false,
            hairpinMode: false,
            ipam: { type: 'host-local', ranges: [[{ subnet: SUBNET, gateway: GATEWAY }]], dataDir },
          },
          { type: 'loopback' },
        ],
      };
      cni = new CniRuntime({ addon, nodeNetns: node, pluginDirs: PLUGIN_DIRS.filter((d) => existsSync(d)), conflist, log });

      for (const key of ['a', 'b', 'c'] as const) {
        const ns = createNetns(`p${key}`);
        namespaces.push(ns);
        const p: DemoPod = {
          key,
          ns,
          uid: `uid-${process.pid}-${key}`,
          name: `pod-${key}`,
          containerId: `sandbox${process.pid}${key}`,
          handle: addon.openNetns(ns.path),
          result: {},
          ip: '',
          app: undefined,
        };
        pods.push(p);
        p.result = await cni.add(cniPod(p));
        p.ip = (p.result.ips?.[0]?.address ?? '').split('/')[0] ?? '';
      }

      // What the agent would do per pod: rules in the pod, then the pod to ztunnel over ZDS.
      const socketPath = join(tmp, 'zds', 'ztunnel.sock');
      const srv: ZdsServer = new ZdsServer({ socketPath, snapshot: () => reg.snapshot() });
      const reg: PodRegistry = new PodRegistry(srv);
      server = srv;
      registry = reg;
      srv.start();
      standIn = new ZtunnelStandIn({
        socketPath,
        addon,
        dnsRecords: { 'web.demo': pod('b').ip, 'db.demo': pod('c').ip },
        log,
        upstreamConnectTimeoutMs: 3_000,
        pendingRetryMs: 300,
      }).start();
      await standIn.waitFor(() => standIn?.ready === true, 5_000, 'stand-in ready (snapshot_sent)');
      for (const p of pods) {
        await rules.apply(p.handle, NO_OVERRIDES);
        await reg.add({ uid: p.uid, name: p.name, namespace: 'demo', serviceAccount: 'default' }, addon.openNetns(p.ns.path));
        p.app = await EchoApp.start(addon, p.handle, { label: `app-${p.key}`, port: APP_PORT });
      }
    });

    /** Idempotent, best effort, bounded: also runs after a failed setup or a failed test. */
    async function teardown(): Promise<void> {
      if (torndown) return;
      torndown = true;
      for (const p of [...pods].reverse()) {
        try {
          if (cni?.cachedResult(cniPod(p))) await cni.del(cniPod(p));
        } catch (err) {
          log(`teardown: CNI DEL ${p.name}: ${(err as Error).message}`);
        }
        await registry?.delete(p.uid).catch(() => undefined);
        await p.app?.close();
        p.handle.close();
      }
      await registry?.delete(extraUid).catch(() => undefined);
      for (const h of extraHandles) h.close();
      await standIn?.stop();
      server?.close();
      registry?.close();
      node?.close();
      for (const ns of namespaces) deleteNetns(ns);
      if (tmp) rmSync(tmp, { recursive: true, force: true });
    }

    afterAll(async () => {
      await teardown();
    });

    it(
      'CNI ADD gave every pod an address on the bridge subnet and a default route to the gateway',
      async () => {
        const addresses = pods.map((p) => p.ip);
        expect(new Set(addresses).size).toBe(3);
        for (const p of pods) {
          expect(p.ip).toMatch(new RegExp(`^198\\.18\\.${SUBNET_THIRD}\\.\\d+$`));
          expect(p.result.ips?.[0]).toMatchObject({ gateway: GATEWAY });
          expect(p.result.interfaces?.map((i) => i.name)).toContain('eth0');
          expect(ipIn(p.ns.name, ['-4', '-o', 'addr', 'show', 'dev', 'eth0'])).toContain(`${p.ip}/24`);
          expect(ipIn(p.ns.name, ['-4', 'route', 'show', 'default'])).toContain(`default via ${GATEWAY} dev eth0`);
          // The chained loopback plugin ran and passed the bridge's result on (prevResult).
          expect(ipIn(p.ns.name, ['-o', 'link', 'show', 'lo'])).toMatch(/[<,]UP[,>]/);
          // IPAM stayed in the test's own dataDir.
          expect(existsSync(join(dataDir, networkName, p.ip))).toBe(true);
          await cni.check(cniPod(p));
        }
        // The bridge and the host ends of the veths live in the node namespace, not on the machine.
        expect(ipIn(nodeNs!.name, ['-o', 'link', 'show', 'type', 'bridge'])).toContain(bridgeName);
        expect(ipIn(nodeNs!.name, ['-4', '-o', 'addr', 'show', 'dev', bridgeName])).toContain(`${GATEWAY}/24`);
        expect(hostLinks()).toEqual(linksBefore);
      },
      CASE_TIMEOUT_MS,
    );

    it(
      'reports a failing plugin with its CNI error and name; DEL without a cached result cleans up after it',
      async () => {
        // An IPAM range of one address that is already taken: the bridge plugin fails after it made the veth.
        const badDataDir = join(tmp!, 'ipam-bad');
        const badNetwork = `${networkName}-bad`;
        const onlyIp = `198.18.${SUBNET_THIRD}.250`;
        mkdirSync(join(badDataDir, badNetwork), { recursive: true });
        writeFileSync(join(badDataDir, badNetwork, onlyIp), 'someone-else\neth0');
        const broken = new CniRuntime({
          addon,
          nodeNetns: node!,
          pluginDirs: PLUGIN_DIRS.filter((d) => existsSync(d)),
          conflist: {
            cniVersion: '1.0.0',
            name: badNetwork,
            plugins: [
              {
                type: 'bridge',
                bridge: `${bridgeName}x`,
                ipam: { type: 'host-local', ranges: [[{ subnet: SUBNET, rangeStart: onlyIp, rangeEnd: onlyIp }]], dataDir: badDataDir },
              },
            ],
          },
          log,
        });
        const ns = createNetns('px');
        namespaces.push(ns);
        const victim = { containerId: `bad${process.pid}`, netnsPath: ns.path, args: { K8S_POD_NAMESPACE: 'demo', K8S_POD_NAME: 'pod-x' } };
        const err = await broken.add(victim).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(CniPluginError);
        expect(err).toMatchObject({
          command: 'ADD',
          plugin: 'bridge',
          exitCode: 1,
          msg: expect.stringMatching(/no IP addresses available/),
        });
        expect(typeof (err as CniPluginError).code).toBe('number');
        expect((err as Error).message).toMatch(/CNI ADD failed in plugin "bridge".*code \d+: .*no IP addresses available/);
        expect(broken.cachedResult(victim)).toBeUndefined();
        expect(ipIn(ns.name, ['-o', 'link', 'show'])).toContain('eth0'); // what the failed ADD left
        await broken.del(victim); // what a runtime does after a failed ADD: DEL, with no prevResult
        expect(ipIn(ns.name, ['-o', 'link', 'show']).split('\n').filter(Boolean)).toHaveLength(1); // only lo
        expect(
          () =>
            new CniRuntime({
              addon,
              nodeNetns: node!,
              pluginDirs: ['/usr/lib/cni'],
              conflist: { cniVersion: '1.0.0', name: 'x', plugins: [{ type: 'no-such-plugin' }] },
            }),
        ).toThrow(/no-such-plugin.*not found/);
        expect(
          () =>
            new CniRuntime({
              addon,
              nodeNetns: node!,
              pluginDirs: ['/usr/lib/cni'],
              conflist: { cniVersion: '1.0.0', name: 'x', plugins: [{ type: '../bridge' }] },
            }),
        ).toThrow(/plugin file name/);
      },
      CASE_TIMEOUT_MS,
    );

    it('the stand-in runs every pod, with its listeners bound inside the pod netns and marked 0x539', () => {
      const running = standIn!.pods();
      expect([...running.keys()].sort()).toEqual(pods.map((p) => p.uid).sort());
      for (const p of pods) {
        expect(running.get(p.uid)).toMatchObject({ name: p.name, state: 'running', netns: { ino: p.handle.ino, dev: p.handle.dev } });
        const mark = `fwmark:0x${INPOD_MARK.toString(16)}`;
        const tcp = execIn(p.ns.name, ['ss', '-Htlne']).split('\n');
        for (const where of ['0.0.0.0:15001', '0.0.0.0:15006', '127.0.0.1:15053']) {
          const line = tcp.find((l) => l.includes(`${where} `));
          expect(line, `${p.name}: tcp ${where}`).toBeDefined();
          expect(line).toContain(mark);
        }
        expect(
          tcp.find((l) => l.includes(`0.0.0.0:${APP_PORT} `)),
          `${p.name}: app`,
        ).not.toContain('fwmark');
        const udp = execIn(p.ns.name, ['ss', '-Hulne'])
          .split('\n')
          .find((l) => l.includes('127.0.0.1:15053 '));
        expect(udp, `${p.name}: udp 15053`).toContain(mark);
      }
    });

    for (const [from, to] of [
      ['a', 'b'],
      ['b', 'c'],
      ['c', 'a'],
    ] as const) {
      it(
        `pod-${from} → pod-${to}:${APP_PORT} goes out through ${from}'s 15001 and in through ${to}'s 15006, client IP preserved`,
        async () => {
          const src = pod(from);
          const dst = pod(to);
          const payload = `hello-${from}-${to}-${Date.now()}\n`;
          const x = await tcpExchange(addon, src.handle, { address: dst.ip, port: APP_PORT, payload });
          // The bytes came back, and the app believed it talked to the destination directly.
          expect(x.echoed).toBe(payload);
          expect(x.remoteAddress).toBe(dst.ip);
          expect(x.localAddress).toBe(src.ip);
          // The destination app saw the source pod's IP (the stand-in bound the upstream to it).
          expect(x.banner).toMatch(new RegExp(`^app-${to} saw `));
          expect(x.peerSeen).toBe(src.ip);

          const out = eventsOf('outbound', src).find((e) => e.from === `${src.ip}:${x.localPort}`);
          expect(out, `outbound event in pod-${from}`).toMatchObject({
            pod: src.name,
            listener: 'tcp 0.0.0.0:15001',
            originalDst: `${dst.ip}:${APP_PORT}`,
          });
          expect(out?.error).toBeUndefined();
          expect(out?.upstreamFrom).toMatch(new RegExp(`^${src.ip.replace(/\./g, '\\.')}:\\d+$`));
          // The hop between the pods is the source stand-in's upstream, captured again at the destination.
          const inb = eventsOf('inbound', dst).find((e) => e.from === out?.upstreamFrom);
          expect(inb, `inbound event in pod-${to}`).toMatchObject({
            pod: dst.name,
            listener: 'tcp 0.0.0.0:15006',
            originalDst: `${dst.ip}:${APP_PORT}`,
            clientIp: src.ip,
          });
          expect(inb?.error).toBeUndefined();
          // ...and the app's accept() returned exactly the destination stand-in's spoofed upstream.
          expect(dst.app?.peers.map((p) => `${p.remoteAddress}:${p.remotePort}`)).toContain(inb?.upstreamFrom);
          expect(inb?.upstreamFrom?.startsWith(`${src.ip}:`)).toBe(true);
        },
        CASE_TIMEOUT_MS,
      );
    }

    it(
      'DNS to the cluster DNS address is answered by the stand-in on 15053 (UDP and TCP)',
      async () => {
        const a = pod('a');
        const before = eventsOf('dns', a).length;
        const udp = await dnsQuery(addon, a.handle, { server: CLUSTER_DNS, name: 'web.demo', transport: 'udp' });
        expect(udp.rcode).toBe(DNS_RCODE.NOERROR);
        expect(udp.answers.map((r) => r.data)).toEqual([pod('b').ip]);
        const tcp = await dnsQuery(addon, a.handle, { server: CLUSTER_DNS, name: 'db.demo', transport: 'tcp' });
        expect(tcp.answers.map((r) => r.data)).toEqual([pod('c').ip]);
        const nx = await dnsQuery(addon, a.handle, { server: CLUSTER_DNS, name: 'example.com', transport: 'udp' });
        expect(nx).toMatchObject({ rcode: DNS_RCODE.NXDOMAIN, answers: [] });

        const events = eventsOf('dns', a).slice(before);
        expect(events).toEqual([
          expect.objectContaining({
            transport: 'udp',
            listener: 'udp 127.0.0.1:15053',
            name: 'web.demo',
            answer: pod('b').ip,
            from: expect.stringMatching(new RegExp(`^${a.ip}:`)),
          }),
          expect.objectContaining({
            transport: 'tcp',
            listener: 'tcp 127.0.0.1:15053',
            name: 'db.demo',
            answer: pod('c').ip,
            originalDst: `${CLUSTER_DNS}:53`,
          }),
          expect.objectContaining({ transport: 'udp', name: 'example.com', answer: 'NXDOMAIN' }),
        ]);
        // Only pod-a's stand-in saw them.
        for (const other of [pod('b'), pod('c')]) expect(eventsOf('dns', other)).toEqual([]);
      },
      CASE_TIMEOUT_MS,
    );

    it(
      'malformed DNS datagrams are dropped or answered FORMERR, and the stand-in keeps answering',
      async () => {
        const a = pod('a');
        expect(await udpRaw(addon, a.handle, Buffer.from('garbage'), 300)).toBeUndefined();
        const twoQuestions = buildDnsQuery(0x4242, 'web.demo');
        twoQuestions.writeUInt16BE(2, 4);
        const reply = await udpRaw(addon, a.handle, twoQuestions, 3_000);
        expect(reply && parseDnsResponse(reply)).toMatchObject({ id: 0x4242, rcode: DNS_RCODE.FORMERR });
        const ok = await dnsQuery(addon, a.handle, { server: CLUSTER_DNS, name: 'web.demo', transport: 'udp' });
        expect(ok.answers.map((r) => r.data)).toEqual([pod('b').ip]);
      },
      CASE_TIMEOUT_MS,
    );

    it(
      'a bind failure is acked "failure to start proxy", kept pending, and retried until it starts',
      async () => {
        const ns = createNetns('pd');
        namespaces.push(ns);
        const handle = addon.openNetns(ns.path);
        extraHandles.push(handle);
        // Something else already holds 15001 in this pod (no SO_REUSEPORT): the stand-in's bind fails.
        const [{ fd: blocker }] = await addon.run(handle, [
          { op: 'socket', family: 4, type: 'tcp', bindAddress: '0.0.0.0', bindPort: 15001, listen: 1 },
        ] as const);
        let blockerOpen = true;
        try {
          await expect(
            registry!.add({ uid: extraUid, name: 'pod-d', namespace: 'demo', serviceAccount: 'default' }, addon.openNetns(ns.path)),
          ).rejects.toMatchObject({ code: 'ZDS_ACK_ERROR', message: expect.stringMatching(/failure to start proxy : .*EADDRINUSE/) });
          expect(standIn!.pods().get(extraUid)).toMatchObject({ state: 'pending', error: expect.stringContaining('EADDRINUSE') });
          expect(standIn!.ready).toBe(false);
          // Nothing of the failed start stayed bound (one addon job: the earlier binds were closed).
          expect(execIn(ns.name, ['ss', '-Hlun'])).not.toContain(':15053');
          closeSync(blocker);
          blockerOpen = false;
          await standIn!.waitFor(() => standIn!.pods().get(extraUid)?.state === 'running', 5_000, 'pending pod retried');
          expect(standIn!.ready).toBe(true);
          expect(execIn(ns.name, ['ss', '-Htln'])).toMatch(/0\.0\.0\.0:15001 /);
          // The sandbox is re-created (same UID, another netns): the old proxy stops, a new one starts.
          const recreated = createNetns('pe');
          namespaces.push(recreated);
          const fresh = addon.openNetns(recreated.path);
          const freshIdentity = { ino: fresh.ino, dev: fresh.dev };
          await registry!.add({ uid: extraUid, name: 'pod-d', namespace: 'demo', serviceAccount: 'default' }, fresh);
          expect(standIn!.pods().get(extraUid)).toMatchObject({ state: 'running', netns: freshIdentity });
          expect(execIn(ns.name, ['ss', '-Htln'])).not.toMatch(/:15001 /);
          expect(execIn(recreated.name, ['ss', '-Htln'])).toMatch(/0\.0\.0\.0:15001 /);
        } finally {
          if (blockerOpen) closeSync(blocker);
        }
      },
      CASE_TIMEOUT_MS,
    );

    it(
      'reconnects when ZDS restarts: the new snapshot keeps the live pods and drops the one deleted meanwhile',
      async () => {
        const before = new Map([...standIn!.pods()].map(([uid, p]) => [uid, p.since]));
        server!.close(); // the agent goes away: the stand-in sees EOF and keeps retrying
        await standIn!.waitFor(() => !standIn!.connected, 5_000, 'disconnect seen');
        await registry!.delete(extraUid); // no ztunnel connected: only the next snapshot can tell it
        expect(standIn!.pods().has(extraUid)).toBe(true);
        server!.start();
        await standIn!.waitFor(
          () => standIn!.connectionCount === 2 && standIn!.ready && !standIn!.pods().has(extraUid),
          5_000,
          'reconnected and reconciled',
        );
        // Same netns re-added: the running proxies were kept as they were (not restarted).
        for (const p of pods) expect(standIn!.pods().get(p.uid)?.since).toBe(before.get(p.uid));
        const dropped = namespaces.find((n) => n.name.includes('-pe'));
        expect(execIn(dropped!.name, ['ss', '-Htln'])).not.toMatch(/:15001 /);
        const x = await tcpExchange(addon, pod('a').handle, { address: pod('b').ip, port: APP_PORT, payload: 'after-reconnect\n' });
        expect(x).toMatchObject({ echoed: 'after-reconnect\n', peerSeen: pod('a').ip });
      },
      CASE_TIMEOUT_MS,
    );

    it(
      'acts like ztunnel on bad ZDS input: read errors end the connection (reconnect), rule violations are fatal',
      async () => {
        const socketPath = join(tmp!, 'zds-bad', 'ztunnel.sock');
        const conns: SeqpacketSocket[] = [];
        const inbox: Array<{ conn: number; data: Buffer; eof: boolean }> = [];
        const listener = SeqpacketListener.listen(socketPath, (sock) => {
          const conn = conns.push(sock) - 1;
          sock.handlers = {
            onDatagram: (d) => {
              for (const fd of d.fds) sock.closeForeignFd(fd);
              inbox.push({ conn, data: d.data, eof: d.eof });
            },
            onError: () => undefined,
          };
        });
        let fatal: string | undefined;
        const bad = new ZtunnelStandIn({ socketPath, addon, reconnectMaxMs: 100, onFatal: (why) => (fatal = why) }).start();
        const next = async (conn: number): Promise<{ data: Buffer; eof: boolean }> => {
          const deadline = Date.now() + 3_000;
          while (!inbox.some((m) => m.conn === conn) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
          const i = inbox.findIndex((m) => m.conn === conn);
          if (i < 0) throw new Error(`nothing arrived on connection ${conn}`);
          return inbox.splice(i, 1)[0]!;
        };
        const send = (conn: number, req: Parameters<typeof encodeRequest>[0], fd?: number) =>
          conns[conn]!.send(encodeRequest(req), fd, 1_000);
        try {
          expect((await next(0)).data).toEqual(Buffer.from([0x08, 0x01])); // hello, version 1
          await send(0, { snapshotSent: {} });
          expect(decodeAck((await next(0)).data)).toBe('');
          await send(0, { del: { uid: 'x' } }, node!.fd); // an fd with a del: unreadable
          expect(decodeAck((await next(0)).data)).toBe('failure to read message : Unexpected control message');
          expect((await next(0)).eof).toBe(true); // ...and the stand-in hung up
          expect((await next(1)).data).toEqual(Buffer.from([0x08, 0x01])); // then came straight back
          await send(1, { snapshotSent: {} });
          expect(decodeAck((await next(1)).data)).toBe('');
          await send(1, { snapshotSent: {} }); // ztunnel exits on a second snapshot_sent
          expect(decodeAck((await next(1)).data)).toBe('failure to process message : ProtocolError("pod snapshot received already")');
          await bad.waitFor(() => fatal !== undefined, 3_000, 'fatal');
          expect(bad.fatalError).toContain('pod snapshot received already');
          await new Promise((r) => setTimeout(r, 300));
          expect(conns).toHaveLength(2); // no reconnect after a fatal error
          expect(bad.connected).toBe(false);
        } finally {
          await bad.stop();
          for (const c of conns) c.close();
          listener.close();
        }
      },
      CASE_TIMEOUT_MS,
    );

    it(
      'tears down: CNI DEL, ZDS delete, stand-in stop; no namespace, link, IP reservation or fd left',
      async () => {
        for (const p of [...pods].reverse()) {
          await cni.del(cniPod(p));
          expect(cni.cachedResult(cniPod(p))).toBeUndefined();
          expect(ipIn(p.ns.name, ['-o', 'link', 'show']).split('\n').filter(Boolean)).toHaveLength(1); // only lo
        }
        // host-local released every address (only its bookkeeping files remain).
        expect(readdirSync(join(dataDir, networkName)).filter((f) => /^\d+\.\d+\.\d+\.\d+$/.test(f))).toEqual([]);

        for (const p of pods) await registry!.delete(p.uid);
        await standIn!.waitFor(() => standIn!.pods().size === 0, 5_000, 'every pod proxy stopped');
        for (const p of pods) expect(execIn(p.ns.name, ['ss', '-Htln'])).not.toMatch(/:1500[16] /);

        await teardown();
        expect(standIn!.connected).toBe(false);
        expect(ourNamespaces()).toEqual([]);
        expect(hostLinks()).toEqual(linksBefore);
        expect(await settleFds(fdsBefore)).toBe(fdsBefore);
      },
      CASE_TIMEOUT_MS,
    );
  },
);
