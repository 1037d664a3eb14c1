// The `istio-cni` plugin entry, with Istio's keys and values exactly as Istio's installer writes
// them (cni/pkg/install/cniconfig.go createCNIConfigFile → plugin.Config marshalled by Go), so the
// resulting CNI config is byte-identical to Istio's and either agent's plugin can read it.

import {
  foldGoKey,
  GoStruct,
  isJsonObject,
  marshalGoIndent,
  toJsonValue,
  type GoValue,
  type JsonObject,
  type JsonValue,
} from '../util/go-json.js';

export const PLUGIN_NAME = 'istio-cni';
export const PLUGIN_TYPE = 'istio-cni';
/** cniVersion of a standalone config, and of a list made from a single-plugin .conf. */
export const PLUGIN_CNI_VERSION = '0.3.1';

export interface PluginConfigSettings {
  /** CNI_AGENT_RUN_DIR: where the plugin finds the agent's sockets (`cni_agent_run_dir`). */
  runDir: string;
  /** EXCLUDE_NAMESPACES split on ','; null, [] or only blanks → `null` (Go's nil slice), as Istio. */
  excludeNamespaces: string[] | null;
  ambientEnabled: boolean;
  /** The agent's own namespace (`pod_namespace`). */
  podNamespace: string;
  /** The plugin's log level (`plugin_log_level`). */
  logLevel: string;
  /**
   * AMBIENT_ENABLEMENT_SELECTOR parsed from YAML: a list of {podSelector, namespaceSelector}
   * label selectors. Normalised the way Go decodes them into util.EnablementSelector and
   * re-encodes them (unknown keys dropped, both selectors always present, empty
   * matchLabels/matchExpressions/values omitted).
   */
  enablementSelectors: unknown[];
  nativeNftables: boolean;
  enableAmbientDetectionRetry: boolean;
}

/** The entry appended to a chained conflist (no cniVersion: it is removed when inserted into a list). */
export function pluginEntry(settings: PluginConfigSettings): JsonObject {
  return {
    ambient_enabled: settings.ambientEnabled,
    cni_agent_run_dir: settings.runDir,
    dns: {},
    enable_ambient_detection_retry: settings.enableAmbientDetectionRetry,
    enablement_selectors: normalizeEnablementSelectors(settings.enablementSelectors).map(toJsonValue),
    exclude_namespaces: normalizeExcludeNamespaces(settings.excludeNamespaces),
    ipam: {},
    name: PLUGIN_NAME,
    native_nftables: settings.nativeNftables,
    plugin_log_level: settings.logLevel,
    pod_namespace: settings.podNamespace,
    type: PLUGIN_TYPE,
  };
}

/**
 * The standalone (non-chained) config file, `YYY-istio-cni.conf` by default: plugin.Config
 * marshalled by Go in struct order (types.NetConf's fields first), with cniVersion 0.3.1.
 */
export function standaloneConfigText(settings: PluginConfigSettings): string {
  const selectors = normalizeEnablementSelectors(settings.enablementSelectors);
  const doc = new GoStruct([
    ['cniVersion', PLUGIN_CNI_VERSION],
    ['name', PLUGIN_NAME],
    ['type', PLUGIN_TYPE],
    ['ipam', {}],
    ['dns', {}],
    ['plugin_log_level', settings.logLevel],
    ['cni_agent_run_dir', settings.runDir],
    ['ambient_enabled', settings.ambientEnabled],
    ['enablement_selectors', selectors],
    ['exclude_namespaces', normalizeExcludeNamespaces(settings.excludeNamespaces)],
    ['pod_namespace', settings.podNamespace],
    ['native_nftables', settings.nativeNftables],
    ['enable_ambient_detection_retry', settings.enableAmbientDetectionRetry],
  ]);
  return marshalGoIndent(doc);
}

/** util.SplitExcludeNamespaces: trimmed, blanks dropped, nil (→ null) when nothing is left. */
export function normalizeExcludeNamespaces(list: readonly string[] | null): string[] | null {
  if (list === null) return null;
  const out = list.map((s) => s.trim()).filter((s) => s !== '');
  return out.length === 0 ? null : out;
}

/**
 * Go's round trip of []util.EnablementSelector: each element becomes
 * {podSelector: LabelSelector, namespaceSelector: LabelSelector} (struct order, both always
 * present), a LabelSelector is {matchLabels?, matchExpressions?} (omitempty), a requirement is
 * {key, operator, values?}. Keys match case-insensitively, as encoding/json does. Throws a
 * TypeError where Go's decoder would fail (wrong JSON type), since Istio's agent then refuses to start.
 */
export function normalizeEnablementSelectors(selectors: readonly unknown[]): GoValue[] {
  if (!Array.isArray(selectors)) throw new TypeError('enablement selectors: expected a list');
  return selectors.map((sel, i) => {
    if (sel === null || sel === undefined) return selectorStruct({}, i);
    if (!isJsonObject(sel)) throw new TypeError(`enablement selector ${i}: expected an object`);
    return selectorStruct(sel, i);
  });
}

function field(obj: JsonObject, tag: string): JsonValue | undefined {
  // Last matching key wins; a JSON null leaves the Go zero value.
  let out: JsonValue | undefined;
  const want = foldGoKey(tag);
  for (const k of Object.keys(obj)) {
    if (k === tag || foldGoKey(k) === want) {
      const v = obj[k] as JsonValue;
      if (v !== null) out = v;
    }
  }
  return out;
}

function selectorStruct(sel: JsonObject, i: number): GoStruct {
  return new GoStruct([
    ['podSelector', labelSelector(field(sel, 'podSelector'), `enablement selector ${i} podSelector`)],
    ['namespaceSelector', labelSelector(field(sel, 'namespaceSelector'), `enablement selector ${i} namespaceSelector`)],
  ]);
}

function labelSelector(v: JsonValue | undefined, where: string): GoStruct {
  if (v === undefined) return new GoStruct([]);
  if (!isJsonObject(v)) throw new TypeError(`${where}: expected an object`);
  const fields: Array<[string, GoValue]> = [];
  const labels = field(v, 'matchLabels');
  if (labels !== undefined) {
    if (!isJsonObject(labels)) throw new TypeError(`${where}.matchLabels: expected an object`);
    const m: Record<string, string> = {};
    for (const [k, x] of Object.entries(labels)) {
      if (x !== null && typeof x !== 'string') throw new TypeError(`${where}.matchLabels.${k}: expected a string`);
      Object.defineProperty(m, k, { value: x ?? '', enumerable: true, writable: true, configurable: true });
    }
    if (Object.keys(m).length > 0) fields.push(['matchLabels', m]);
  }
  const exprs = field(v, 'matchExpressions');
  if (exprs !== undefined) {
    if (!Array.isArray(exprs)) throw new TypeError(`${where}.matchExpressions: expected a list`);
    if (exprs.length > 0) fields.push(['matchExpressions', exprs.map((e, j) => requirement(e, `${where}.matchExpressions[${j}]`))]);
  }
  return new GoStruct(fields);
}

function stringField(obj: JsonObject, tag: string, where: string): string {
  const v = field(obj, tag);
  if (v === undefined) return '';
  if (typeof v !== 'string') throw new TypeError(`${where}.${tag}: expected a string`);
  return v;
}

function requirement(e: JsonValue, where: string): GoStruct {
  if (e === null)
    return new GoStruct([
      ['key', ''],
      ['operator', ''],
    ]);
  if (!isJsonObject(e)) throw new TypeError(`${where}: expected an object`);
  const fields: Array<[string, GoValue]> = [
    ['key', stringField(e, 'key', where)],
    ['operator', stringField(e, 'operator', where)],
  ];
  const values = field(e, 'values');
  if (values !== undefined) {
    if (!Array.isArray(values)) throw new TypeError(`${where}.values: expected a list`);
    const vs = values.map((x, j) => {
      if (x !== null && typeof x !== 'string') throw new TypeError(`${where}.values[${j}]: expected a string`);
      return x ?? '';
    });
    if (vs.length > 0) fields.push(['values', vs]);
  }
  return new GoStruct(fields);
}
