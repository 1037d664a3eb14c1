// Negative control for the rule tests: the in-pod nftables rules really redirect traffic.
// Two namespaces, `pod` and `peer`, joined by a veth pair. In `pod` listen ztunnel-like
// sockets (15001 outbound and 15006 inbound plaintext, SO_MARK 0x539, made by the addon);
// in `peer` listens a plain server on 8080. Each connection carries a unique token, every
// server answers with its own label, so each case checks which server really accepted it.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';

import { NativeNetAddon, type NetnsHandle } from '../../src/addon/net-addon.js';
import { INPOD_MARK, ZTUNNEL_INBOUND_PLAINTEXT_PORT, ZTUNNEL_OUTBOUND_PORT } from '../../src/rules/constants.js';
import { describeDrift } from '../../src/rules/drift.js';
import { NftablesInpodRules } from '../../src/rules/nftables-manager.js';
import { defaultRuleSettings, NO_OVERRIDES } from '../../src/rules/settings.js';
import {
  createNetns,
  deleteNetns,
  execIn,
  ipIn,
  nftRuleset,
  privilegedSkipReason,
  requirePrivilegedInCi,
  type TestNetns,
} from '../helpers/netns.js';
import {
  destroyTrafficClients,
  exchangeFrom,
  parseConntrack,
  TrafficServer,
  uniqueToken,
  type ConntrackEntry,
  type ExchangeResult,
} from '../helpers/traffic.js';

requirePrivilegedInCi();
const skipReason = privilegedSkipReason();

// Benchmarking range (RFC 2544), only ever configured inside the two test namespaces.
const POD_IP = '198.18.0.1';
const PEER_IP = '198.18.0.2';
const PREFIX = 24;
const APP_PORT = 8080;
/** Short per-test bound: every connect and exchange inside is bounded at 3 s anyway. */
const CASE_TIMEOUT_MS = 20_000;

describe.skipIf(skipReason)(`in-pod nftables rules redirect real traffic${skipReason ? ` (skipped: ${skipReason})` : ''}`, () => {
  // Made in beforeAll: a skipped suite still runs this callback, and must not load the addon.
  let addon: NativeNetAddon;
  let manager: NftablesInpodRules;
  const namespaces: TestNetns[] = [];
  const handles: NetnsHandle[] = [];
  const servers: TrafficServer[] = [];
  let podNs: TestNetns;
  let peerNs: TestNetns;
  let pod: NetnsHandle;
  let peer: NetnsHandle;
  let outbound: TrafficServer; // pod 0.0.0.0:15001, marked like ztunnel's
  let inbound: TrafficServer; // pod 0.0.0.0:15006, marked like ztunnel's
  let app: TrafficServer; // peer PEER_IP:8080, no mark

  const everyToken = (): Map<string, string[]> => new Map(servers.map((s) => [s.label, s.tokens()]));

  /** Asserts that exactly one server saw `token`, and that it was `label`. */
  function expectOnlySeenBy(label: string, token: string): void {
    for (const [server, tokens] of everyToken()) {
      if (server === label) expect(tokens, `${server} must have received ${token}`).toContain(token);
      else expect(tokens, `${server} must not have received ${token}`).not.toContain(token);
    }
  }

  async function outboundFromPod(tag: string, mark?: number): Promise<{ token: string; result: ExchangeResult }> {
    const token = uniqueToken(tag);
    const result = await exchangeFrom(addon, pod, {
      address: PEER_IP,
      port: APP_PORT,
      token,
      ...(mark === undefined ? {} : { mark }),
    });
    return { token, result };
  }

  /** The pod's conntrack view, or undefined when the kernel has no /proc/net/nf_conntrack. */
  function podConntrack(): ConntrackEntry[] | undefined {
    let text: string;
    try {
      text = execIn(podNs.name, ['cat', '/proc/net/nf_conntrack']);
    } catch {
      return undefined; // CONFIG_NF_CONNTRACK_PROCFS=n
    }
    return parseConntrack(text);
  }

  /** The pod's conntrack entry of the TCP connection the pod opened from `clientPort`. */
  function conntrackOf(entries: ConntrackEntry[], clientPort: number): ConntrackEntry | undefined {
    return entries.find((e) => e.protocol === 'tcp' && e.original.src === POD_IP && e.original.sport === clientPort);
  }

  beforeAll(async () => {
    addon = new NativeNetAddon();
    manager = new NftablesInpodRules(addon, defaultRuleSettings({ ipv6: false, dnsCapture: true }));
    podNs = createNetns('pod');
    namespaces.push(podNs);
    peerNs = createNetns('peer');
    namespaces.push(peerNs);
    // Created from inside the pod namespace, both ends placed directly in the test
    // namespaces: the host namespace never sees the pair.
    const vethPod = `anv${process.pid}p`;
    const vethPeer = `anv${process.pid}q`;
    ipIn(podNs.name, ['link', 'add', vethPod, 'type', 'veth', 'peer', 'name', vethPeer, 'netns', peerNs.name]);
    ipIn(podNs.name, ['addr', 'add', `${POD_IP}/${PREFIX}`, 'dev', vethPod]);
    ipIn(peerNs.name, ['addr', 'add', `${PEER_IP}/${PREFIX}`, 'dev', vethPeer]);
    ipIn(podNs.name, ['link', 'set', vethPod, 'up']);
    ipIn(peerNs.name, ['link', 'set', vethPeer, 'up']);

    pod = addon.openNetns(podNs.path);
    handles.push(pod);
    peer = addon.openNetns(peerNs.path);
    handles.push(peer);

    outbound = await TrafficServer.listen(addon, pod, 'outbound-15001', {
      address: '0.0.0.0',
      port: ZTUNNEL_OUTBOUND_PORT,
      mark: INPOD_MARK,
    });
    servers.push(outbound);
    inbound = await TrafficServer.listen(addon, pod, 'inbound-15006', {
      address: '0.0.0.0',
      port: ZTUNNEL_INBOUND_PLAINTEXT_PORT,
      mark: INPOD_MARK,
    });
    servers.push(inbound);
    app = await TrafficServer.listen(addon, peer, 'peer-8080', { address: PEER_IP, port: APP_PORT });
    servers.push(app);
  });

  afterEach(() => {
    destroyTrafficClients();
  });

  afterAll(async () => {
    destroyTrafficClients();
    await Promise.all(servers.map((s) => s.close()));
    for (const h of handles) h.close();
    // Deleting a namespace also destroys its end of the veth pair, and with it the pair.
    for (const ns of namespaces) deleteNetns(ns);
  });

  it('sets up the namespaces: adopted listeners live in the right namespace and port', () => {
    expect(outbound.address()).toMatchObject({ address: '0.0.0.0', port: ZTUNNEL_OUTBOUND_PORT });
    expect(inbound.address()).toMatchObject({ address: '0.0.0.0', port: ZTUNNEL_INBOUND_PLAINTEXT_PORT });
    expect(app.address()).toMatchObject({ address: PEER_IP, port: APP_PORT });
    // The listeners were born in the test namespaces (not the host's), with ztunnel's mark.
    const podListeners = execIn(podNs.name, ['ss', '-Htlne']).split('\n');
    const mark = `fwmark:0x${INPOD_MARK.toString(16)}`;
    for (const port of [ZTUNNEL_OUTBOUND_PORT, ZTUNNEL_INBOUND_PLAINTEXT_PORT]) {
      const line = podListeners.find((l) => l.includes(`0.0.0.0:${port} `));
      expect(line, `pod listener on ${port}`).toBeDefined();
      expect(line).toContain(mark);
    }
    const peerListener = execIn(peerNs.name, ['ss', '-Htlne'])
      .split('\n')
      .find((l) => l.includes(`${PEER_IP}:${APP_PORT} `));
    expect(peerListener, `peer listener on ${APP_PORT}`).toBeDefined();
    expect(peerListener).not.toContain('fwmark:');
  });

  describe('before the rules are applied (control)', () => {
    it(
      'an unmarked connection from the pod goes straight to the peer',
      async () => {
        const { token, result } = await outboundFromPod('control-out');
        expect(result.reply).toBe(`peer-8080 ${token}`);
        expect(result.remoteAddress).toBe(PEER_IP);
        expect(result.remotePort).toBe(APP_PORT);
        const seen = await app.waitFor(token);
        expect(seen).toMatchObject({ localAddress: PEER_IP, localPort: APP_PORT, remoteAddress: POD_IP, remotePort: result.localPort });
        expectOnlySeenBy('peer-8080', token);
      },
      CASE_TIMEOUT_MS,
    );

    it(
      'a connection from the peer to the pod on 8080 is refused (nothing listens there)',
      async () => {
        const before = inbound.accepted.length;
        await expect(
          exchangeFrom(addon, peer, { address: POD_IP, port: APP_PORT, token: uniqueToken('control-in') }),
        ).rejects.toMatchObject({ code: 'ECONNREFUSED' });
        expect(inbound.accepted).toHaveLength(before);
      },
      CASE_TIMEOUT_MS,
    );
  });

  describe('with the rules applied', () => {
    beforeAll(async () => {
      await manager.apply(pod, NO_OVERRIDES);
    });

    it(
      'installs the rules (verify in sync, nft lists the tables)',
      async () => {
        const drift = await manager.verify(pod, NO_OVERRIDES);
        expect(describeDrift(drift)).toEqual([]);
        expect(nftRuleset(podNs)).toContain(`redirect to :${ZTUNNEL_OUTBOUND_PORT}`);
        expect(ipIn(podNs.name, ['-4', 'rule', 'show'])).toMatch(/fwmark 0x111\/0xfff lookup 100/);
      },
      CASE_TIMEOUT_MS,
    );

    it(
      'captures an unmarked outbound connection into the 15001 listener, not the peer',
      async () => {
        const { token, result } = await outboundFromPod('captured');
        expect(result.reply).toBe(`outbound-15001 ${token}`);
        // The application still believes it talks to the peer's 8080...
        expect(result.remoteAddress).toBe(PEER_IP);
        expect(result.remotePort).toBe(APP_PORT);
        expect(result.localAddress).toBe(POD_IP);
        // ...while ztunnel's listener accepted it (REDIRECT in output rewrites to 127.0.0.1).
        const seen = await outbound.waitFor(token);
        expect(seen).toMatchObject({
          localAddress: '127.0.0.1',
          localPort: ZTUNNEL_OUTBOUND_PORT,
          remoteAddress: POD_IP,
          remotePort: result.localPort,
        });
        expectOnlySeenBy('outbound-15001', token);
      },
      CASE_TIMEOUT_MS,
    );

    it(
      "lets a connection marked 0x539 (ztunnel's own) reach the peer uncaptured",
      async () => {
        const outboundBefore = outbound.accepted.length;
        const { token, result } = await outboundFromPod('marked', INPOD_MARK);
        expect(result.reply).toBe(`peer-8080 ${token}`);
        const seen = await app.waitFor(token);
        expect(seen).toMatchObject({ localAddress: PEER_IP, localPort: APP_PORT, remoteAddress: POD_IP, remotePort: result.localPort });
        expectOnlySeenBy('peer-8080', token);
        expect(outbound.accepted).toHaveLength(outboundBefore);
      },
      CASE_TIMEOUT_MS,
    );

    it(
      'keeps the original destination in conntrack (what ztunnel reads with SO_ORIGINAL_DST)',
      async (ctx) => {
        if (podConntrack() === undefined) ctx.skip('kernel has no /proc/net/nf_conntrack (CONFIG_NF_CONNTRACK_PROCFS)');
        const captured = await outboundFromPod('conntrack-captured');
        const marked = await outboundFromPod('conntrack-marked', INPOD_MARK);
        expect(captured.result.reply).toBe(`outbound-15001 ${captured.token}`);
        expect(marked.result.reply).toBe(`peer-8080 ${marked.token}`);
        const entries = podConntrack() ?? [];
        const capturedEntry = conntrackOf(entries, captured.result.localPort);
        expect(capturedEntry, 'conntrack entry of the captured connection').toBeDefined();
        // Sent to the peer's 8080, answered by 127.0.0.1:15001.
        expect(capturedEntry?.original).toEqual({ src: POD_IP, dst: PEER_IP, sport: captured.result.localPort, dport: APP_PORT });
        expect(capturedEntry?.reply).toEqual({
          src: '127.0.0.1',
          dst: POD_IP,
          sport: ZTUNNEL_OUTBOUND_PORT,
          dport: captured.result.localPort,
        });
        const markedEntry = conntrackOf(entries, marked.result.localPort);
        expect(markedEntry, 'conntrack entry of the marked connection').toBeDefined();
        // Not translated: the reply really comes from the peer.
        expect(markedEntry?.original).toEqual({ src: POD_IP, dst: PEER_IP, sport: marked.result.localPort, dport: APP_PORT });
        expect(markedEntry?.reply).toEqual({ src: PEER_IP, dst: POD_IP, sport: APP_PORT, dport: marked.result.localPort });
      },
      CASE_TIMEOUT_MS,
    );

    it(
      "captures an inbound connection to the pod's 8080 into the 15006 listener",
      async () => {
        const token = uniqueToken('inbound');
        const result = await exchangeFrom(addon, peer, { address: POD_IP, port: APP_PORT, token });
        expect(result.reply).toBe(`inbound-15006 ${token}`);
        expect(result.remoteAddress).toBe(POD_IP);
        expect(result.remotePort).toBe(APP_PORT);
        const seen = await inbound.waitFor(token);
        // REDIRECT in prerouting rewrites to the address of the incoming interface.
        expect(seen).toMatchObject({
          localAddress: POD_IP,
          localPort: ZTUNNEL_INBOUND_PLAINTEXT_PORT,
          remoteAddress: PEER_IP,
          remotePort: result.localPort,
        });
        expectOnlySeenBy('inbound-15006', token);
      },
      CASE_TIMEOUT_MS,
    );

    it(
      'captures every unmarked connection, not only the first one',
      async () => {
        for (let i = 0; i < 3; i++) {
          const { token, result } = await outboundFromPod(`captured-again${i}`);
          expect(result.reply).toBe(`outbound-15001 ${token}`);
          expectOnlySeenBy('outbound-15001', token);
        }
      },
      CASE_TIMEOUT_MS,
    );
  });

  describe('after the rules are removed', () => {
    beforeAll(async () => {
      await manager.remove(pod);
    });

    it(
      'leaves no agent tables behind',
      async () => {
        expect(nftRuleset(podNs)).not.toMatch(/istio-ambient/);
        expect(ipIn(podNs.name, ['-4', 'rule', 'show'])).not.toMatch(/fwmark 0x111/);
        expect(ipIn(podNs.name, ['-4', 'route', 'show', 'table', '100'])).toBe('');
        const drift = await manager.verify(pod, NO_OVERRIDES);
        expect(drift.inSync).toBe(false);
      },
      CASE_TIMEOUT_MS,
    );

    it(
      'an unmarked connection from the pod reaches the peer again',
      async () => {
        const outboundBefore = outbound.accepted.length;
        const { token, result } = await outboundFromPod('removed-out');
        expect(result.reply).toBe(`peer-8080 ${token}`);
        const seen = await app.waitFor(token);
        expect(seen).toMatchObject({ localAddress: PEER_IP, localPort: APP_PORT, remoteAddress: POD_IP, remotePort: result.localPort });
        expectOnlySeenBy('peer-8080', token);
        expect(outbound.accepted).toHaveLength(outboundBefore);
      },
      CASE_TIMEOUT_MS,
    );

    it(
      "an inbound connection to the pod's 8080 is refused again",
      async () => {
        const before = inbound.accepted.length;
        await expect(
          exchangeFrom(addon, peer, { address: POD_IP, port: APP_PORT, token: uniqueToken('removed-in') }),
        ).rejects.toMatchObject({ code: 'ECONNREFUSED' });
        expect(inbound.accepted).toHaveLength(before);
      },
      CASE_TIMEOUT_MS,
    );
  });
});
