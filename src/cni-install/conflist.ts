// Pure functions over CNI config files: libcni's validity rules (what the container runtime will
// load), the choice of the primary config, and inserting/removing the istio-cni entry with the
// exact output of Istio's installer (cni/pkg/install/cniconfig.go insertCNIConfig, install.go Cleanup).

import {
  compareGoStrings,
  goFieldKeys,
  isJsonObject,
  marshalGoIndent,
  parseGoJson,
  type JsonObject,
  type JsonValue,
} from '../util/go-json.js';
import { PLUGIN_CNI_VERSION, PLUGIN_TYPE } from './plugin-config.js';

/** The network name Istio gives a list made from a single-plugin .conf. */
export const CONVERTED_LIST_NAME = 'k8s-pod-network';

export type ConfigKind = 'conf' | 'conflist';

export type ConfigValidation = { valid: true; kind: ConfigKind; networkName: string; plugins: number } | { valid: false; reason: string };

/** What libcni finds in `<conf dir>/<network name>/` (plugin files of a list, CNI spec 1.1). */
export type PluginDirContents = { texts: readonly string[] } | { error: string };

/** filepath.Ext */
export function fileExt(name: string): string {
  const base = name.slice(name.lastIndexOf('/') + 1);
  const dot = base.lastIndexOf('.');
  return dot < 0 ? '' : base.slice(dot);
}

/** libcni.ConfFiles(dir, [".conf", ".conflist"]): the names the runtime and Istio consider. */
export function isCandidateName(name: string): boolean {
  const ext = fileExt(name);
  return ext === '.conf' || ext === '.conflist';
}

// ---------------------------------------------------------------------------------------------
// libcni v1.3.0 validation

function parse(text: string): { ok: true; value: JsonValue } | { ok: false; reason: string } {
  try {
    return { ok: true, value: parseGoJson(text) };
  } catch (e) {
    return { ok: false, reason: `invalid JSON: ${(e as Error).message}` };
  }
}

function goTypeName(v: JsonValue): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  return typeof v === 'object' ? 'object' : typeof v;
}

/**
 * json.Unmarshal(bytes, &types.PluginConf{}) followed by the "missing 'type'" check
 * (libcni.NetworkPluginConfFromBytes / ConfFromBytes). Returns the error, or the plugin's
 * type and name.
 */
function checkPluginConf(v: JsonValue): { error: string } | { type: string; name: string } {
  if (v === null) return { error: "missing 'type'" };
  if (!isJsonObject(v)) return { error: `cannot unmarshal ${goTypeName(v)} into a plugin config` };
  const str = (tag: string, obj: JsonObject = v): { error: string } | { value: string } => {
    let value = '';
    for (const k of goFieldKeys(obj, tag)) {
      const x = obj[k] as JsonValue;
      if (x === null) continue;
      if (typeof x !== 'string') return { error: `cannot unmarshal ${goTypeName(x)} into field ${tag} of type string` };
      value = x;
    }
    return { value };
  };
  const nullOr = (tag: string, check: (x: JsonValue) => string | null, obj: JsonObject = v): string | null => {
    for (const k of goFieldKeys(obj, tag)) {
      const x = obj[k] as JsonValue;
      if (x === null) continue;
      const err = check(x);
      if (err !== null) return `field ${tag}: ${err}`;
    }
    return null;
  };
  const stringList = (x: JsonValue): string | null => {
    if (!Array.isArray(x)) return `cannot unmarshal ${goTypeName(x)} into []string`;
    return x.every((e) => e === null || typeof e === 'string') ? null : 'cannot unmarshal a non-string into []string';
  };
  const objectOf =
    (inner: (o: JsonObject) => string | null) =>
    (x: JsonValue): string | null =>
      isJsonObject(x) ? inner(x) : `cannot unmarshal ${goTypeName(x)} into an object`;

  const errors = [
    nullOr(
      'capabilities',
      objectOf((o) =>
        Object.values(o).every((b) => b === null || typeof b === 'boolean') ? null : 'cannot unmarshal a non-bool into map[string]bool',
      ),
    ),
    nullOr(
      'ipam',
      objectOf((o) => {
        const t = str('type', o);
        return 'error' in t ? t.error : null;
      }),
    ),
    nullOr(
      'dns',
      objectOf((o) => {
        const d = str('domain', o);
        if ('error' in d) return d.error;
        return nullOr('nameservers', stringList, o) ?? nullOr('search', stringList, o) ?? nullOr('options', stringList, o);
      }),
    ),
    nullOr(
      'prevResult',
      objectOf(() => null),
    ),
    nullOr('cni.dev/valid-attachments', (x) => {
      if (!Array.isArray(x)) return `cannot unmarshal ${goTypeName(x)} into []GCAttachment`;
      for (const a of x) {
        if (a === null) continue;
        if (!isJsonObject(a)) return `cannot unmarshal ${goTypeName(a)} into GCAttachment`;
        for (const tag of ['containerID', 'ifname']) {
          const s = str(tag, a);
          if ('error' in s) return s.error;
        }
      }
      return null;
    }),
  ];
  for (const tag of ['cniVersion', 'name']) {
    const s = str(tag);
    if ('error' in s) errors.push(s.error);
  }
  const type = str('type');
  if ('error' in type) errors.push(type.error);
  const firstError = errors.find((e) => e !== null);
  if (firstError) return { error: firstError };
  if (!('value' in type) || type.value === '') return { error: "missing 'type'" };
  const name = str('name');
  return { type: type.value, name: 'value' in name ? name.value : '' };
}

/** version.ParseVersion */
function parseCniVersion(v: string): [number, number, number] | null {
  if (v === '') return [0, 1, 0];
  const parts = v.split('.');
  if (parts.length >= 4) return null;
  const out: [number, number, number] = [0, 0, 0];
  for (let i = 0; i < parts.length; i++) {
    const p = parts[i] as string;
    if (!/^[+-]?[0-9]+$/.test(p)) return null; // strconv.Atoi
    const n = Number(p);
    if (!Number.isSafeInteger(n) && Math.abs(n) > 2 ** 63) return null;
    out[i] = n;
  }
  return out;
}

interface ListHeader {
  name: string;
  loadOnlyInlinedPlugins: boolean;
  inline: JsonValue[] | null;
}

/** libcni.NetworkConfFromBytes, minus loading the plugin directory. */
function checkListBytes(v: JsonValue): { error: string } | ListHeader {
  if (v === null) return { error: 'no name' }; // a nil map
  if (!isJsonObject(v)) return { error: `cannot unmarshal ${goTypeName(v)} into a config list` };
  if (!Object.hasOwn(v, 'name')) return { error: 'no name' };
  const name = v['name'] as JsonValue;
  if (typeof name !== 'string') return { error: `invalid name type ${goTypeName(name)}` };
  let cniVersion = '';
  if (Object.hasOwn(v, 'cniVersion')) {
    const raw = v['cniVersion'] as JsonValue;
    if (typeof raw !== 'string') return { error: `invalid cniVersion type ${goTypeName(raw)}` };
    cniVersion = raw;
  }
  if (Object.hasOwn(v, 'cniVersions')) {
    const raw = v['cniVersions'] as JsonValue;
    if (!Array.isArray(raw)) return { error: 'invalid type for cniVersions' };
    for (const [i, e] of raw.entries()) {
      if (typeof e !== 'string') return { error: `invalid type for cniVersions index ${i}` };
      if (parseCniVersion(e) === null) return { error: `invalid cniVersions entry ${e} at index ${i}` };
    }
    if (cniVersion !== '' && parseCniVersion(cniVersion) === null) return { error: `invalid cniVersion ${cniVersion}` };
  }
  const readBool = (key: string): boolean | { error: string } => {
    if (!Object.hasOwn(v, key)) return false;
    const raw = v[key] as JsonValue;
    if (typeof raw === 'boolean') return raw;
    if (typeof raw !== 'string') return { error: `invalid type ${goTypeName(raw)} for ${key}` };
    const s = raw.toLowerCase();
    if (s === 'true') return true;
    if (s === 'false') return false;
    return { error: `invalid value "${s}" for ${key}` };
  };
  let loadOnlyInlinedPlugins = false;
  for (const key of ['disableCheck', 'disableGC', 'loadOnlyInlinedPlugins']) {
    const b = readBool(key);
    if (typeof b !== 'boolean') return b;
    if (key === 'loadOnlyInlinedPlugins') loadOnlyInlinedPlugins = b;
  }
  if (!Object.hasOwn(v, 'plugins')) {
    if (loadOnlyInlinedPlugins) return { error: "`loadOnlyInlinedPlugins` is true, and no 'plugins' key" };
    return { name, loadOnlyInlinedPlugins, inline: null };
  }
  const plugins = v['plugins'] as JsonValue;
  if (!Array.isArray(plugins)) return { error: `invalid 'plugins' type ${goTypeName(plugins)}` };
  if (plugins.length === 0) return { error: 'no plugins in list' };
  for (const [i, p] of plugins.entries()) {
    const r = checkPluginConf(p);
    if ('error' in r) return { error: `failed to parse plugin config ${i}: ${r.error}` };
  }
  return { name, loadOnlyInlinedPlugins, inline: plugins };
}

/**
 * For a `.conflist` whose bytes libcni accepts and which does not set loadOnlyInlinedPlugins:
 * the network name, whose directory `<conf dir>/<name>/` libcni reads for more plugin files
 * (`*.conf`). The caller reads it and passes it to validateConfig. null otherwise.
 */
export function pluginDirNetwork(fileName: string, text: string): string | null {
  if (fileExt(fileName) !== '.conflist') return null;
  const p = parse(text);
  if (!p.ok) return null;
  const h = checkListBytes(p.value);
  return 'error' in h || h.loadOnlyInlinedPlugins ? null : h.name;
}

/**
 * Would the runtime (libcni v1.3.0, as used by Istio's installer to pick the primary config)
 * load this file? `.conflist` → ConfListFromFile; anything else → ConfFromFile plus the
 * "has a type" check. cniVersion is optional (so nover_calico.conflist is valid).
 */
export function validateConfig(fileName: string, text: string, pluginDir?: PluginDirContents): ConfigValidation {
  const p = parse(text);
  if (!p.ok) return { valid: false, reason: p.reason };
  if (fileExt(fileName) === '.conflist') {
    const h = checkListBytes(p.value);
    if ('error' in h) return { valid: false, reason: `error parsing configuration list: ${h.error}` };
    let count = h.inline?.length ?? 0;
    if (!h.loadOnlyInlinedPlugins && pluginDir !== undefined) {
      if ('error' in pluginDir) return { valid: false, reason: `failed to read plugin config files: ${pluginDir.error}` };
      for (const t of pluginDir.texts) {
        const pp = parse(t);
        const r = pp.ok ? checkPluginConf(pp.value) : { error: pp.reason };
        if ('error' in r) return { valid: false, reason: `error parsing configuration: ${r.error}` };
        count++;
      }
    }
    if (count === 0) return { valid: false, reason: 'no plugin configs found' };
    return { valid: true, kind: 'conflist', networkName: h.name, plugins: count };
  }
  const r = checkPluginConf(p.value);
  if ('error' in r) return { valid: false, reason: `error parsing configuration: ${r.error}` };
  return { valid: true, kind: 'conf', networkName: r.name, plugins: 1 };
}

// ---------------------------------------------------------------------------------------------
// Choosing the primary config

export interface ConfFileEntry {
  name: string;
  /** null when the file could not be read (a directory, a dangling link, EACCES...). */
  text: string | null;
  /** The list's plugin directory, when pluginDirNetwork() named one and it exists. */
  pluginDir?: PluginDirContents;
}

export interface PrimaryChoice {
  name: string;
  /** Files passed over on the way, with libcni's reason. */
  skipped: Array<{ name: string; reason: string }>;
}

/**
 * The config the runtime uses and Istio chains into. Without `confName` (CNI_CONF_NAME): the
 * bytewise-first `.conf`/`.conflist` that libcni accepts. With it: that file, or its
 * `.conf`↔`.conflist` twin when only that exists (a converted `.conf`), provided it can be
 * chained (JSON object; for a list, `plugins` is a list of objects); Istio does not validate
 * it further. `exclude` names files never to pick (the Istio-owned config). null = none yet.
 */
export function pickPrimary(files: readonly ConfFileEntry[], confName?: string, exclude: readonly string[] = []): PrimaryChoice | null {
  const skipped: PrimaryChoice['skipped'] = [];
  const byName = new Map(files.map((f) => [f.name, f]));
  if (confName !== undefined && confName !== '') {
    let f = byName.get(confName);
    if (f === undefined && confName.endsWith('.conf')) f = byName.get(confName + 'list');
    else if (f === undefined && confName.endsWith('.conflist')) f = byName.get(confName.slice(0, -4));
    if (f === undefined) return null;
    if (f.text === null) return null;
    const why = chainProblem(f.name, f.text);
    if (why !== null) {
      skipped.push({ name: f.name, reason: why });
      return null;
    }
    return { name: f.name, skipped };
  }
  const candidates = files
    .filter((f) => isCandidateName(f.name) && !exclude.includes(f.name))
    .sort((a, b) => compareGoStrings(a.name, b.name));
  for (const f of candidates) {
    if (f.text === null) {
      skipped.push({ name: f.name, reason: 'unreadable' });
      continue;
    }
    const v = validateConfig(f.name, f.text, f.pluginDir);
    if (v.valid) return { name: f.name, skipped };
    skipped.push({ name: f.name, reason: v.reason });
  }
  return null;
}

/** Why chain() would fail on this file, or null. */
export function chainProblem(fileName: string, text: string): string | null {
  try {
    chain(text, fileName, {});
    return null;
  } catch (e) {
    return (e as Error).message;
  }
}

// ---------------------------------------------------------------------------------------------
// Inserting and removing our entry

/**
 * How the file is read. A `.conflist` is a list (as the runtime reads it); otherwise Istio's
 * rule: a top-level "type" key makes it a single plugin config, else a list.
 */
export function configKind(fileName: string, doc: JsonObject): ConfigKind {
  if (fileExt(fileName) === '.conflist') return 'conflist';
  return Object.hasOwn(doc, 'type') ? 'conf' : 'conflist';
}

function parseObject(text: string, what: string): JsonObject {
  let doc: JsonValue;
  try {
    doc = parseGoJson(text);
  } catch (e) {
    throw new Error(`error loading ${what} (JSON error): ${(e as Error).message}`, { cause: e });
  }
  if (!isJsonObject(doc)) throw new Error(`error loading ${what} (JSON error): not a JSON object`);
  return doc;
}

function listPlugins(doc: JsonObject): JsonObject[] {
  const plugins = doc['plugins'];
  if (!Object.hasOwn(doc, 'plugins') || !Array.isArray(plugins))
    throw new Error('existing CNI config: error reading plugin list from CNI config');
  return plugins.map((p) => {
    if (!isJsonObject(p)) throw new Error('existing CNI plugin: error reading plugin from CNI config plugin list');
    return p;
  });
}

const isOurs = (p: JsonObject): boolean => p['type'] === PLUGIN_TYPE;

function withoutKey(o: JsonObject, key: string): JsonObject {
  return Object.fromEntries(Object.entries(o).filter(([k]) => k !== key));
}

/**
 * Insert `entry` (see pluginEntry) into the config `text` read from `fileName`. A single-plugin
 * config becomes {cniVersion: "0.3.1", name: "k8s-pod-network", plugins: [it minus cniVersion, entry]};
 * in a list every plugin of type istio-cni is removed and the entry appended last. A `.conf`
 * name becomes `.conflist`. Output: Go's MarshalIndent (keys sorted, 2-space indent) + "\n".
 * Throws when the text is not a JSON object or a list has no usable `plugins`.
 */
export function chain(text: string, fileName: string, entry: JsonObject): { fileName: string; text: string } {
  const doc = parseObject(text, 'existing CNI config');
  const ours = withoutKey(entry, 'cniVersion');
  let out: JsonObject;
  if (configKind(fileName, doc) === 'conf') {
    out = { cniVersion: PLUGIN_CNI_VERSION, name: CONVERTED_LIST_NAME, plugins: [withoutKey(doc, 'cniVersion'), ours] };
  } else {
    const plugins = listPlugins(doc).filter((p) => !isOurs(p));
    out = { ...withoutKey(doc, 'plugins'), plugins: [...plugins, ours] };
  }
  return { fileName: fileName.endsWith('.conf') ? fileName + 'list' : fileName, text: marshalGoIndent(out) };
}

/** Does the config carry an istio-cni plugin (Istio's readiness test)? false for unparseable text. */
export function hasIstioEntry(text: string, fileName = 'x.conflist'): boolean {
  try {
    const doc = parseObject(text, 'CNI config');
    if (configKind(fileName, doc) === 'conf') return false;
    return listPlugins(doc).some(isOurs);
  } catch {
    return false;
  }
}

/**
 * The config without our entry (Installer.Cleanup): every plugin of type istio-cni removed, the
 * rest re-marshalled the Go way. A converted `.conf` stays a list (see the installer).
 * Throws like chain() on a file it cannot read as a list.
 */
export function unchain(text: string): string {
  const doc = parseObject(text, 'CNI config');
  const plugins = listPlugins(doc).filter((p) => !isOurs(p));
  return marshalGoIndent({ ...withoutKey(doc, 'plugins'), plugins });
}

/** Same document once both are read the Go way (formatting and key order ignored). */
export function sameConfig(a: string, b: string): boolean {
  if (a === b) return true;
  try {
    return marshalGoIndent(parseGoJson(a)) === marshalGoIndent(parseGoJson(b));
  } catch {
    return false;
  }
}
