// Byte-for-byte comparison with Istio's own golden files (see the README next to them for
// which upstream test and settings produced each file).

import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

import { describe, expect, it } from 'vitest';

import {
  ANNOTATION_BYPASS_INBOUND_CAPTURE,
  ANNOTATION_DNS_CAPTURE,
  ANNOTATION_REROUTE_VIRTUAL_INTERFACES,
} from '../../src/rules/constants.js';
import { renderHostIptables, renderInpodIptables, inpodIptablesDeleteCommands } from '../../src/rules/iptables.js';
import { buildHostModel, buildInpodModel } from '../../src/rules/model.js';
import {
  inpodNftTables,
  renderHostNftables,
  renderHostNftablesDelete,
  renderInpodNftables,
  renderInpodNftablesDelete,
} from '../../src/rules/nftables.js';
import { defaultRuleSettings, NO_OVERRIDES, podOverridesFromAnnotations, type RuleSettings } from '../../src/rules/settings.js';
import { istioGoldenUrl } from '../fixtures/istio-golden.js';

const GOLDEN_ROOT = istioGoldenUrl();
const NFT_DIR = new URL('nftables/', GOLDEN_ROOT);
const IPT_DIR = new URL('iptables/', GOLDEN_ROOT);

if (!existsSync(NFT_DIR) || !existsSync(IPT_DIR)) {
  throw new Error(`Istio golden files not found under ${fileURLToPath(GOLDEN_ROOT)} (expected {nftables,iptables}/*.golden)`);
}

/** constructTestConfig(): the v6 SNAT is a test value, not the production default. */
const TEST_SNAT_V6 = 'e9ac:1e77:90ca:399f:4d6d:ece2:2f9b:3164';
const KUBELET_UID = 1000;
/** First two lines of every iptables golden are the stub's record of the state check. */
const IPTABLES_STATE_CHECK = 'iptables-save\nip6tables-save\n';

interface InpodCase {
  redirectDns: boolean;
  annotations: Record<string, string>;
}

/** The README's in-pod table; `_ipv6` variants share a row. */
const INPOD_CASES: Readonly<Record<string, InpodCase>> = {
  default: { redirectDns: true, annotations: {} },
  ingress: { redirectDns: false, annotations: { [ANNOTATION_BYPASS_INBOUND_CAPTURE]: 'true' } },
  virtual_interfaces: {
    redirectDns: false,
    annotations: { [ANNOTATION_REROUTE_VIRTUAL_INTERFACES]: 'fake1s0f0,fake1s0f1' },
  },
  ingress_and_virtual_interfaces: {
    redirectDns: false,
    annotations: {
      [ANNOTATION_BYPASS_INBOUND_CAPTURE]: 'true',
      [ANNOTATION_REROUTE_VIRTUAL_INTERFACES]: 'fake1s0f0,fake1s0f1',
    },
  },
  dns_pod_enabled_and_off_globally: { redirectDns: false, annotations: { [ANNOTATION_DNS_CAPTURE]: 'true' } },
  dns_pod_disabled_and_on_globally: { redirectDns: true, annotations: { [ANNOTATION_DNS_CAPTURE]: 'false' } },
};

type Backend = 'nftables' | 'iptables';

interface GoldenCase {
  /** The exact bytes handed to nft / iptables-restore (v4 then v6). */
  renderExact: () => string;
  /** What upstream compares: the recorded text, trimmed (iptables parts joined by "\n"). */
  renderTrimmed: () => string;
  /** The golden file's content without the stub's state-check lines. */
  body: (golden: string) => string;
  /** The golden as exact bytes of renderExact(). */
  exactBytes: (golden: string) => string;
}

function splitName(file: string): { base: string; ipv6: boolean } {
  const stem = file.replace(/\.golden$/, '');
  return stem.endsWith('_ipv6') ? { base: stem.slice(0, -'_ipv6'.length), ipv6: true } : { base: stem, ipv6: false };
}

function inpodInputs(base: string, ipv6: boolean): ReturnType<typeof buildInpodModel> {
  const spec = INPOD_CASES[base];
  if (spec === undefined) throw new Error(`no settings known for in-pod case ${base}`);
  const settings = defaultRuleSettings({ ipv6, dnsCapture: spec.redirectDns, hostProbeSnatIpv6: TEST_SNAT_V6 });
  const { overrides, warnings } = podOverridesFromAnnotations(spec.annotations);
  expect(warnings).toEqual([]);
  return buildInpodModel(settings, overrides);
}

function hostSettings(backend: Backend, ipv6: boolean): RuleSettings {
  // The iptables host test overrides the v6 SNAT with the real default; the nft one does not.
  return backend === 'iptables' ? defaultRuleSettings({ ipv6 }) : defaultRuleSettings({ ipv6, hostProbeSnatIpv6: TEST_SNAT_V6 });
}

function joinIptables(out: { v4: string; v6?: string }): string {
  return [out.v4, out.v6]
    .filter((text): text is string => text !== undefined)
    .map((text) => text.trim())
    .join('\n');
}

function goldenCase(backend: Backend, file: string): GoldenCase {
  const { base, ipv6 } = splitName(file);
  if (backend === 'nftables') {
    const render =
      base === 'hostprobe'
        ? () => renderHostNftables(buildHostModel(hostSettings(backend, ipv6)), KUBELET_UID)
        : () => renderInpodNftables(inpodInputs(base, ipv6));
    // One recorded transaction: the file is exactly Transaction.String().
    return {
      renderExact: render,
      renderTrimmed: () => render().trim(),
      body: (golden) => golden,
      exactBytes: (golden) => golden,
    };
  }
  const renderParts =
    base === 'hostprobe'
      ? () => renderHostIptables(buildHostModel(hostSettings(backend, ipv6)))
      : () => renderInpodIptables(inpodInputs(base, ipv6));
  const body = (golden: string): string => {
    expect(golden.startsWith(IPTABLES_STATE_CHECK)).toBe(true);
    return golden.slice(IPTABLES_STATE_CHECK.length);
  };
  return {
    renderExact: () => {
      const { v4, v6 } = renderParts();
      return v4 + (v6 ?? '');
    },
    renderTrimmed: () => joinIptables(renderParts()),
    body,
    // The stub records stdin line by line; real restore input ends each text with "COMMIT\n".
    exactBytes: (golden) => `${body(golden)}\n`,
  };
}

function goldenFiles(dir: URL): string[] {
  return readdirSync(dir)
    .filter((name) => name.endsWith('.golden'))
    .sort();
}

function readGolden(dir: URL, file: string): string {
  return readFileSync(new URL(file, dir), 'utf8');
}

describe.each([
  ['nftables', NFT_DIR],
  ['iptables', IPT_DIR],
] as const)('%s goldens', (backend, dir) => {
  const files = goldenFiles(dir);

  it('has golden files to test', () => {
    expect(files.length).toBeGreaterThan(0);
  });

  it('covers every file in the folder with a known case', () => {
    const untested = readdirSync(dir).filter((name) => {
      if (!name.endsWith('.golden')) return true;
      const { base } = splitName(name);
      return base !== 'hostprobe' && INPOD_CASES[base] === undefined;
    });
    expect(untested).toEqual([]);
  });

  it.each(files)('%s matches after trimming (as upstream compares)', (file) => {
    const golden = readGolden(dir, file);
    const c = goldenCase(backend, file);
    expect(c.renderTrimmed()).toBe(c.body(golden).trim());
  });

  it.each(files)('%s matches byte for byte, including the final newline', (file) => {
    const golden = readGolden(dir, file);
    const c = goldenCase(backend, file);
    expect(c.renderExact()).toBe(c.exactBytes(golden));
  });

  it.each(files)('%s renders identically twice', (file) => {
    const c = goldenCase(backend, file);
    expect(c.renderExact()).toBe(c.renderExact());
  });
});

describe('iptables v6 split', () => {
  it('has v6 only with IPv6 on', () => {
    const off = renderInpodIptables(buildInpodModel(defaultRuleSettings({ ipv6: false }), NO_OVERRIDES));
    expect(off.v6).toBeUndefined();
    expect('v6' in off).toBe(false);
    const on = renderInpodIptables(buildInpodModel(defaultRuleSettings({ ipv6: true }), NO_OVERRIDES));
    expect(on.v6).toContain('::1/128');
    expect(on.v4).not.toContain('::1/128');
  });

  it('ends every restore text with COMMIT and a newline (iptables-restore needs it)', () => {
    const out = renderInpodIptables(buildInpodModel(defaultRuleSettings(), NO_OVERRIDES));
    expect(out.v4.endsWith('COMMIT\n')).toBe(true);
    expect(out.v6?.endsWith('COMMIT\n')).toBe(true);
  });
});

describe('delete transactions', () => {
  it('nft in-pod delete adds then deletes each table', () => {
    expect(renderInpodNftablesDelete()).toBe(
      [
        'add table inet istio-ambient-nat',
        'delete table inet istio-ambient-nat',
        'add table inet istio-ambient-mangle',
        'delete table inet istio-ambient-mangle',
        'add table inet istio-ambient-raw',
        'delete table inet istio-ambient-raw',
        '',
      ].join('\n'),
    );
  });

  it('nft host delete flushes the nat table', () => {
    expect(renderHostNftablesDelete()).toBe('add table inet istio-ambient-nat\nflush table inet istio-ambient-nat\n');
  });

  it('iptables in-pod delete commands follow upstream order, per family', () => {
    const v4 = [
      '-t mangle -D PREROUTING -j ISTIO_PRERT',
      '-t mangle -D OUTPUT -j ISTIO_OUTPUT',
      '-t nat -D OUTPUT -j ISTIO_OUTPUT',
      '-t raw -D PREROUTING -j ISTIO_PRERT',
      '-t raw -D OUTPUT -j ISTIO_OUTPUT',
      '-t nat -D PREROUTING -j ISTIO_PRERT',
      '-t mangle -F ISTIO_PRERT',
      '-t mangle -F ISTIO_OUTPUT',
      '-t nat -F ISTIO_PRERT',
      '-t nat -F ISTIO_OUTPUT',
      '-t raw -F ISTIO_PRERT',
      '-t raw -F ISTIO_OUTPUT',
      '-t mangle -X ISTIO_PRERT',
      '-t mangle -X ISTIO_OUTPUT',
      '-t nat -X ISTIO_PRERT',
      '-t nat -X ISTIO_OUTPUT',
      '-t raw -X ISTIO_PRERT',
      '-t raw -X ISTIO_OUTPUT',
    ];
    const toText = (cmds: string[][]): string[] => cmds.map((argv) => argv.join(' '));
    expect(toText(inpodIptablesDeleteCommands(false))).toEqual(v4.map((args) => `iptables ${args}`));
    expect(toText(inpodIptablesDeleteCommands(true))).toEqual([
      ...v4.map((args) => `iptables ${args}`),
      ...v4.map((args) => `ip6tables ${args}`),
    ]);
  });

  it('lists the nft tables a model touches', () => {
    const withDns = buildInpodModel(defaultRuleSettings({ dnsCapture: true }), NO_OVERRIDES);
    const withoutDns = buildInpodModel(defaultRuleSettings({ dnsCapture: false }), NO_OVERRIDES);
    expect(inpodNftTables(withDns)).toEqual(['istio-ambient-nat', 'istio-ambient-mangle', 'istio-ambient-raw']);
    expect(inpodNftTables(withoutDns)).toEqual(['istio-ambient-nat', 'istio-ambient-mangle']);
  });
});
