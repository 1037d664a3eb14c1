// Which pods belong in the ambient mesh, decided exactly as Istio's node agent decides it
// (cni/pkg/util/enablement_selector.go, podutil.go, nodeagent/informers.go):
//
// - AMBIENT_ENABLEMENT_SELECTOR is a YAML list of {podSelector, namespaceSelector} Kubernetes
//   label selectors; a pod is ambient when ANY entry has BOTH selectors matching (the pod's
//   labels, its namespace's labels). An empty selector matches everything.
// - Host-network pods and pods with a sidecar (annotation sidecar.istio.io/status) never are:
//   rules for a host-network pod would land in the host netns and break the node, and a sidecar
//   plus ztunnel on one pod is not supported.
// - EXCLUDE_NAMESPACES wins over the selectors on the informer path (shouldBeEnabled).
//
// The selectors are validated when the agent starts, with Kubernetes' own rules
// (metav1.LabelSelectorAsSelector): a bad selector is a misconfiguration and Istio's agent
// refuses to start on it, so this one does too, with a message naming the entry.
import type { V1LabelSelector, V1LabelSelectorRequirement, V1Namespace, V1Pod } from '@kubernetes/client-node';
import { CORE_SCHEMA, load as loadYaml } from 'js-yaml';
import { goFieldKeys, isJsonObject, type JsonObject } from '../util/go-json.js';

/** The pod/namespace label that opts in (`ambient`) or out (`none`). */
export const LABEL_DATAPLANE_MODE = 'istio.io/dataplane-mode';
export const DATAPLANE_MODE_AMBIENT = 'ambient';
export const DATAPLANE_MODE_NONE = 'none';
/** Present on pods that have an Istio sidecar (set by the injector). */
export const ANNOTATION_SIDECAR_STATUS = 'sidecar.istio.io/status';
/** The label that, in the system namespace, marks ztunnel's own pods. */
export const LABEL_APP = 'app';
export const ZTUNNEL_APP = 'ztunnel';

export interface EnablementSelector {
  podSelector: V1LabelSelector;
  namespaceSelector: V1LabelSelector;
}

/** Istio's Helm default (manifests/charts/istio-cni/values.yaml, ambient.enablementSelectors). */
export const ISTIO_DEFAULT_SELECTORS: readonly EnablementSelector[] = deepFreeze([
  // A pod labelled ambient, in any namespace.
  {
    podSelector: { matchLabels: { [LABEL_DATAPLANE_MODE]: DATAPLANE_MODE_AMBIENT } },
    namespaceSelector: {},
  },
  // Any pod not labelled `none`, in a namespace labelled ambient.
  {
    podSelector: { matchExpressions: [{ key: LABEL_DATAPLANE_MODE, operator: 'NotIn', values: [DATAPLANE_MODE_NONE] }] },
    namespaceSelector: { matchLabels: { [LABEL_DATAPLANE_MODE]: DATAPLANE_MODE_AMBIENT } },
  },
]);

const OPERATORS = ['In', 'NotIn', 'Exists', 'DoesNotExist'] as const;

/**
 * Parses AMBIENT_ENABLEMENT_SELECTOR. Unset or blank (or a comment-only / `null` document)
 * gives Istio's Helm default, which is what every Istio install passes. `[]` is honoured: no
 * pod is ambient. Decoding follows Go's (sigs.k8s.io/yaml → encoding/json into
 * []util.EnablementSelector): unknown keys are ignored, keys match case-insensitively, a null
 * entry or selector is the zero value (matches everything), and a wrong type is an error.
 * Throws on invalid YAML, a non-list, or a selector Kubernetes would reject.
 */
export function parseEnablementSelectors(yamlText: string | undefined): EnablementSelector[] {
  if (yamlText === undefined || yamlText.trim() === '') return cloneSelectors(ISTIO_DEFAULT_SELECTORS);
  let doc: unknown;
  try {
    // CORE_SCHEMA: no timestamps or binary; a label value such as 2024-01-01 stays a string.
    doc = loadYaml(yamlText, { schema: CORE_SCHEMA });
  } catch (err) {
    throw new Error(`AMBIENT_ENABLEMENT_SELECTOR: invalid YAML: ${(err as Error).message.split('\n')[0]}`, { cause: err });
  }
  if (doc === undefined || doc === null) return cloneSelectors(ISTIO_DEFAULT_SELECTORS);
  if (!Array.isArray(doc)) {
    throw new Error(`AMBIENT_ENABLEMENT_SELECTOR: expected a list of {podSelector, namespaceSelector} entries, got ${describe(doc)}`);
  }
  return doc.map((entry: unknown, i) => {
    const where = `AMBIENT_ENABLEMENT_SELECTOR entry ${i}`;
    if (entry === null || entry === undefined) return { podSelector: {}, namespaceSelector: {} };
    if (!isJsonObject(entry)) throw new Error(`${where}: expected an object with podSelector/namespaceSelector, got ${describe(entry)}`);
    const selector = {
      podSelector: decodeLabelSelector(goField(entry, 'podSelector'), `${where} podSelector`),
      namespaceSelector: decodeLabelSelector(goField(entry, 'namespaceSelector'), `${where} namespaceSelector`),
    };
    validateEnablementSelector(selector, i);
    return selector;
  });
}

/**
 * Throws an Error naming the entry when Kubernetes would reject the selector
 * (metav1.LabelSelectorAsSelector): unknown operator, In/NotIn without values, Exists/
 * DoesNotExist with values, or a label key or value that is not valid.
 */
export function validateEnablementSelector(selector: EnablementSelector, index: number): void {
  validateLabelSelector(selector.podSelector, `AMBIENT_ENABLEMENT_SELECTOR entry ${index} podSelector`);
  validateLabelSelector(selector.namespaceSelector, `AMBIENT_ENABLEMENT_SELECTOR entry ${index} namespaceSelector`);
}

/** True when the selector has no requirement at all (Kubernetes: labels.Everything()). */
export function isEmptyLabelSelector(selector: V1LabelSelector): boolean {
  return Object.keys(selector.matchLabels ?? {}).length === 0 && (selector.matchExpressions ?? []).length === 0;
}

/**
 * Kubernetes label selector semantics: every matchLabels pair AND every matchExpression.
 * In: the key is present with one of the values; NotIn: the key is absent or its value is not
 * listed; Exists / DoesNotExist: presence. An empty selector matches everything. An invalid
 * requirement (which parse/validate refuse) matches nothing.
 */
export function matchesLabelSelector(selector: V1LabelSelector, labels: Readonly<Record<string, string>> | undefined): boolean {
  const set = labels ?? {};
  const has = (k: string): boolean => Object.prototype.hasOwnProperty.call(set, k);
  for (const [k, v] of Object.entries(selector.matchLabels ?? {})) {
    if (!has(k) || set[k] !== v) return false;
  }
  for (const req of selector.matchExpressions ?? []) {
    const present = has(req.key);
    const values = req.values ?? [];
    switch (req.operator) {
      case 'In':
        if (!present || !values.includes(set[req.key] as string)) return false;
        break;
      case 'NotIn':
        if (present && values.includes(set[req.key] as string)) return false;
        break;
      case 'Exists':
        if (!present) return false;
        break;
      case 'DoesNotExist':
        if (present) return false;
        break;
      default:
        return false;
    }
  }
  return true;
}

export interface EnablementOptions {
  selectors: readonly EnablementSelector[];
  /** EXCLUDE_NAMESPACES (already split); entries are trimmed and blanks dropped. */
  excludeNamespaces: readonly string[];
  /** POD_NAMESPACE, where ztunnel runs (istio-system). */
  systemNamespace: string;
}

/** What the plugin reads when it cannot reach the agent (EnablementSnapshot without version/generatedAt). */
export interface EnablementFileContent {
  allNamespaces: false;
  namespaces: string[];
  excludedNamespaces: string[];
}

export class Enablement {
  readonly #selectors: readonly EnablementSelector[];
  readonly #excluded: ReadonlySet<string>;
  readonly #excludedList: readonly string[];
  readonly #systemNamespace: string;

  constructor(opts: EnablementOptions) {
    opts.selectors.forEach((s, i) => validateEnablementSelector(s, i));
    this.#selectors = cloneSelectors(opts.selectors);
    this.#excludedList = [...new Set(opts.excludeNamespaces.map((n) => n.trim()).filter((n) => n !== ''))];
    this.#excluded = new Set(this.#excludedList);
    this.#systemNamespace = opts.systemNamespace;
  }

  get selectors(): readonly EnablementSelector[] {
    return this.#selectors;
  }

  isExcludedNamespace(namespace: string | undefined): boolean {
    return namespace !== undefined && this.#excluded.has(namespace);
  }

  /**
   * Istio's CompiledEnablementSelectors.Matches: never for host-network pods or pods with a
   * sidecar; otherwise any entry whose podSelector matches the pod and whose namespaceSelector
   * matches the namespace. Without the namespace object only entries with an empty
   * namespaceSelector can match (Istio never evaluates a pod whose namespace it has not seen).
   */
  podMatches(pod: V1Pod, namespace: V1Namespace | undefined): boolean {
    if (pod.spec?.hostNetwork === true) return false;
    if (hasKey(pod.metadata?.annotations, ANNOTATION_SIDECAR_STATUS)) return false;
    const podLabels = pod.metadata?.labels ?? {};
    const nsLabels = namespace?.metadata?.labels ?? {};
    return this.#selectors.some(
      (s) =>
        matchesLabelSelector(s.podSelector, podLabels) &&
        (namespace === undefined ? isEmptyLabelSelector(s.namespaceSelector) : matchesLabelSelector(s.namespaceSelector, nsLabels)),
    );
  }

  /** The informer's shouldBeEnabled: the selectors match AND the namespace is not excluded. */
  shouldBeEnabled(pod: V1Pod, namespace: V1Namespace | undefined): boolean {
    const ns = pod.metadata?.namespace ?? namespace?.metadata?.name;
    return !this.isExcludedNamespace(ns) && this.podMatches(pod, namespace);
  }

  /** util.IsZtunnelPod: ztunnel never enrols itself and is skipped in snapshots and fan-out. */
  isZtunnelPod(pod: V1Pod): boolean {
    return pod.metadata?.namespace === this.#systemNamespace && pod.metadata?.labels?.[LABEL_APP] === ZTUNNEL_APP;
  }

  /**
   * Istio's MatchesNamespace: true when an entry with a NON-empty namespaceSelector matches.
   * Entries with an empty namespaceSelector select pods by their own labels, so they say
   * nothing about the namespace and are ignored.
   */
  namespaceMatches(nsLabels: Readonly<Record<string, string>> | undefined): boolean {
    return this.#selectors.some(
      (s) => !isEmptyLabelSelector(s.namespaceSelector) && matchesLabelSelector(s.namespaceSelector, nsLabels ?? {}),
    );
  }

  /** The plugin's fallback file: the ambient namespaces (not excluded), sorted, and the exclusions. */
  snapshotFor(namespaces: readonly V1Namespace[]): EnablementFileContent {
    const names = new Set<string>();
    for (const ns of namespaces) {
      const name = ns.metadata?.name;
      if (name === undefined || name === '' || this.#excluded.has(name)) continue;
      if (this.namespaceMatches(ns.metadata?.labels)) names.add(name);
    }
    return { allNamespaces: false, namespaces: [...names].sort(), excludedNamespaces: [...this.#excludedList] };
  }
}

// ---------------------------------------------------------------------------------------------
// Decoding and validation

function goField(obj: JsonObject, tag: string): unknown {
  // encoding/json: case-insensitive key match, the last one wins; null leaves the zero value.
  let out: unknown;
  for (const k of goFieldKeys(obj, tag)) {
    const v = obj[k];
    if (v !== null && v !== undefined) out = v;
  }
  return out;
}

function decodeLabelSelector(v: unknown, where: string): V1LabelSelector {
  if (v === undefined || v === null) return {};
  if (!isJsonObject(v)) throw new Error(`${where}: expected an object, got ${describe(v)}`);
  const out: V1LabelSelector = {};
  const labels = goField(v, 'matchLabels');
  if (labels !== undefined) {
    if (!isJsonObject(labels)) throw new Error(`${where}.matchLabels: expected a map of strings, got ${describe(labels)}`);
    const m: Record<string, string> = {};
    for (const [k, x] of Object.entries(labels)) {
      if (x !== null && typeof x !== 'string')
        throw new Error(`${where}.matchLabels[${JSON.stringify(k)}]: expected a string, got ${describe(x)} (quote it)`);
      Object.defineProperty(m, k, { value: x ?? '', enumerable: true, writable: true, configurable: true });
    }
    if (Object.keys(m).length > 0) out.matchLabels = m;
  }
  const exprs = goField(v, 'matchExpressions');
  if (exprs !== undefined) {
    if (!Array.isArray(exprs)) throw new Error(`${where}.matchExpressions: expected a list, got ${describe(exprs)}`);
    if (exprs.length > 0) out.matchExpressions = exprs.map((e: unknown, j) => decodeRequirement(e, `${where}.matchExpressions[${j}]`));
  }
  return out;
}

function decodeRequirement(e: unknown, where: string): V1LabelSelectorRequirement {
  if (e === null || e === undefined) return { key: '', operator: '' };
  if (!isJsonObject(e)) throw new Error(`${where}: expected an object, got ${describe(e)}`);
  const str = (tag: string): string => {
    const x = goField(e, tag);
    if (x === undefined) return '';
    if (typeof x !== 'string') throw new Error(`${where}.${tag}: expected a string, got ${describe(x)}`);
    return x;
  };
  const req: V1LabelSelectorRequirement = { key: str('key'), operator: str('operator') };
  const values = goField(e, 'values');
  if (values !== undefined) {
    if (!Array.isArray(values)) throw new Error(`${where}.values: expected a list, got ${describe(values)}`);
    const vs = values.map((x: unknown, j) => {
      if (x !== null && typeof x !== 'string') throw new Error(`${where}.values[${j}]: expected a string, got ${describe(x)} (quote it)`);
      return (x as string | null) ?? '';
    });
    if (vs.length > 0) req.values = vs;
  }
  return req;
}

function validateLabelSelector(selector: V1LabelSelector, where: string): void {
  for (const [k, v] of Object.entries(selector.matchLabels ?? {})) {
    const keyProblem = labelKeyProblem(k);
    if (keyProblem) throw new Error(`${where}.matchLabels: invalid label key ${JSON.stringify(k)}: ${keyProblem}`);
    const valueProblem = labelValueProblem(v);
    if (valueProblem)
      throw new Error(`${where}.matchLabels[${JSON.stringify(k)}]: invalid label value ${JSON.stringify(v)}: ${valueProblem}`);
  }
  (selector.matchExpressions ?? []).forEach((req, j) => {
    const at = `${where}.matchExpressions[${j}]`;
    const values = req.values ?? [];
    if (!(OPERATORS as readonly string[]).includes(req.operator)) {
      throw new Error(
        `${at}: ${JSON.stringify(req.operator)} is not a valid label selector operator (want one of ${OPERATORS.join(', ')})`,
      );
    }
    const keyProblem = labelKeyProblem(req.key);
    if (keyProblem) throw new Error(`${at}: invalid label key ${JSON.stringify(req.key)}: ${keyProblem}`);
    if ((req.operator === 'In' || req.operator === 'NotIn') && values.length === 0) {
      throw new Error(`${at}: operator ${req.operator} needs a non-empty values list`);
    }
    if ((req.operator === 'Exists' || req.operator === 'DoesNotExist') && values.length !== 0) {
      throw new Error(`${at}: operator ${req.operator} takes no values (got ${JSON.stringify(values)})`);
    }
    for (const v of values) {
      const problem = labelValueProblem(v);
      if (problem) throw new Error(`${at}: invalid label value ${JSON.stringify(v)}: ${problem}`);
    }
  });
}

// apimachinery validation.IsQualifiedName / IsValidLabelValue / IsDNS1123Subdomain.
const QUALIFIED_NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

function labelKeyProblem(key: string): string | undefined {
  const parts = key.split('/');
  let name: string;
  if (parts.length === 1) {
    name = parts[0] as string;
  } else if (parts.length === 2) {
    const prefix = parts[0] as string;
    name = parts[1] as string;
    if (prefix === '') return 'prefix part must be non-empty';
    if (prefix.length > 253) return 'prefix part must be no more than 253 characters';
    if (!DNS1123_SUBDOMAIN.test(prefix)) return 'prefix part must be a lowercase RFC 1123 subdomain';
  } else {
    return "a qualified name must consist of alphanumerics, '-', '_' or '.', with an optional DNS subdomain prefix and '/'";
  }
  if (name === '') return 'name part must be non-empty';
  if (name.length > 63) return 'name part must be no more than 63 characters';
  if (!QUALIFIED_NAME.test(name)) return "name part must consist of alphanumerics, '-', '_' or '.', and start and end with an alphanumeric";
  return undefined;
}

function labelValueProblem(value: string): string | undefined {
  if (value.length > 63) return 'must be no more than 63 characters';
  if (value !== '' && !QUALIFIED_NAME.test(value))
    return "must be empty or consist of alphanumerics, '-', '_' or '.', and start and end with an alphanumeric";
  return undefined;
}

function deepFreeze<T>(v: T): T {
  if (typeof v === 'object' && v !== null) {
    for (const x of Object.values(v)) deepFreeze(x);
    Object.freeze(v);
  }
  return v;
}

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'a list';
  if (typeof v === 'object') return 'an object';
  return `${typeof v} ${JSON.stringify(v)}`;
}

function hasKey(obj: Readonly<Record<string, string>> | undefined, key: string): boolean {
  return obj !== undefined && Object.prototype.hasOwnProperty.call(obj, key);
}

function cloneSelectors(selectors: readonly EnablementSelector[]): EnablementSelector[] {
  return selectors.map((s) => ({
    podSelector: cloneLabelSelector(s.podSelector),
    namespaceSelector: cloneLabelSelector(s.namespaceSelector),
  }));
}

function cloneLabelSelector(s: V1LabelSelector): V1LabelSelector {
  const out: V1LabelSelector = {};
  if (s.matchLabels) out.matchLabels = { ...s.matchLabels };
  if (s.matchExpressions) {
    out.matchExpressions = s.matchExpressions.map((r) => {
      const req: V1LabelSelectorRequirement = { key: r.key, operator: r.operator };
      if (r.values) req.values = [...r.values];
      return req;
    });
  }
  return out;
}
