// The host side per backend, with the fake addon: which netns it runs in (ALLOW_SWITCH_TO_HOST_NS),
// the iptables host rules (adopt when exactly right, Istio's delete order otherwise), the ip set
// store behind the probe-set policy, and the setting itself.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadAgentConfig } from '../../src/agent/config.js';
import { chooseBackend } from '../../src/host/backend-fallback.js';
import { HostDataplane } from '../../src/host/host-dataplane.js';
import { hostNetnsPathIn, openHostNetns } from '../../src/host/host-netns.js';
import { hostIptablesDeleteCommands } from '../../src/rules/iptables.js';
import { hostNatDrift, IptablesHostRules, parseHostNatState } from '../../src/rules/iptables-host-manager.js';
import { buildHostModel } from '../../src/rules/model.js';
import { defaultRuleSettings } from '../../src/rules/settings.js';
import { pino } from 'pino';
import type { Logger } from '../../src/ops/log.js';
import { FakeNetAddon } from '../fakes/fake-net-addon.js';

const SAVED_RULE = '-p tcp -m owner --socket-exists -m set --match-set istio-inpod-probes-v4 dst -j SNAT --to-source 169.254.7.127';
const save = (lines: string[]): string =>
  ['*nat', ':PREROUTING ACCEPT [0:0]', ':POSTROUTING ACCEPT [0:0]', ...lines, 'COMMIT', ''].join('\n');
const EXACT = save([':ISTIO_POSTRT - [0:0]', '-A POSTROUTING -j ISTIO_POSTRT', `-A ISTIO_POSTRT ${SAVED_RULE}`]);

describe('ALLOW_SWITCH_TO_HOST_NS: the setting', () => {
  it('defaults to false (Istio\'s code default); the chart\'s "true" switches; bad values are reported', () => {
    expect(loadAgentConfig([], {}).allowSwitchToHostNs).toBe(false);
    expect(loadAgentConfig([], { ALLOW_SWITCH_TO_HOST_NS: 'true' }).allowSwitchToHostNs).toBe(true);
    expect(loadAgentConfig(['--allow-switch-to-host-ns', 'false'], { ALLOW_SWITCH_TO_HOST_NS: 'true' }).allowSwitchToHostNs).toBe(false);
    expect(() => loadAgentConfig([], { ALLOW_SWITCH_TO_HOST_NS: 'yes please' })).toThrow(
      /--allow-switch-to-host-ns: expected true or false/,
    );
  });
});

describe('openHostNetns', () => {
  let proc: string;
  let addon: FakeNetAddon;

  beforeEach(() => {
    proc = mkdtempSync(join(tmpdir(), 'ana-hostns-'));
    addon = new FakeNetAddon();
    addon.addNetns('/proc/self/ns/net');
  });
  afterEach(() => rmSync(proc, { recursive: true, force: true }));

  it('switching: opens <proc>/1/ns/net', () => {
    addon.addNetns(hostNetnsPathIn(proc));
    const chosen = openHostNetns(addon, { procDir: `${proc}/`, allowSwitch: true });
    expect(chosen.handle.path).toBe(`${proc}/1/ns/net`);
    expect(chosen.switched).toBe(true);
    expect(chosen.problem).toBeUndefined();
    chosen.handle.close();
  });

  it('switching but <proc>/1/ns/net cannot be opened: the error names the path and the fix', () => {
    expect(() => openHostNetns(addon, { procDir: proc, allowSwitch: true })).toThrow(
      `ALLOW_SWITCH_TO_HOST_NS is true but the host network namespace ${proc}/1/ns/net cannot be opened`,
    );
  });

  it('not switching, <proc>/1/ns/net unreadable: the own netns, no problem (nothing proves otherwise)', () => {
    const chosen = openHostNetns(addon, { procDir: proc, allowSwitch: false });
    expect(chosen.switched).toBe(false);
    expect(chosen.problem).toBeUndefined();
    expect(chosen.handle.path).toBe('/proc/self/ns/net');
    chosen.handle.close();
  });

  it('not switching, <proc>/1/ns/net provably another namespace: the problem names both fixes', () => {
    mkdirSync(join(proc, '1', 'ns'), { recursive: true });
    writeFileSync(join(proc, '1', 'ns', 'net'), ''); // another inode than ours
    const chosen = openHostNetns(addon, { procDir: proc, allowSwitch: false, selfPath: '/proc/self/ns/net' });
    expect(chosen.problem).toMatch(/is not the agent's own and ALLOW_SWITCH_TO_HOST_NS is not "true"/);
    expect(chosen.problem).toContain('set ALLOW_SWITCH_TO_HOST_NS=true');
    expect(chosen.problem).toContain('hostNetwork: true');
    chosen.handle.close();
  });
});

describe('iptables host rules', () => {
  const settings = defaultRuleSettings({ ipv6: false });

  it('parses the nat table of iptables-save and finds no drift in exactly the golden rules', () => {
    const state = parseHostNatState(`*filter\n-A ISTIO_POSTRT -j DROP\nCOMMIT\n${EXACT}`);
    expect(state).toEqual({ chainExists: true, postrouting: ['-j ISTIO_POSTRT'], probeChain: [SAVED_RULE] });
    const expected = '-m owner --socket-exists -p tcp -m set --match-set istio-inpod-probes-v4 dst -j SNAT --to-source 169.254.7.127';
    expect(hostNatDrift(state, [expected], 'ipv4')).toEqual({ inSync: true, missing: [], extra: [] });
  });

  it('reports a missing chain, duplicated or late jumps and foreign rules', () => {
    const state = parseHostNatState(
      save([
        '-A POSTROUTING -j MASQUERADE',
        '-A POSTROUTING -j ISTIO_POSTRT',
        '-A POSTROUTING -j ISTIO_POSTRT',
        '-A ISTIO_POSTRT -j ACCEPT',
      ]),
    );
    const drift = hostNatDrift(state, [SAVED_RULE], 'ipv4');
    expect(drift.missing.map((d) => d.text)).toEqual(['nat ISTIO_POSTRT', `nat ISTIO_POSTRT ${SAVED_RULE}`]);
    expect(drift.extra.map((d) => d.text)).toEqual([
      'nat POSTROUTING -j ISTIO_POSTRT (2 copies)',
      'nat POSTROUTING: -j ISTIO_POSTRT is not the first rule',
      'nat ISTIO_POSTRT -j ACCEPT',
    ]);
  });

  it("Istio's delete order (its builder's BuildCleanupV4): the rule, the jump (once per copy), flush, delete", () => {
    expect(hostIptablesDeleteCommands(buildHostModel(settings), 4, 1)).toEqual([
      [
        'iptables',
        '-t',
        'nat',
        '-D',
        'ISTIO_POSTRT',
        '-m',
        'owner',
        '--socket-exists',
        '-p',
        'tcp',
        '-m',
        'set',
        '--match-set',
        'istio-inpod-probes-v4',
        'dst',
        '-j',
        'SNAT',
        '--to-source',
        '169.254.7.127',
      ],
      ['iptables', '-t', 'nat', '-D', 'POSTROUTING', '-j', 'ISTIO_POSTRT'],
      ['iptables', '-t', 'nat', '-D', 'POSTROUTING', '-j', 'ISTIO_POSTRT'],
      ['iptables', '-t', 'nat', '-F', 'ISTIO_POSTRT'],
      ['iptables', '-t', 'nat', '-X', 'ISTIO_POSTRT'],
    ]);
  });

  it('apply adopts exactly-right rules untouched, and otherwise deletes then restores the golden input', async () => {
    const addon = new FakeNetAddon();
    const ns = addon.addNetns('/host/proc/1/ns/net');
    const handle = addon.openNetns('/host/proc/1/ns/net');
    const rules = new IptablesHostRules(addon, settings);
    ns.exec.set('iptables-save', { exitCode: 0, stdout: EXACT, stderr: '' });
    await rules.apply(handle);
    expect(addon.runs.flatMap((r) => r.steps).map((s) => (s.op === 'exec' ? s.argv[0] : s.op))).toEqual(['iptables-save']);

    addon.runs.length = 0;
    ns.exec.set('iptables-save', { exitCode: 0, stdout: save([]), stderr: '' });
    await rules.apply(handle);
    const execs = addon.runs.flatMap((r) => r.steps).filter((s) => s.op === 'exec');
    expect(execs.map((s) => s.argv.slice(0, 5).join(' '))).toEqual([
      'iptables-save -t nat',
      'iptables -t nat -D ISTIO_POSTRT',
      'iptables -t nat -D POSTROUTING',
      'iptables -t nat -F ISTIO_POSTRT',
      'iptables -t nat -X ISTIO_POSTRT',
      'iptables-restore --noflush -v',
    ]);
    expect(execs.at(-1)!.input).toBe(rules.restoreInputs().v4);
    handle.close();
  });

  it('a failing iptables-restore is an error with its stderr', async () => {
    const addon = new FakeNetAddon();
    const ns = addon.addNetns('/n');
    const handle = addon.openNetns('/n');
    ns.exec.set('iptables-restore', { exitCode: 2, stdout: '', stderr: "iptables-restore: Set istio-inpod-probes-v4 doesn't exist." });
    await expect(new IptablesHostRules(addon, settings).apply(handle)).rejects.toThrow(
      /iptables-restore \(host probe rules\) exited with 2: .*doesn't exist/,
    );
    handle.close();
  });
});

describe('host dataplane, iptables backend, on the fake addon', () => {
  it('no kubelet lookup; ip sets created and flushed before the rules; membership through ipset steps; cleanup destroys', async () => {
    const addon = new FakeNetAddon();
    const ns = addon.addNetns('/node');
    const handle = addon.openNetns('/node');
    const host = new HostDataplane({
      addon,
      hostNetns: handle,
      settings: defaultRuleSettings({ ipv6: true }),
      backend: 'iptables',
      procDir: '/nonexistent',
    });
    ns.ipsets.set('istio-inpod-probes-v4', { family: 4, entries: new Map([['10.0.0.9', 'old']]) });
    await host.start();
    expect(host.backend).toBe('iptables');
    expect(host.kubeletUid).toBeUndefined();
    const ops = addon.runs.flatMap((r) => r.steps).map((s) => (s.op === 'exec' ? s.argv[0] : s.op));
    expect(ops.slice(0, 4)).toEqual(['ipsetCreate', 'ipsetCreate', 'ipsetFlush', 'ipsetFlush']);
    expect(ops).toContain('iptables-restore');
    expect(ns.ipsets.get('istio-inpod-probes-v4')!.entries.size).toBe(0);

    await host.podEnrolled('uid-a', ['10.0.0.5', 'fd00::5']);
    await host.podEnrolled('uid-b', ['10.0.0.5']);
    await host.podRemoved('uid-a', ['10.0.0.5', 'fd00::5']);
    expect([...ns.ipsets.get('istio-inpod-probes-v4')!.entries]).toEqual([['10.0.0.5', 'uid-b']]);
    expect([...ns.ipsets.get('istio-inpod-probes-v6')!.entries]).toEqual([]);
    await host.syncEnrolled([{ uid: 'uid-c', ips: ['10.0.0.6'] }]);
    expect([...ns.ipsets.get('istio-inpod-probes-v4')!.entries]).toEqual([['10.0.0.6', 'uid-c']]);

    await host.cleanup();
    expect(ns.ipsets.size).toBe(0);
    handle.close();
  });
});

describe("Istio's migration guard: NATIVE_NFTABLES=true while the iptables backend's ip sets exist", () => {
  function setup(): { addon: FakeNetAddon; node: ReturnType<FakeNetAddon['addNetns']>; log: Logger; lines: string[] } {
    const addon = new FakeNetAddon();
    const node = addon.addNetns('/host/proc/1/ns/net');
    const lines: string[] = [];
    const log: Logger = pino({ level: 'info' }, { write: (l: string) => void lines.push(l) });
    return { addon, node, lines, log };
  }
  const opts = { backend: 'nftables' as const, ipv6: true, procDir: '/host/proc', allowSwitchToHostNs: true };

  it('keeps nftables on a clean node, and iptables stays iptables', async () => {
    const { addon, log } = setup();
    expect(await chooseBackend(addon, opts, log)).toBe('nftables');
    expect(await chooseBackend(addon, { ...opts, backend: 'iptables' }, log)).toBe('iptables');
    expect(addon.openFds).toBe(0);
  });

  it('uses iptables while istio-inpod-probes-v4 or -v6 exists in the host netns, and says how to migrate', async () => {
    const { addon, node, log, lines } = setup();
    node.ipsets.set('istio-inpod-probes-v6', { family: 6, entries: new Map() });
    expect(await chooseBackend(addon, opts, log)).toBe('iptables');
    expect(lines.join('')).toContain('reboot the node to complete the migration to nftables');
    expect(await chooseBackend(addon, { ...opts, ipv6: false }, log)).toBe('nftables'); // -v6 only counts with IPv6
    expect(addon.openFds).toBe(0);
  });

  it('a detection that fails keeps nftables, as Istio does', async () => {
    const { addon, log, lines } = setup();
    addon.failOn = (step) =>
      step.op === 'ipsetList' ? Object.assign(new Error('EPROTONOSUPPORT: no ip_set module'), { code: 'EPROTONOSUPPORT' }) : undefined;
    expect(await chooseBackend(addon, opts, log)).toBe('nftables');
    expect(await chooseBackend(addon, { ...opts, procDir: '/elsewhere' }, log)).toBe('nftables'); // netns unopenable
    expect(lines.filter((l) => l.includes('could not be detected'))).toHaveLength(2);
  });
});
