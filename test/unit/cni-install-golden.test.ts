// Byte-for-byte comparison with Istio's installer goldens (test/fixtures/istio-golden/install/,
// see the README there): cni/pkg/install/testdata (insertCNIConfig, Cleanup) and
// cni/test/testdata/{pre,expected} (the installer integration cases).

import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

import { describe, expect, it } from 'vitest';

import { loadAgentConfig } from '../../src/agent/config.js';
import { pluginSettingsFor } from '../../src/cni-install/from-agent-config.js';
import { chain, chainProblem, pickPrimary, unchain, validateConfig, type ConfFileEntry } from '../../src/cni-install/conflist.js';
import { pluginEntry, standaloneConfigText, type PluginConfigSettings } from '../../src/cni-install/plugin-config.js';
import { istioGoldenUrl } from '../fixtures/istio-golden.js';
import { ISTIO_INTEGRATION_SETTINGS, ISTIO_UNIT_SETTINGS } from '../helpers/istio-install-settings.js';

const INSTALL_DIR = istioGoldenUrl('install/');
const PRE_DIR = new URL('pre/', INSTALL_DIR);
const EXPECTED_DIR = new URL('expected/', INSTALL_DIR);

for (const dir of [INSTALL_DIR, PRE_DIR, EXPECTED_DIR]) {
  if (!existsSync(dir)) {
    throw new Error(`Istio installer golden files not found at ${fileURLToPath(dir)} (expected install/{*.golden,pre/,expected/})`);
  }
}

const read = (dir: URL, name: string): string => {
  const url = new URL(name, dir);
  if (!existsSync(url)) throw new Error(`golden file missing: ${fileURLToPath(url)}`);
  return readFileSync(url, 'utf8');
};
const unit = (name: string) => read(INSTALL_DIR, name);
const pre = (name: string) => read(PRE_DIR, name);
const expected = (name: string) => read(EXPECTED_DIR, name);

const UNIT_SETTINGS = ISTIO_UNIT_SETTINGS;
const OWNED_SETTINGS: PluginConfigSettings = { ...UNIT_SETTINGS, ambientEnabled: true };
const INTEGRATION_SETTINGS = ISTIO_INTEGRATION_SETTINGS;

describe('every golden file is used', () => {
  it('covers the whole install/ folder', () => {
    const used = new Set([
      'bridge.conf',
      'bridge.conf.golden',
      'list.conflist',
      'list.conflist.golden',
      'list-with-istio.conflist',
      'list-with-istio.conflist.golden',
      'list-no-istio.conflist',
      'invalid-arr.conflist',
      'invalid-map.conflist',
      'istio-owned.conflist.golden',
      'istio-owned-bridge.conflist.golden',
      'istio-cni.conf.template',
      'pre/',
      'expected/',
      'pre/bad_minikube_cni.conf',
      'pre/calico.conflist',
      'pre/minikube_cni.conf',
      'pre/non_json.conf',
      'pre/noname_calico.conflist',
      'pre/noplugins_calico.conflist',
      'pre/nover_calico.conflist',
      'expected/10-calico.conflist-istioconfig',
      'expected/YYY-istio-cni.conf',
      'expected/minikube_cni.conflist.clean',
      'expected/minikube_cni.conflist.expected',
    ]);
    const present = [
      ...readdirSync(INSTALL_DIR, { withFileTypes: true }).map((d) => d.name + (d.isDirectory() ? '/' : '')),
      ...readdirSync(PRE_DIR).map((n) => `pre/${n}`),
      ...readdirSync(EXPECTED_DIR).map((n) => `expected/${n}`),
    ];
    expect(present.filter((n) => !used.has(n))).toEqual([]);
  });
});

describe('insertCNIConfig goldens (cni/pkg/install/testdata)', () => {
  const entry = pluginEntry(UNIT_SETTINGS);

  it('bridge.conf: a single-plugin .conf becomes the k8s-pod-network list, renamed .conflist', () => {
    const out = chain(unit('bridge.conf'), 'bridge.conf', entry);
    expect(out.fileName).toBe('bridge.conflist');
    expect(out.text).toBe(unit('bridge.conf.golden'));
  });

  it('list.conflist: the entry is appended last, keys sorted, 2-space indent', () => {
    const out = chain(unit('list.conflist'), 'list.conflist', entry);
    expect(out.fileName).toBe('list.conflist');
    expect(out.text).toBe(unit('list.conflist.golden'));
  });

  it('list-with-istio.conflist: the old istio-cni entry is replaced', () => {
    expect(chain(unit('list-with-istio.conflist'), 'list-with-istio.conflist', entry).text).toBe(unit('list-with-istio.conflist.golden'));
  });

  it('a file under CNI_CONF_NAME with another extension keeps its name (the "undetectable.file" case)', () => {
    const out = chain(unit('list.conflist'), 'undetectable.file', entry);
    expect(out).toEqual({ fileName: 'undetectable.file', text: unit('list.conflist.golden') });
  });

  it('chaining is idempotent on every golden', () => {
    for (const [name, golden] of [
      ['bridge.conflist', 'bridge.conf.golden'],
      ['list.conflist', 'list.conflist.golden'],
      ['list.conflist', 'list-with-istio.conflist.golden'],
    ] as const) {
      expect(chain(unit(golden), name, entry).text).toBe(unit(golden));
    }
  });

  it('invalid-map.conflist and invalid-arr.conflist are refused (insert fails, libcni rejects them)', () => {
    expect(() => chain(unit('invalid-map.conflist'), 'invalid-map.conflist', entry)).toThrow(/plugin list/);
    expect(() => chain(unit('invalid-arr.conflist'), 'invalid-arr.conflist', entry)).toThrow(/JSON/);
    expect(validateConfig('invalid-map.conflist', unit('invalid-map.conflist'))).toMatchObject({
      valid: false,
      reason: expect.stringMatching(/no name/),
    });
    expect(validateConfig('invalid-arr.conflist', unit('invalid-arr.conflist'))).toMatchObject({ valid: false });
  });

  it('Cleanup: list-with-istio.conflist without our entry is list-no-istio.conflist', () => {
    expect(unchain(unit('list-with-istio.conflist'))).toBe(unit('list-no-istio.conflist'));
  });

  it('istio-cni.conf.template is a valid single-plugin .conf (type istio-cni)', () => {
    expect(validateConfig('istio-cni.conf', unit('istio-cni.conf.template'))).toMatchObject({ valid: true, kind: 'conf' });
  });
});

describe('Istio-owned config goldens (a copy of the primary plus our entry, ambient enabled)', () => {
  const entry = pluginEntry(OWNED_SETTINGS);
  it('istio-owned.conflist.golden from list.conflist', () => {
    expect(chain(unit('list.conflist'), 'list.conflist', entry).text).toBe(unit('istio-owned.conflist.golden'));
  });
  it('istio-owned-bridge.conflist.golden from bridge.conf', () => {
    expect(chain(unit('bridge.conf'), 'bridge.conf', entry).text).toBe(unit('istio-owned-bridge.conflist.golden'));
  });
});

describe('installer integration goldens (cni/test/testdata)', () => {
  const entry = pluginEntry(INTEGRATION_SETTINGS);

  it('calico.conflist → 10-calico.conflist-istioconfig, and back to calico.conflist on uninstall', () => {
    const out = chain(pre('calico.conflist'), '00-calico.conflist', entry);
    expect(out.fileName).toBe('00-calico.conflist');
    expect(out.text).toBe(expected('10-calico.conflist-istioconfig'));
    expect(unchain(out.text)).toBe(pre('calico.conflist'));
  });

  it('minikube_cni.conf → minikube_cni.conflist.expected, and minikube_cni.conflist.clean on uninstall', () => {
    const out = chain(pre('minikube_cni.conf'), '00-minikube_cni.conf', entry);
    expect(out.fileName).toBe('00-minikube_cni.conflist');
    expect(out.text).toBe(expected('minikube_cni.conflist.expected'));
    expect(unchain(out.text)).toBe(expected('minikube_cni.conflist.clean'));
  });

  it('standalone plugin: YYY-istio-cni.conf (Go struct order, cniVersion 0.3.1)', () => {
    expect(standaloneConfigText(INTEGRATION_SETTINGS)).toBe(expected('YYY-istio-cni.conf'));
  });

  it('libcni rejects the invalid inputs', () => {
    const reasons: Record<string, RegExp> = {
      'non_json.conf': /invalid JSON/,
      'bad_minikube_cni.conf': /missing 'type'/,
      'noname_calico.conflist': /no name/,
      'noplugins_calico.conflist': /no plugin configs found/,
    };
    for (const [name, reason] of Object.entries(reasons)) {
      const v = validateConfig(name, pre(name));
      expect(v, name).toMatchObject({ valid: false, reason: expect.stringMatching(reason) });
    }
  });

  it('nover_calico.conflist is VALID to libcni: cniVersion is optional in a list (it is in no upstream test case)', () => {
    // libcni v1.3.0 NetworkConfFromBytes only type-checks cniVersion when present, and a missing
    // version means 0.1.0; containerd and CRI-O load this file, so it has to count as a primary.
    expect(validateConfig('nover_calico.conflist', pre('nover_calico.conflist'))).toMatchObject({
      valid: true,
      kind: 'conflist',
      plugins: 2,
    });
  });

  it('the valid inputs pass', () => {
    expect(validateConfig('calico.conflist', pre('calico.conflist'))).toMatchObject({
      valid: true,
      kind: 'conflist',
      networkName: 'k8s-pod-network',
      plugins: 2,
    });
    expect(validateConfig('minikube_cni.conf', pre('minikube_cni.conf'))).toMatchObject({
      valid: true,
      kind: 'conf',
      networkName: 'rkt.kubernetes.io',
    });
  });

  // install_k8s_test.go TestInstall: files copied as 0<i>-<name>; the expected primary.
  const orderings: Array<{ files: string[]; confName?: string; primary: string | null; golden: string }> = [
    { files: ['calico.conflist'], primary: '00-calico.conflist', golden: '10-calico.conflist-istioconfig' },
    { files: ['minikube_cni.conf'], primary: '00-minikube_cni.conf', golden: 'minikube_cni.conflist.expected' },
    { files: ['calico.conflist', 'minikube_cni.conf'], primary: '00-calico.conflist', golden: '10-calico.conflist-istioconfig' },
    { files: ['minikube_cni.conf', 'calico.conflist'], primary: '00-minikube_cni.conf', golden: 'minikube_cni.conflist.expected' },
    {
      files: ['non_json.conf', 'minikube_cni.conf', 'calico.conflist'],
      primary: '01-minikube_cni.conf',
      golden: 'minikube_cni.conflist.expected',
    },
    {
      files: ['non_json.conf', 'calico.conflist', 'minikube_cni.conf'],
      primary: '01-calico.conflist',
      golden: '10-calico.conflist-istioconfig',
    },
    {
      files: ['bad_minikube_cni.conf', 'minikube_cni.conf', 'calico.conflist'],
      primary: '01-minikube_cni.conf',
      golden: 'minikube_cni.conflist.expected',
    },
    {
      files: ['bad_minikube_cni.conf', 'calico.conflist', 'minikube_cni.conf'],
      primary: '01-calico.conflist',
      golden: '10-calico.conflist-istioconfig',
    },
    {
      files: ['noname_calico.conflist', 'noplugins_calico.conflist', 'minikube_cni.conf', 'calico.conflist'],
      primary: '02-minikube_cni.conf',
      golden: 'minikube_cni.conflist.expected',
    },
    {
      files: ['noname_calico.conflist', 'noplugins_calico.conflist', 'calico.conflist', 'minikube_cni.conf'],
      primary: '02-calico.conflist',
      golden: '10-calico.conflist-istioconfig',
    },
    // CNI_CONF_NAME pointing at the missing twin of an existing file.
    { files: ['calico.conflist'], confName: '00-calico.conf', primary: '00-calico.conflist', golden: '10-calico.conflist-istioconfig' },
    {
      files: ['minikube_cni.conf'],
      confName: '00-minikube_cni.conflist',
      primary: '00-minikube_cni.conf',
      golden: 'minikube_cni.conflist.expected',
    },
    // CNI_CONF_NAME not there yet: wait, do not take another file.
    { files: ['calico.conflist'], confName: 'missing_initially.conf', primary: null, golden: '' },
    // Only invalid files: wait.
    { files: ['non_json.conf', 'bad_minikube_cni.conf', 'noname_calico.conflist', 'noplugins_calico.conflist'], primary: null, golden: '' },
  ];
  for (const o of orderings) {
    it(`primary of [${o.files.join(', ')}]${o.confName ? ` with CNI_CONF_NAME=${o.confName}` : ''} is ${o.primary ?? 'none (wait)'}`, () => {
      const files: ConfFileEntry[] = o.files.map((f, i) => ({ name: `0${i}-${f}`, text: pre(f) }));
      const choice = pickPrimary(files, o.confName);
      expect(choice?.name ?? null).toBe(o.primary);
      if (choice === null) return;
      const text = files.find((f) => f.name === choice.name)?.text as string;
      expect(chain(text, choice.name, entry).text).toBe(expected(o.golden));
    });
  }

  it('the skipped files are reported with their reason', () => {
    const files = ['non_json.conf', 'bad_minikube_cni.conf', 'calico.conflist'].map((f, i) => ({ name: `0${i}-${f}`, text: pre(f) }));
    expect(pickPrimary(files)?.skipped.map((s) => s.name)).toEqual(['00-non_json.conf', '01-bad_minikube_cni.conf']);
  });

  it('an explicitly named file that cannot be chained is not taken (waits)', () => {
    expect(chainProblem('x.conflist', pre('non_json.conf'))).toMatch(/JSON/);
    expect(pickPrimary([{ name: 'x.conflist', text: pre('non_json.conf') }], 'x.conflist')).toBeNull();
  });
});

// The entry from the agent's own settings (environment as Istio's chart renders it), beyond the
// defaults Istio's goldens use. The expected text is derived by hand from Istio's code at the
// golden commit, so each part says where it comes from:
//   cni/pkg/cmd/root.go constructConfig      PluginLogLevel = LevelToString(scope "cni-plugin"),
//                                             EnableAmbientDetectionRetry = ENABLE_AMBIENT_DETECTION_RETRY
//   cni/pkg/install/cniconfig.go             createCNIConfigFile: sigs.k8s.io/yaml.Unmarshal of
//                                             AMBIENT_ENABLEMENT_SELECTOR into []util.EnablementSelector,
//                                             json.MarshalIndent(plugin.Config) (struct order);
//                                             insertCNIConfig: json.Unmarshal into map[string]any and
//                                             util.MarshalCNIConfig (MarshalIndent "", "  " + "\n"), so in a
//                                             chained list every object's keys come out sorted
//   cni/pkg/util/enablement_selector.go      EnablementSelector{podSelector, namespaceSelector}, no omitempty
//   apimachinery metav1.LabelSelector        matchLabels,omitempty / matchExpressions,omitempty;
//                                             LabelSelectorRequirement key, operator, values,omitempty
describe('the entry from the agent configuration, with non-default selectors', () => {
  // Two entries: every key/operator shape Go decodes differently (omitted values for Exists, an
  // empty namespaceSelector, matchLabels with two keys in unsorted YAML order, `In` with values).
  const SELECTOR_YAML = [
    '- podSelector:',
    '    matchLabels:',
    '      team: payments',
    '      app.kubernetes.io/part-of: shop',
    '    matchExpressions:',
    '    - key: tier',
    '      operator: In',
    '      values: [web, api]',
    '- namespaceSelector:',
    '    matchExpressions:',
    '    - {key: mesh.example.com/ambient, operator: Exists}',
    '  unknownKey: dropped by Go (not a struct field)',
    '',
  ].join('\n');
  const env = {
    AMBIENT_ENABLEMENT_SELECTOR: SELECTOR_YAML,
    ENABLE_AMBIENT_DETECTION_RETRY: 'true',
    EXCLUDE_NAMESPACES: 'kube-system,istio-system',
    NATIVE_NFTABLES: 'false',
    POD_NAMESPACE: 'istio-system',
  };
  const settings = pluginSettingsFor(loadAgentConfig(['--log-output-level', 'default:info,cni-plugin:warn'], env));

  it('takes the selectors, the cni-plugin level and the retry flag from the configuration', () => {
    expect(settings).toMatchObject({
      logLevel: 'warn',
      enableAmbientDetectionRetry: true,
      excludeNamespaces: ['kube-system', 'istio-system'],
      nativeNftables: false,
    });
  });

  it('chained into list.conflist: map round trip, every key sorted', () => {
    const entry = [
      '    {',
      '      "ambient_enabled": true,', //                       cmd: AMBIENT_ENABLED (the only mode here)
      '      "cni_agent_run_dir": "/var/run/istio-cni",', //      CNI_AGENT_RUN_DIR default
      '      "dns": {},', //                                     types.NetConf DNS, no omitempty
      '      "enable_ambient_detection_retry": true,', //        ENABLE_AMBIENT_DETECTION_RETRY
      '      "enablement_selectors": [',
      '        {',
      '          "namespaceSelector": {},', //                   zero LabelSelector (entry 0 has none)
      '          "podSelector": {',
      '            "matchExpressions": [', //                    sorted before matchLabels in the map
      '              {',
      '                "key": "tier",',
      '                "operator": "In",',
      '                "values": [', //                          YAML flow list, order kept
      '                  "web",',
      '                  "api"',
      '                ]',
      '              }',
      '            ],',
      '            "matchLabels": {',
      '              "app.kubernetes.io/part-of": "shop",', //   map keys sorted bytewise
      '              "team": "payments"',
      '            }',
      '          }',
      '        },',
      '        {',
      '          "namespaceSelector": {',
      '            "matchExpressions": [',
      '              {',
      '                "key": "mesh.example.com/ambient",',
      '                "operator": "Exists"', //                  values omitted (omitempty, none given)
      '              }',
      '            ]',
      '          },',
      '          "podSelector": {}', //                          no podSelector; unknownKey dropped
      '        }',
      '      ],',
      '      "exclude_namespaces": [', //                        util.SplitExcludeNamespaces
      '        "kube-system",',
      '        "istio-system"',
      '      ],',
      '      "ipam": {},', //                                    types.NetConf IPAM, no omitempty
      '      "name": "istio-cni",',
      '      "native_nftables": false,', //                      NATIVE_NFTABLES=false
      '      "plugin_log_level": "warn",', //                    --log_output_level cni-plugin:warn
      '      "pod_namespace": "istio-system",', //               POD_NAMESPACE
      '      "type": "istio-cni"',
      '    }',
    ];
    // list.conflist.golden is list.conflist chained with Istio's unit-test entry: the same file up
    // to that entry (the last element of "plugins"), then ours.
    const golden = unit('list.conflist.golden');
    const head = golden.slice(0, golden.lastIndexOf('    {\n      "ambient_enabled"'));
    const expectedText = `${head}${entry.join('\n')}\n  ]\n}\n`;
    expect(chain(unit('list.conflist'), 'list.conflist', pluginEntry(settings)).text).toBe(expectedText);
  });

  it('standalone (CHAINED_CNI_PLUGIN=false): plugin.Config marshalled directly, struct order', () => {
    const text = standaloneConfigText(settings);
    const selectors = text.slice(text.indexOf('  "enablement_selectors"'), text.indexOf('  "exclude_namespaces"'));
    expect(selectors).toBe(
      [
        '  "enablement_selectors": [',
        '    {',
        '      "podSelector": {', //                          EnablementSelector: podSelector first
        '        "matchLabels": {', //                        LabelSelector: matchLabels before matchExpressions
        '          "app.kubernetes.io/part-of": "shop",', //  a Go map: sorted even in a struct
        '          "team": "payments"',
        '        },',
        '        "matchExpressions": [',
        '          {',
        '            "key": "tier",',
        '            "operator": "In",',
        '            "values": [',
        '              "web",',
        '              "api"',
        '            ]',
        '          }',
        '        ]',
        '      },',
        '      "namespaceSelector": {}',
        '    },',
        '    {',
        '      "podSelector": {},',
        '      "namespaceSelector": {',
        '        "matchExpressions": [',
        '          {',
        '            "key": "mesh.example.com/ambient",',
        '            "operator": "Exists"',
        '          }',
        '        ]',
        '      }',
        '    }',
        '  ],',
        '',
      ].join('\n'),
    );
    // plugin.Config's own fields after types.NetConf's, in declaration order.
    expect(text).toContain('  "plugin_log_level": "warn",\n  "cni_agent_run_dir": "/var/run/istio-cni",\n  "ambient_enabled": true,\n');
    expect(text.endsWith('  "native_nftables": false,\n  "enable_ambient_detection_retry": true\n}\n')).toBe(true);
  });

  it("unset AMBIENT_ENABLEMENT_SELECTOR writes the chart's default selectors (the ones the agent applies)", () => {
    const entry = pluginEntry(pluginSettingsFor(loadAgentConfig([], {})));
    expect(entry['enablement_selectors']).toEqual([
      { podSelector: { matchLabels: { 'istio.io/dataplane-mode': 'ambient' } }, namespaceSelector: {} },
      {
        podSelector: { matchExpressions: [{ key: 'istio.io/dataplane-mode', operator: 'NotIn', values: ['none'] }] },
        namespaceSelector: { matchLabels: { 'istio.io/dataplane-mode': 'ambient' } },
      },
    ]);
    expect(entry).toMatchObject({ plugin_log_level: 'info', enable_ambient_detection_retry: false });
  });

  it('`[]` writes no selector, and the levels follow Istio: bare = default scope, all = every scope, none', () => {
    expect(pluginEntry(pluginSettingsFor(loadAgentConfig([], { AMBIENT_ENABLEMENT_SELECTOR: '[]' })))['enablement_selectors']).toEqual([]);
    const level = (spec: string): unknown =>
      pluginEntry(pluginSettingsFor(loadAgentConfig(['--log-output-level', spec], {})))['plugin_log_level'];
    expect(level('debug')).toBe('info'); // a bare level is the default scope only
    expect(level('all:debug')).toBe('debug');
    expect(level('cni-plugin:none')).toBe('none');
    expect(level('cni-plugin:fatal')).toBe('fatal');
  });
});
