// Which pods are ambient: AMBIENT_ENABLEMENT_SELECTOR parsing, Kubernetes label selector
// semantics, and Istio's decisions (Matches, MatchesNamespace, exclusions, ztunnel pods).
import type { V1LabelSelector, V1Namespace, V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import {
  Enablement,
  ISTIO_DEFAULT_SELECTORS,
  matchesLabelSelector,
  parseEnablementSelectors,
  type EnablementSelector,
} from '../../src/kube/enablement.js';

const MODE = 'istio.io/dataplane-mode';

function pod(
  opts: { ns?: string; labels?: Record<string, string>; annotations?: Record<string, string>; hostNetwork?: boolean } = {},
): V1Pod {
  return {
    metadata: { name: 'p', namespace: opts.ns ?? 'apps', uid: 'u1', labels: opts.labels, annotations: opts.annotations },
    spec: { containers: [{ name: 'c' }], hostNetwork: opts.hostNetwork },
  };
}

function ns(name: string, labels?: Record<string, string>): V1Namespace {
  return { metadata: { name, labels } };
}

function enablement(opts: { selectors?: readonly EnablementSelector[]; exclude?: string[] } = {}): Enablement {
  return new Enablement({
    selectors: opts.selectors ?? ISTIO_DEFAULT_SELECTORS,
    excludeNamespaces: opts.exclude ?? [],
    systemNamespace: 'istio-system',
  });
}

describe('parseEnablementSelectors', () => {
  const HELM_DEFAULT_YAML = `
- podSelector:
    matchLabels: {istio.io/dataplane-mode: ambient}
- podSelector:
    matchExpressions:
    - key: istio.io/dataplane-mode
      operator: NotIn
      values: [none]
  namespaceSelector:
    matchLabels:
      istio.io/dataplane-mode: ambient
`;

  it('unset, blank, comment-only or null: Istio Helm default', () => {
    const expected = [
      { podSelector: { matchLabels: { [MODE]: 'ambient' } }, namespaceSelector: {} },
      {
        podSelector: { matchExpressions: [{ key: MODE, operator: 'NotIn', values: ['none'] }] },
        namespaceSelector: { matchLabels: { [MODE]: 'ambient' } },
      },
    ];
    for (const text of [undefined, '', '  \n', '# nothing here\n', 'null', '~']) {
      expect(parseEnablementSelectors(text)).toEqual(expected);
    }
    expect(ISTIO_DEFAULT_SELECTORS).toEqual(expected);
  });

  it('the Helm YAML itself parses to the defaults', () => {
    expect(parseEnablementSelectors(HELM_DEFAULT_YAML)).toEqual(ISTIO_DEFAULT_SELECTORS);
  });

  it('returns fresh objects: the frozen defaults are never handed out', () => {
    const a = parseEnablementSelectors(undefined);
    a[0]!.podSelector.matchLabels![MODE] = 'changed';
    expect(ISTIO_DEFAULT_SELECTORS[0]!.podSelector.matchLabels![MODE]).toBe('ambient');
    expect(() => {
      (ISTIO_DEFAULT_SELECTORS[0]!.podSelector.matchLabels as Record<string, string>)[MODE] = 'x';
    }).toThrow();
  });

  it('custom lists, JSON flow style too; every operator', () => {
    const parsed = parseEnablementSelectors(`
- podSelector:
    matchExpressions:
    - {key: team, operator: In, values: [a, b]}
    - {key: legacy, operator: DoesNotExist}
  namespaceSelector:
    matchExpressions:
    - {key: mesh, operator: Exists}
- {}
`);
    expect(parsed).toEqual([
      {
        podSelector: {
          matchExpressions: [
            { key: 'team', operator: 'In', values: ['a', 'b'] },
            { key: 'legacy', operator: 'DoesNotExist' },
          ],
        },
        namespaceSelector: { matchExpressions: [{ key: 'mesh', operator: 'Exists' }] },
      },
      { podSelector: {}, namespaceSelector: {} },
    ]);
    expect(parseEnablementSelectors('[{"podSelector": {"matchLabels": {"x": "y"}}}]')).toEqual([
      { podSelector: { matchLabels: { x: 'y' } }, namespaceSelector: {} },
    ]);
  });

  it('decodes like Go: keys case-insensitive, unknown keys ignored, null entries are empty selectors', () => {
    expect(parseEnablementSelectors('- PodSelector: {MatchLabels: {a: b}}\n  extra: 1\n- null\n- namespaceSelector: null\n')).toEqual([
      { podSelector: { matchLabels: { a: 'b' } }, namespaceSelector: {} },
      { podSelector: {}, namespaceSelector: {} },
      { podSelector: {}, namespaceSelector: {} },
    ]);
  });

  it('an explicit empty list selects nothing', () => {
    expect(parseEnablementSelectors('[]')).toEqual([]);
    expect(enablement({ selectors: parseEnablementSelectors('[]') }).podMatches(pod({ labels: { [MODE]: 'ambient' } }), ns('apps'))).toBe(
      false,
    );
  });

  it('label values that look like dates or numbers when quoted stay strings', () => {
    expect(parseEnablementSelectors("- podSelector: {matchLabels: {since: 2024-01-01, v: '1'}}")).toEqual([
      { podSelector: { matchLabels: { since: '2024-01-01', v: '1' } }, namespaceSelector: {} },
    ]);
  });

  it.each([
    ['invalid YAML', '- podSelector: {matchLabels: [', /AMBIENT_ENABLEMENT_SELECTOR: invalid YAML/],
    ['two documents', '- {}\n---\n- {}\n', /invalid YAML/],
    ['a map instead of a list', 'podSelector: {}', /expected a list of \{podSelector, namespaceSelector\} entries, got an object/],
    ['a string', 'ambient', /expected a list.*got string "ambient"/],
    ['an entry that is not an object', '- {}\n- ambient\n', /entry 1: expected an object/],
    ['a selector that is not an object', '- podSelector: [a]', /entry 0 podSelector: expected an object/],
    ['matchLabels not a map', '- podSelector: {matchLabels: [a]}', /entry 0 podSelector\.matchLabels: expected a map/],
    [
      'an unquoted number label value',
      '- podSelector: {matchLabels: {v: 1}}',
      /matchLabels\["v"\]: expected a string, got number 1 \(quote it\)/,
    ],
    [
      'a boolean label value',
      '- namespaceSelector: {matchLabels: {on: true}}',
      /entry 0 namespaceSelector\.matchLabels\["on"\]: expected a string/,
    ],
    ['matchExpressions not a list', '- podSelector: {matchExpressions: {key: a}}', /matchExpressions: expected a list/],
    [
      'an unknown operator',
      '- {}\n- podSelector: {matchExpressions: [{key: a, operator: Equals, values: [b]}]}',
      /entry 1 podSelector\.matchExpressions\[0\]: "Equals" is not a valid label selector operator/,
    ],
    [
      'a lower-case operator',
      '- podSelector: {matchExpressions: [{key: a, operator: in, values: [b]}]}',
      /"in" is not a valid label selector operator/,
    ],
    ['a missing operator', '- podSelector: {matchExpressions: [{key: a}]}', /"" is not a valid label selector operator/],
    [
      'In without values',
      '- podSelector: {matchExpressions: [{key: a, operator: In}]}',
      /matchExpressions\[0\]: operator In needs a non-empty values list/,
    ],
    [
      'NotIn with an empty list',
      '- namespaceSelector: {matchExpressions: [{key: a, operator: NotIn, values: []}]}',
      /entry 0 namespaceSelector\.matchExpressions\[0\]: operator NotIn needs a non-empty values list/,
    ],
    [
      'Exists with values',
      '- podSelector: {matchExpressions: [{key: a, operator: Exists, values: [b]}]}',
      /operator Exists takes no values/,
    ],
    [
      'DoesNotExist with values',
      '- podSelector: {matchExpressions: [{key: a, operator: DoesNotExist, values: [b]}]}',
      /operator DoesNotExist takes no values/,
    ],
    ['values not a list', '- podSelector: {matchExpressions: [{key: a, operator: In, values: b}]}', /values: expected a list/],
    ['a non-string value', '- podSelector: {matchExpressions: [{key: a, operator: In, values: [1]}]}', /values\[0\]: expected a string/],
    ['an invalid label key', '- podSelector: {matchLabels: {"bad key": x}}', /invalid label key "bad key"/],
    [
      'an invalid key prefix',
      '- podSelector: {matchExpressions: [{key: "Istio.IO/x", operator: Exists}]}',
      /invalid label key "Istio.IO\/x": prefix part/,
    ],
    [
      'an empty key',
      '- podSelector: {matchExpressions: [{key: "", operator: Exists}]}',
      /invalid label key "": name part must be non-empty/,
    ],
    ['an invalid label value', '- podSelector: {matchLabels: {a: "-x"}}', /invalid label value "-x"/],
    [
      'a too-long value',
      `- podSelector: {matchExpressions: [{key: a, operator: In, values: [${'v'.repeat(64)}]}]}`,
      /no more than 63 characters/,
    ],
  ])('rejects %s', (_name, text, message) => {
    expect(() => parseEnablementSelectors(text)).toThrow(message);
  });

  it('the constructor validates programmatic selectors too', () => {
    expect(() =>
      enablement({ selectors: [{ podSelector: { matchExpressions: [{ key: 'a', operator: 'In' }] }, namespaceSelector: {} }] }),
    ).toThrow(/entry 0 podSelector\.matchExpressions\[0\]: operator In needs/);
  });
});

describe('matchesLabelSelector', () => {
  const labels = { app: 'web', tier: 'front', empty: '' };
  const cases: Array<[string, V1LabelSelector, boolean]> = [
    ['empty selector', {}, true],
    ['empty lists', { matchLabels: {}, matchExpressions: [] }, true],
    ['matchLabels equal', { matchLabels: { app: 'web' } }, true],
    ['matchLabels all must match', { matchLabels: { app: 'web', tier: 'back' } }, false],
    ['matchLabels absent key', { matchLabels: { zone: 'a' } }, false],
    ['matchLabels empty value', { matchLabels: { empty: '' } }, true],
    ['matchLabels empty value, absent key', { matchLabels: { other: '' } }, false],
    ['In', { matchExpressions: [{ key: 'app', operator: 'In', values: ['db', 'web'] }] }, true],
    ['In, other value', { matchExpressions: [{ key: 'app', operator: 'In', values: ['db'] }] }, false],
    ['In, absent key', { matchExpressions: [{ key: 'zone', operator: 'In', values: ['a'] }] }, false],
    ['NotIn', { matchExpressions: [{ key: 'app', operator: 'NotIn', values: ['db'] }] }, true],
    ['NotIn, listed value', { matchExpressions: [{ key: 'app', operator: 'NotIn', values: ['web'] }] }, false],
    ['NotIn, absent key matches', { matchExpressions: [{ key: 'zone', operator: 'NotIn', values: ['a'] }] }, true],
    ['Exists', { matchExpressions: [{ key: 'tier', operator: 'Exists' }] }, true],
    ['Exists, empty value', { matchExpressions: [{ key: 'empty', operator: 'Exists' }] }, true],
    ['Exists, absent', { matchExpressions: [{ key: 'zone', operator: 'Exists' }] }, false],
    ['DoesNotExist', { matchExpressions: [{ key: 'zone', operator: 'DoesNotExist' }] }, true],
    ['DoesNotExist, present', { matchExpressions: [{ key: 'app', operator: 'DoesNotExist' }] }, false],
    [
      'matchLabels AND expressions',
      { matchLabels: { app: 'web' }, matchExpressions: [{ key: 'tier', operator: 'In', values: ['back'] }] },
      false,
    ],
    [
      'every expression',
      {
        matchExpressions: [
          { key: 'app', operator: 'Exists' },
          { key: 'zone', operator: 'DoesNotExist' },
        ],
      },
      true,
    ],
    ['unknown operator never matches', { matchExpressions: [{ key: 'app', operator: 'Gt', values: ['1'] }] }, false],
    ['prototype keys are not labels', { matchExpressions: [{ key: 'constructor', operator: 'Exists' }] }, false],
  ];
  it.each(cases)('%s', (_name, selector, want) => {
    expect(matchesLabelSelector(selector, labels)).toBe(want);
  });

  it('no labels at all', () => {
    expect(matchesLabelSelector({}, undefined)).toBe(true);
    expect(matchesLabelSelector({ matchExpressions: [{ key: 'a', operator: 'NotIn', values: ['x'] }] }, undefined)).toBe(true);
    expect(matchesLabelSelector({ matchExpressions: [{ key: 'a', operator: 'Exists' }] }, {})).toBe(false);
  });
});

describe('Enablement with Istio default selectors', () => {
  const e = enablement({ exclude: ['kube-system', ' ', ' legacy '] });
  const ambientNs = ns('apps', { [MODE]: 'ambient' });
  const plainNs = ns('apps', { team: 'x' });

  it('a pod labelled ambient, in any namespace', () => {
    expect(e.podMatches(pod({ labels: { [MODE]: 'ambient' } }), plainNs)).toBe(true);
    expect(e.podMatches(pod({ labels: { [MODE]: 'ambient' } }), ns('apps'))).toBe(true);
    expect(e.podMatches(pod({ labels: { [MODE]: 'ambient' } }), ns('apps', { [MODE]: 'none' }))).toBe(true);
  });

  it('a namespace labelled ambient: unlabelled pods are in, pods labelled none opt out', () => {
    expect(e.podMatches(pod(), ambientNs)).toBe(true);
    expect(e.podMatches(pod({ labels: { app: 'web' } }), ambientNs)).toBe(true);
    expect(e.podMatches(pod({ labels: { [MODE]: 'none' } }), ambientNs)).toBe(false);
    expect(e.podMatches(pod({ labels: { [MODE]: 'something-else' } }), ambientNs)).toBe(true);
  });

  it('neither pod nor namespace labelled: not ambient', () => {
    expect(e.podMatches(pod({ labels: { app: 'web' } }), plainNs)).toBe(false);
    expect(e.podMatches(pod(), ns('apps', { [MODE]: 'sidecar' }))).toBe(false);
  });

  it('host-network pods never, whatever the labels', () => {
    expect(e.podMatches(pod({ hostNetwork: true, labels: { [MODE]: 'ambient' } }), ambientNs)).toBe(false);
    expect(e.podMatches(pod({ hostNetwork: false, labels: { [MODE]: 'ambient' } }), ambientNs)).toBe(true);
  });

  it('pods with a sidecar never (annotation present, even empty)', () => {
    expect(
      e.podMatches(
        pod({ labels: { [MODE]: 'ambient' }, annotations: { 'sidecar.istio.io/status': '{"containers":["istio-proxy"]}' } }),
        ambientNs,
      ),
    ).toBe(false);
    expect(e.podMatches(pod({ annotations: { 'sidecar.istio.io/status': '' } }), ambientNs)).toBe(false);
    expect(e.podMatches(pod({ annotations: { 'sidecar.istio.io/inject': 'false' } }), ambientNs)).toBe(true);
  });

  it('a missing namespace object matches only entries with an empty namespaceSelector', () => {
    expect(e.podMatches(pod({ labels: { [MODE]: 'ambient' } }), undefined)).toBe(true);
    expect(e.podMatches(pod(), undefined)).toBe(false);
    // A negative namespace selector would match empty labels, but not an unknown namespace.
    const neg = enablement({
      selectors: [{ podSelector: {}, namespaceSelector: { matchExpressions: [{ key: 'x', operator: 'DoesNotExist' }] } }],
    });
    expect(neg.podMatches(pod(), ns('apps'))).toBe(true);
    expect(neg.podMatches(pod(), undefined)).toBe(false);
  });

  it('excluded namespace: the selectors match (podMatches) but it should not be enabled', () => {
    const p = pod({ ns: 'kube-system', labels: { [MODE]: 'ambient' } });
    const kubeSystem = ns('kube-system', { [MODE]: 'ambient' });
    expect(e.podMatches(p, kubeSystem)).toBe(true);
    expect(e.shouldBeEnabled(p, kubeSystem)).toBe(false);
    expect(e.shouldBeEnabled(pod({ ns: 'legacy', labels: { [MODE]: 'ambient' } }), undefined)).toBe(false); // trimmed
    expect(e.shouldBeEnabled(pod({ labels: { [MODE]: 'ambient' } }), plainNs)).toBe(true);
    expect(e.shouldBeEnabled(pod({ labels: { [MODE]: 'none' } }), ambientNs)).toBe(false);
    expect(e.isExcludedNamespace('kube-system')).toBe(true);
    expect(e.isExcludedNamespace('')).toBe(false);
  });

  it('ztunnel pods: app=ztunnel in the system namespace only', () => {
    expect(e.isZtunnelPod(pod({ ns: 'istio-system', labels: { app: 'ztunnel' } }))).toBe(true);
    expect(e.isZtunnelPod(pod({ ns: 'apps', labels: { app: 'ztunnel' } }))).toBe(false);
    expect(e.isZtunnelPod(pod({ ns: 'istio-system', labels: { app: 'istiod' } }))).toBe(false);
    expect(e.isZtunnelPod(pod({ ns: 'istio-system' }))).toBe(false);
    const other = new Enablement({ selectors: ISTIO_DEFAULT_SELECTORS, excludeNamespaces: [], systemNamespace: 'mesh' });
    expect(other.isZtunnelPod(pod({ ns: 'mesh', labels: { app: 'ztunnel' } }))).toBe(true);
  });

  it('namespaceMatches ignores entries with an empty namespaceSelector (the pod-label entry)', () => {
    expect(e.namespaceMatches({ [MODE]: 'ambient' })).toBe(true);
    expect(e.namespaceMatches({ [MODE]: 'none' })).toBe(false);
    expect(e.namespaceMatches({})).toBe(false);
    expect(e.namespaceMatches(undefined)).toBe(false);
    const onlyEmpty = enablement({ selectors: [{ podSelector: {}, namespaceSelector: {} }] });
    expect(onlyEmpty.namespaceMatches({ anything: 'x' })).toBe(false);
    expect(onlyEmpty.podMatches(pod(), ns('apps'))).toBe(true);
  });

  it('snapshotFor: matching, non-excluded namespaces, sorted; exclusions as configured', () => {
    const snapshot = e.snapshotFor([
      ns('zeta', { [MODE]: 'ambient' }),
      ns('alpha', { [MODE]: 'ambient' }),
      ns('kube-system', { [MODE]: 'ambient' }),
      ns('plain'),
      ns('opted-out', { [MODE]: 'none' }),
      { metadata: { labels: { [MODE]: 'ambient' } } },
    ]);
    expect(snapshot).toEqual({ allNamespaces: false, namespaces: ['alpha', 'zeta'], excludedNamespaces: ['kube-system', 'legacy'] });
    expect(enablement().snapshotFor([])).toEqual({ allNamespaces: false, namespaces: [], excludedNamespaces: [] });
  });
});

describe('Enablement with custom selectors', () => {
  const e = enablement({
    selectors: parseEnablementSelectors(`
- podSelector: {matchExpressions: [{key: app, operator: In, values: [web, api]}]}
  namespaceSelector: {matchExpressions: [{key: env, operator: NotIn, values: [dev]}]}
- podSelector: {matchLabels: {mesh: "on"}}
  namespaceSelector: {matchExpressions: [{key: mesh-all, operator: Exists}]}
`),
  });

  it('both selectors of one entry must match; any entry suffices', () => {
    expect(e.podMatches(pod({ labels: { app: 'web' } }), ns('a', { env: 'prod' }))).toBe(true);
    expect(e.podMatches(pod({ labels: { app: 'web' } }), ns('a'))).toBe(true); // NotIn: absent key
    expect(e.podMatches(pod({ labels: { app: 'web' } }), ns('a', { env: 'dev' }))).toBe(false);
    expect(e.podMatches(pod({ labels: { mesh: 'on' } }), ns('a', { env: 'dev', 'mesh-all': '' }))).toBe(true);
    expect(e.podMatches(pod({ labels: { mesh: 'on' } }), ns('a', { env: 'dev' }))).toBe(false);
    expect(e.podMatches(pod({ labels: { app: 'db' } }), ns('a', { env: 'prod' }))).toBe(false);
  });

  it('namespaceMatches uses every non-empty namespaceSelector', () => {
    expect(e.namespaceMatches({ env: 'prod' })).toBe(true);
    expect(e.namespaceMatches({})).toBe(true); // NotIn matches an unlabelled namespace
    expect(e.namespaceMatches({ env: 'dev' })).toBe(false);
    expect(e.namespaceMatches({ env: 'dev', 'mesh-all': 'x' })).toBe(true);
  });
});
