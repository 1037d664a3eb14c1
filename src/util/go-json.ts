// JSON the way Istio's installer reads and writes it: Go's encoding/json decoding into
// map[string]any, then json.MarshalIndent(v, "", "  "). The output differs from
// JSON.stringify(v, null, 2) in four ways, all reproduced here:
//   - map keys are sorted by their UTF-8 bytes (struct fields keep declaration order: GoStruct);
//   - '<', '>' and '&' are escaped as \u003c, \u003e, \u0026 (HTML-safe escaping is on), and so are
//     U+2028 / U+2029;
//   - lone UTF-16 surrogates become U+FFFD (Go strings are UTF-8, decoding replaces them);
//   - negative zero prints as "-0".
// Numbers Go cannot hold in a float64 (1e400) make decoding fail, as in Go.

export type JsonValue = null | boolean | number | string | JsonValue[] | JsonObject;
export interface JsonObject {
  [key: string]: JsonValue;
}

/** A Go struct: fields are marshalled in the given order, not sorted. */
export class GoStruct {
  constructor(readonly fields: ReadonlyArray<readonly [string, GoValue]>) {}
}
export type GoValue = JsonValue | GoStruct | GoValue[] | { [key: string]: GoValue };

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

function wellFormed(s: string): string {
  return s.replace(LONE_SURROGATE, '\ufffd');
}

export function isJsonObject(v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof GoStruct);
}

/**
 * Parse like json.Unmarshal into `any`. Throws SyntaxError on malformed text and RangeError on a
 * number outside float64 range. Keys and strings are made well-formed (lone surrogates → U+FFFD).
 */
export function parseGoJson(text: string): JsonValue {
  const value = JSON.parse(text, (_key, v: unknown) => {
    if (typeof v === 'number' && !Number.isFinite(v)) throw new RangeError('number out of range for a float64');
    return v;
  }) as JsonValue;
  return fixStrings(value);
}

function fixStrings(v: JsonValue): JsonValue {
  if (typeof v === 'string') return wellFormed(v);
  if (Array.isArray(v)) return v.map(fixStrings);
  if (isJsonObject(v)) return Object.fromEntries(Object.entries(v).map(([k, x]) => [wellFormed(k), fixStrings(x)]));
  return v;
}

/** A GoStruct tree as plain JSON (what json.Unmarshal into map[string]any gives back). */
export function toJsonValue(v: GoValue): JsonValue {
  if (v === null || typeof v !== 'object') return v;
  if (Array.isArray(v)) return v.map(toJsonValue);
  const entries = v instanceof GoStruct ? v.fields : Object.entries(v);
  return Object.fromEntries(entries.map(([k, x]) => [k, toJsonValue(x)]));
}

/** Go's sort.Strings order: bytewise on UTF-8. */
export function compareGoStrings(a: string, b: string): number {
  if (a === b) return 0;
  // Fast path: UTF-16 order equals UTF-8 byte order unless a surrogate pair meets U+E000..U+FFFF.
  if (!/[\ud800-\udfff\ue000-\uffff]/.test(a + b)) return a < b ? -1 : 1;
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

const HEX = '0123456789abcdef';

/** Go's encodeState.string with escapeHTML=true. */
export function quoteGoString(input: string): string {
  const s = wellFormed(input);
  let out = '"';
  let start = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    let esc: string | null = null;
    if (c < 0x20 || c === 0x22 || c === 0x5c || c === 0x3c || c === 0x3e || c === 0x26) {
      switch (c) {
        case 0x22:
          esc = '\\"';
          break;
        case 0x5c:
          esc = '\\\\';
          break;
        case 0x08:
          esc = '\\b';
          break;
        case 0x0c:
          esc = '\\f';
          break;
        case 0x0a:
          esc = '\\n';
          break;
        case 0x0d:
          esc = '\\r';
          break;
        case 0x09:
          esc = '\\t';
          break;
        default:
          esc = '\\u00' + HEX[c >> 4] + HEX[c & 0xf];
      }
    } else if (c === 0x2028 || c === 0x2029) {
      esc = c === 0x2028 ? '\\u2028' : '\\u2029';
    }
    if (esc !== null) {
      out += s.slice(start, i) + esc;
      start = i + 1;
    }
  }
  return out + s.slice(start) + '"';
}

/** strconv.FormatFloat(f, 'f' or 'e', -1, 64) as encoding/json picks it; equals ES Number#toString except for -0. */
function formatGoNumber(n: number): string {
  if (!Number.isFinite(n)) throw new RangeError(`json: unsupported value: ${n}`);
  if (Object.is(n, -0)) return '-0';
  return String(n);
}

/** json.MarshalIndent(v, "", "  ") followed by "\n" (util.MarshalCNIConfig). */
export function marshalGoIndent(value: GoValue): string {
  return encode(value, '') + '\n';
}

function encode(v: GoValue, indent: string): string {
  if (v === null) return 'null';
  if (typeof v === 'boolean') return v ? 'true' : 'false';
  if (typeof v === 'number') return formatGoNumber(v);
  if (typeof v === 'string') return quoteGoString(v);
  const inner = indent + '  ';
  if (Array.isArray(v)) {
    if (v.length === 0) return '[]';
    return '[\n' + v.map((x) => inner + encode(x, inner)).join(',\n') + '\n' + indent + ']';
  }
  const entries: Array<readonly [string, GoValue]> =
    v instanceof GoStruct
      ? [...v.fields]
      : Object.keys(v)
          .sort(compareGoStrings)
          .map((k) => [k, (v as Record<string, GoValue>)[k] as GoValue] as const);
  if (entries.length === 0) return '{}';
  return '{\n' + entries.map(([k, x]) => inner + quoteGoString(k) + ': ' + encode(x, inner)).join(',\n') + '\n' + indent + '}';
}

/**
 * Go's case-insensitive struct-field match (encoding/json accepts "Type" or "TYPE" for a field
 * tagged "type"). Only ASCII letters fold, plus the two non-ASCII runes that fold onto them
 * (U+017F ſ → s, U+212A Kelvin sign → k).
 */
export function foldGoKey(k: string): string {
  return k.replace(/[A-Z\u017f\u212a]/g, (ch) => (ch === '\u017f' ? 's' : ch === '\u212a' ? 'k' : ch.toLowerCase()));
}

/** The keys of `obj` that json.Unmarshal would assign to the struct field tagged `tag`, in order. */
export function goFieldKeys(obj: JsonObject, tag: string): string[] {
  const want = foldGoKey(tag);
  return Object.keys(obj).filter((k) => k === tag || foldGoKey(k) === want);
}
