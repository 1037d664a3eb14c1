import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { main } from '../../src/cli/main.js';
import { FakeNetAddon } from '../fakes/fake-net-addon.js';
import { readIstioGolden } from '../fixtures/istio-golden.js';

const golden = (path: string): string => readIstioGolden(path);
/** The iptables goldens start with Istio's two-line state-check stub, which is not rule text. */
const restoreBody = (path: string): string => golden(path).split('\n').slice(2).join('\n');

async function cli(args: string[], addon = new FakeNetAddon()): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await main(args, { out: (s) => (out += s), err: (s) => (err += s) }, addon);
  return { code, out, err };
}

describe('ambient-node-agent rules (printing)', () => {
  const cases: [string[], string][] = [
    [['rules'], 'nftables/default.golden'],
    [['rules', '--ipv6', '--snat-ipv6', 'e9ac:1e77:90ca:399f:4d6d:ece2:2f9b:3164'], 'nftables/default_ipv6.golden'],
    [['rules', '--dns-capture', 'false', '--ingress'], 'nftables/ingress.golden'],
    [['rules', '--dns-capture', 'false', '--virtual-interfaces', 'fake1s0f0,fake1s0f1'], 'nftables/virtual_interfaces.golden'],
    [['rules', '--dns-capture', 'false', '--pod-dns-capture', 'true'], 'nftables/dns_pod_enabled_and_off_globally.golden'],
    [['rules', '--pod-dns-capture', 'false'], 'nftables/dns_pod_disabled_and_on_globally.golden'],
    [
      ['rules', '--host', '--kubelet-uid', '1000', '--ipv6', '--snat-ipv6', 'e9ac:1e77:90ca:399f:4d6d:ece2:2f9b:3164'],
      'nftables/hostprobe_ipv6.golden',
    ],
  ];
  it.each(cases)('%j prints %s byte for byte', async (args, file) => {
    const { code, out } = await cli(args);
    expect(code).toBe(0);
    expect(out).toBe(golden(file));
  });

  it('prints the iptables-restore input as the golden files record it', async () => {
    const v4 = await cli(['rules', '--backend', 'iptables']);
    expect(v4.out.trimEnd()).toBe(restoreBody('iptables/default.golden'));
    const host = await cli(['rules', '--backend', 'iptables', '--host', '--ipv6']);
    expect(host.out.trimEnd()).toBe(restoreBody('iptables/hostprobe_ipv6.golden'));
  });
});

describe('ambient-node-agent rules (bad input: one line, exit 2)', () => {
  const bad: [string[], RegExp][] = [
    [['rules', '--bogus'], /Unknown option '--bogus'/],
    [['rules', '--backend', 'ipfw'], /--backend: expected nftables or iptables/],
    [['rules', '--snat-ipv4', '300.1.1.1'], /--snat-ipv4: not a valid address/],
    [['rules', '--snat-ipv6', '169.254.7.127'], /--snat-ipv6: not a valid address/],
    [['rules', '--dns-capture', 'maybe'], /--dns-capture: expected true or false/],
    [['rules', '--virtual-interfaces', 'eth0;drop'], /--virtual-interfaces: "eth0;drop"/],
    [['rules', '--kubelet-uid', 'root', '--host'], /--kubelet-uid: expected a non-negative integer/],
    [['rules', '--apply', '/a', '--delete', '/b'], /choose one of --apply, --delete, --verify/],
    [['rules', '--apply', '/var/run/netns/missing'], /\/var\/run\/netns\/missing: ENOENT/],
    [['nonsense'], /unknown command "nonsense"/],
  ];
  it.each(bad)('%j', async (args, message) => {
    const { code, out, err } = await cli(args);
    expect(code).toBe(2);
    expect(out).toBe('');
    expect(err).toMatch(message);
    expect(err.trimEnd().split('\n')).toHaveLength(1);
  });

  it('rejects a file that is not a network namespace', async () => {
    const addon = new FakeNetAddon();
    addon.notNetns.add('/etc/hostname');
    const { code, err } = await cli(['rules', '--apply', '/etc/hostname'], addon);
    expect(code).toBe(2);
    expect(err).toBe('ambient-node-agent: /etc/hostname: not a network namespace\n');
  });
});

describe('ambient-node-agent rules (apply, delete, verify)', () => {
  it('applies, verifies and deletes through the addon and closes the namespace', async () => {
    const addon = new FakeNetAddon();
    const pod = addon.addNetns('/run/netns/p');
    addon.fresh.listing = readFileSync(new URL('../fixtures/default-inpod.listing.nft', import.meta.url), 'utf8');
    expect(await cli(['rules', '--apply', '/run/netns/p'], addon)).toMatchObject({
      code: 0,
      out: 'applied in-pod nftables rules in /run/netns/p\n',
    });
    expect(pod.nftScripts).toEqual([golden('nftables/default.golden')]);
    const drift = await cli(['rules', '--verify', '/run/netns/p'], addon);
    expect(drift.code).toBe(1); // the fake kernel lists nothing in the pod: every table is missing
    expect(drift.out).toContain('missing table in inet istio-ambient-nat');
    pod.listing = addon.fresh.listing;
    expect(await cli(['rules', '--verify', '/run/netns/p'], addon)).toMatchObject({ code: 0, out: 'in sync: /run/netns/p\n' });
    expect(await cli(['rules', '--delete', '/run/netns/p'], addon)).toMatchObject({ code: 0 });
    expect(pod.rules).toEqual([]);
    expect(addon.openFds).toBe(0);
  });

  it('exits 1 with the error when applying fails', async () => {
    const addon = new FakeNetAddon();
    addon.addNetns('/run/netns/p');
    addon.failOn = (step) =>
      step.op === 'nft'
        ? Object.assign(new Error('EINVAL: Invalid argument, nft_run_cmd_from_buffer: Error: syntax error'), { code: 'EINVAL' })
        : undefined;
    const { code, err } = await cli(['rules', '--apply', '/run/netns/p'], addon);
    expect(code).toBe(1);
    expect(err).toBe(
      'ambient-node-agent: apply nftables in-pod rules in /run/netns/p: EINVAL: Invalid argument, nft_run_cmd_from_buffer: Error: syntax error\n',
    );
    expect(addon.openFds).toBe(0);
  });
});
