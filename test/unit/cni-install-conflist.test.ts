// Go-compatible JSON output, libcni's validity rules, and the entry/chain details that the
// golden files do not exercise.

import { describe, expect, it } from 'vitest';

import {
  chain,
  configKind,
  hasIstioEntry,
  pickPrimary,
  pluginDirNetwork,
  sameConfig,
  unchain,
  validateConfig,
} from '../../src/cni-install/conflist.js';
import { compareGoStrings, marshalGoIndent, parseGoJson, quoteGoString } from '../../src/util/go-json.js';
import { normalizeExcludeNamespaces, pluginEntry, type PluginConfigSettings } from '../../src/cni-install/plugin-config.js';

const SETTINGS: PluginConfigSettings = {
  runDir: '/var/run/istio-cni',
  excludeNamespaces: ['kube-system'],
  ambientEnabled: true,
  podNamespace: 'istio-system',
  logLevel: 'info',
  enablementSelectors: [],
  nativeNftables: false,
  enableAmbientDetectionRetry: false,
};

describe('Go encoding/json output', () => {
  it('escapes like Go with HTML escaping on', () => {
    expect(quoteGoString('a<b>&c')).toBe('"a\\u003cb\\u003e\\u0026c"');
    expect(quoteGoString('\u2028\u2029')).toBe('"\\u2028\\u2029"');
    expect(quoteGoString('\b\f\n\r\t\u0001\u001f"\\')).toBe('"\\b\\f\\n\\r\\t\\u0001\\u001f\\"\\\\"');
    expect(quoteGoString('\u007f é 😀')).toBe('"\u007f é 😀"');
    expect(quoteGoString('x\ud800y')).toBe('"x\ufffdy"');
  });

  it('formats numbers like strconv.FormatFloat(f, fmt, -1, 64)', () => {
    // eslint-disable-next-line no-loss-of-precision -- on purpose: a double past 2^53, which Go prints as 12345678901234567000
    expect(marshalGoIndent([1500, 0.5, 1e21, 1e20, 1e-7, 0.000001, -0, 12345678901234567890])).toBe(
      '[\n  1500,\n  0.5,\n  1e+21,\n  100000000000000000000,\n  1e-7,\n  0.000001,\n  -0,\n  12345678901234567000\n]\n',
    );
  });

  it('sorts map keys by UTF-8 bytes', () => {
    const keys = ['😀', '\uffff', 'é', 'a', 'B', '_'];
    expect([...keys].sort(compareGoStrings)).toEqual(['B', '_', 'a', 'é', '\uffff', '😀']);
  });

  it('prints empty containers inline and nests with two spaces', () => {
    expect(marshalGoIndent({ b: [], a: {}, c: { y: [1], x: null } })).toBe(
      '{\n  "a": {},\n  "b": [],\n  "c": {\n    "x": null,\n    "y": [\n      1\n    ]\n  }\n}\n',
    );
  });

  it('refuses numbers a float64 cannot hold, like json.Unmarshal', () => {
    expect(() => parseGoJson('{"mtu": 1e400}')).toThrow(RangeError);
  });

  it('keeps a "__proto__" key as data', () => {
    const v = parseGoJson('{"__proto__": {"x": 1}, "a": 1}');
    expect(marshalGoIndent(v)).toBe('{\n  "__proto__": {\n    "x": 1\n  },\n  "a": 1\n}\n');
  });
});

describe('plugin entry', () => {
  it("has exactly Istio's keys", () => {
    expect(Object.keys(pluginEntry(SETTINGS)).sort()).toEqual([
      'ambient_enabled',
      'cni_agent_run_dir',
      'dns',
      'enable_ambient_detection_retry',
      'enablement_selectors',
      'exclude_namespaces',
      'ipam',
      'name',
      'native_nftables',
      'plugin_log_level',
      'pod_namespace',
      'type',
    ]);
  });

  it('exclude_namespaces follows util.SplitExcludeNamespaces (nil → null)', () => {
    expect(normalizeExcludeNamespaces(null)).toBeNull();
    expect(normalizeExcludeNamespaces([])).toBeNull();
    expect(normalizeExcludeNamespaces([' ', ''])).toBeNull();
    expect(normalizeExcludeNamespaces([' kube-system ', '', 'istio-system'])).toEqual(['kube-system', 'istio-system']);
  });

  it('enablement selectors take the shape Go gives util.EnablementSelector (Helm default)', () => {
    const helmDefault = [
      { podSelector: { matchLabels: { 'istio.io/dataplane-mode': 'ambient' } } },
      {
        podSelector: { matchExpressions: [{ key: 'istio.io/dataplane-mode', operator: 'NotIn', values: ['none'] }] },
        namespaceSelector: { matchLabels: { 'istio.io/dataplane-mode': 'ambient' } },
      },
    ];
    const text = chain(
      '{"cniVersion":"0.3.1","name":"n","plugins":[{"type":"ptp"}]}',
      'a.conflist',
      pluginEntry({ ...SETTINGS, enablementSelectors: helmDefault }),
    ).text;
    expect(text).toContain(
      [
        '      "enablement_selectors": [',
        '        {',
        '          "namespaceSelector": {},',
        '          "podSelector": {',
        '            "matchLabels": {',
        '              "istio.io/dataplane-mode": "ambient"',
        '            }',
        '          }',
        '        },',
        '        {',
        '          "namespaceSelector": {',
        '            "matchLabels": {',
        '              "istio.io/dataplane-mode": "ambient"',
        '            }',
        '          },',
        '          "podSelector": {',
        '            "matchExpressions": [',
        '              {',
        '                "key": "istio.io/dataplane-mode",',
        '                "operator": "NotIn",',
        '                "values": [',
        '                  "none"',
        '                ]',
        '              }',
        '            ]',
        '          }',
        '        }',
        '      ],',
      ].join('\n'),
    );
  });

  it('drops unknown selector keys and empty fields, matches keys case-insensitively, refuses wrong types', () => {
    const e = pluginEntry({
      ...SETTINGS,
      enablementSelectors: [{ PodSelector: { matchLabels: {}, matchExpressions: [], extra: 1 }, other: true }],
    });
    expect(e['enablement_selectors']).toEqual([{ podSelector: {}, namespaceSelector: {} }]);
    expect(() => pluginEntry({ ...SETTINGS, enablementSelectors: ['x'] })).toThrow(TypeError);
    expect(() => pluginEntry({ ...SETTINGS, enablementSelectors: [{ podSelector: { matchLabels: { a: 1 } } }] })).toThrow(TypeError);
  });
});

describe('libcni validity', () => {
  const list = (o: object) => JSON.stringify({ name: 'n', cniVersion: '1.0.0', ...o });
  const cases: Array<[string, string, boolean]> = [
    ['a.conf', '{"type":"bridge"}', true],
    ['a.conf', '{"Type":"bridge"}', true], // encoding/json matches struct fields case-insensitively
    ['a.conf', '{"name":"x"}', false],
    ['a.conf', '{"type":""}', false],
    ['a.conf', '{"type":null}', false],
    ['a.conf', '{"type":5}', false],
    ['a.conf', '{"type":"bridge","ipam":"host-local"}', false],
    ['a.conf', '{"type":"bridge","ipam":{"type":7}}', false],
    ['a.conf', '{"type":"bridge","dns":{"nameservers":"1.1.1.1"}}', false],
    ['a.conf', '{"type":"bridge","capabilities":{"portMappings":"yes"}}', false],
    ['a.conf', '{"type":"bridge","cniVersion":1}', false],
    ['a.conf', '[]', false],
    ['a.conf', 'null', false],
    ['a.conf', '', false],
    ['a.conflist', list({ plugins: [{ type: 'ptp' }] }), true],
    ['a.conflist', list({ plugins: [] }), false],
    ['a.conflist', list({ plugins: [{ name: 'no-type' }] }), false],
    ['a.conflist', list({ plugins: [null] }), false],
    ['a.conflist', list({ plugins: 'ptp' }), false],
    ['a.conflist', list({ plugins: null }), false],
    ['a.conflist', list({}), false],
    ['a.conflist', list({ loadOnlyInlinedPlugins: true }), false],
    ['a.conflist', list({ cniVersion: 1, plugins: [{ type: 'ptp' }] }), false],
    ['a.conflist', list({ cniVersion: null, plugins: [{ type: 'ptp' }] }), false],
    ['a.conflist', list({ cniVersions: ['1.0.0', '0.4.0'], plugins: [{ type: 'ptp' }] }), true],
    ['a.conflist', list({ cniVersions: ['1.0.0.0'], plugins: [{ type: 'ptp' }] }), false],
    ['a.conflist', list({ cniVersions: '1.0.0', plugins: [{ type: 'ptp' }] }), false],
    ['a.conflist', list({ disableCheck: 'TRUE', plugins: [{ type: 'ptp' }] }), true],
    ['a.conflist', list({ disableGC: 'yes', plugins: [{ type: 'ptp' }] }), false],
    ['a.conflist', JSON.stringify({ name: 5, plugins: [{ type: 'ptp' }] }), false],
    ['a.conflist', JSON.stringify({ plugins: [{ type: 'ptp' }] }), false],
    ['a.conflist', JSON.stringify({ name: 'no-version', plugins: [{ type: 'ptp' }] }), true],
  ];
  for (const [name, text, valid] of cases) {
    it(`${name} ${text || '(empty)'} → ${valid ? 'valid' : 'invalid'}`, () => {
      expect(validateConfig(name, text).valid).toBe(valid);
    });
  }

  it('a list without inline plugins is valid with plugin files in <dir>/<name>/ (CNI 1.1)', () => {
    const text = JSON.stringify({ cniVersion: '1.1.0', name: 'net' });
    expect(pluginDirNetwork('a.conflist', text)).toBe('net');
    expect(pluginDirNetwork('a.conf', text)).toBeNull();
    expect(
      pluginDirNetwork('a.conflist', JSON.stringify({ name: 'net', loadOnlyInlinedPlugins: true, plugins: [{ type: 'x' }] })),
    ).toBeNull();
    expect(validateConfig('a.conflist', text, { texts: ['{"type":"ptp"}'] })).toMatchObject({ valid: true, plugins: 1 });
    expect(validateConfig('a.conflist', text, { texts: ['{"name":"no type"}'] }).valid).toBe(false);
    expect(validateConfig('a.conflist', text, { error: 'EACCES' }).valid).toBe(false);
    expect(validateConfig('a.conflist', text).valid).toBe(false);
  });

  it('pickPrimary: bytewise order, .conf/.conflist only, unreadable skipped, excluded names ignored', () => {
    const ok = '{"type":"ptp"}';
    const files = [
      { name: 'b.conf', text: ok },
      { name: 'B.conf', text: null },
      { name: 'a.json', text: ok },
      { name: 'c.conflist', text: ok },
      { name: '02-istio-cni.conflist', text: JSON.stringify({ name: 'x', plugins: [{ type: 'istio-cni' }] }) },
    ];
    expect(pickPrimary(files)?.name).toBe('02-istio-cni.conflist');
    expect(pickPrimary(files, undefined, ['02-istio-cni.conflist'])?.name).toBe('b.conf');
    expect(pickPrimary([])).toBeNull();
  });
});

describe('chain / unchain details', () => {
  const entry = pluginEntry(SETTINGS);

  it('removes every istio-cni typed plugin (Istio removes only the first) and keeps other plugins named istio-cni', () => {
    const text = JSON.stringify({
      cniVersion: '1.0.0',
      name: 'n',
      plugins: [{ type: 'istio-cni', old: 1 }, { type: 'ptp' }, { type: 'istio-cni', old: 2 }, { type: 'other', name: 'istio-cni' }],
    });
    const out = JSON.parse(chain(text, 'n.conflist', entry).text) as { plugins: Array<Record<string, unknown>> };
    expect(out.plugins.map((p) => p['type'])).toEqual(['ptp', 'other', 'istio-cni']);
    expect(JSON.parse(unchain(text)).plugins).toEqual([{ type: 'ptp' }, { name: 'istio-cni', type: 'other' }]);
  });

  it('a .conflist is always a list (as the runtime reads it), even with a top-level "type"', () => {
    expect(configKind('a.conflist', { type: 'x', plugins: [] })).toBe('conflist');
    expect(configKind('a.conf', { type: 'x' })).toBe('conf');
    expect(configKind('a.file', { plugins: [] })).toBe('conflist');
    const out = JSON.parse(chain(JSON.stringify({ name: 'n', type: 'x', plugins: [{ type: 'ptp' }] }), 'a.conflist', entry).text);
    expect(out.plugins).toHaveLength(2);
    expect(out.type).toBe('x');
  });

  it('a .conf keeps everything but its cniVersion inside the new list', () => {
    const out = chain('{"cniVersion":"1.0.0","name":"mynet","type":"ptp","mtu":1500}', '10-ptp.conf', entry);
    expect(out.fileName).toBe('10-ptp.conflist');
    expect(JSON.parse(out.text)).toMatchObject({
      cniVersion: '0.3.1',
      name: 'k8s-pod-network',
      plugins: [{ mtu: 1500, name: 'mynet', type: 'ptp' }, { type: 'istio-cni' }],
    });
  });

  it('re-marshals other plugins the Go way (HTML escaping, key order)', () => {
    const out = chain('{"name":"n","plugins":[{"type":"x","z":"a<b","a":1}]}', 'n.conflist', entry).text;
    expect(out).toContain('{\n      "a": 1,\n      "type": "x",\n      "z": "a\\u003cb"\n    }');
  });

  it('hasIstioEntry / sameConfig', () => {
    const chained = chain('{"name":"n","plugins":[{"type":"x"}]}', 'n.conflist', entry).text;
    expect(hasIstioEntry(chained)).toBe(true);
    expect(hasIstioEntry(unchain(chained))).toBe(false);
    expect(hasIstioEntry('not json')).toBe(false);
    expect(sameConfig(chained, JSON.stringify(JSON.parse(chained)))).toBe(true);
    expect(sameConfig(chained, unchain(chained))).toBe(false);
  });
});
