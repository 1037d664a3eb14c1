// ZDS messages <-> bytes, with protobufjs: the static code protobufjs's generator made from the
// project's zds.proto (src/zds/zds-static.js, scripts/zds-static.mjs), on protobufjs/minimal, so
// a restarted agent neither parses the .proto nor generates codecs before it serves ztunnel.
// Encoding matches what Go and prost produce (proto3 defaults are omitted); decoding is strict
// where ztunnel's prost decoder is strict (wire types, UTF-8) and lenient where it is lenient
// (unknown fields skipped, the last oneof member on the wire wins).
import protobuf from 'protobufjs/minimal.js';
import { istio } from './zds-static.js';
import { ZdsError } from './errors.js';

export const MAX_DATAGRAM_BYTES = 1024;

export interface WorkloadInfo {
  name: string;
  namespace: string;
  serviceAccount: string;
}

export type WorkloadRequest =
  | { add: { uid: string; workloadInfo?: WorkloadInfo } }
  | { del: { uid: string } }
  | { snapshotSent: Record<string, never> }
  | { keep: { uid: string } };

export type RequestKind = 'add' | 'del' | 'snapshotSent' | 'keep';

export interface WorkloadResponse {
  ack?: { error: string };
}

const zds = istio.workload.zds;

export function requestKind(req: WorkloadRequest): RequestKind {
  return Object.keys(req)[0] as RequestKind;
}

/** proto3 omits empty strings; protobufjs writes any field that is present, so drop them. */
function withoutDefaults<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== '' && v !== undefined && v !== null)) as Partial<T>;
}

function wireShape(req: WorkloadRequest): Record<string, unknown> {
  if ('add' in req) {
    const { uid, workloadInfo } = req.add;
    return { add: { ...withoutDefaults({ uid }), ...(workloadInfo ? { workloadInfo: withoutDefaults(workloadInfo) } : {}) } };
  }
  if ('del' in req) return { del: withoutDefaults(req.del) };
  if ('keep' in req) return { keep: withoutDefaults(req.keep) };
  return { snapshotSent: {} };
}

/** A lone UTF-16 surrogate: protobufjs would encode it as bytes that are not UTF-8. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Every string of a message must be Unicode text: prost (and decodeStrict) refuse the rest. */
function assertUnicode(value: unknown, path: string): void {
  if (typeof value === 'string') {
    if (LONE_SURROGATE.test(value)) {
      throw new ZdsError('ZDS_INVALID_MESSAGE', `refusing to send ${path}: not valid Unicode (a lone surrogate would not be UTF-8)`, false);
    }
  } else if (typeof value === 'object' && value !== null) {
    for (const [k, v] of Object.entries(value)) assertUnicode(v, `${path}.${k}`);
  }
}

/**
 * Encodes a request and refuses, at the source, anything ztunnel would reject as unreadable:
 * an empty datagram (ztunnel reads it as EOF), one over its 1024-byte buffer, or a string that
 * would not be UTF-8.
 */
export function encodeRequest(req: WorkloadRequest): Uint8Array {
  assertUnicode(req, 'WorkloadRequest');
  const bytes = zds.WorkloadRequest.encode(wireShape(req)).finish();
  if (bytes.length === 0)
    throw new ZdsError('ZDS_INVALID_MESSAGE', 'refusing to send an empty ZDS datagram (ztunnel reads it as EOF)', false);
  if (bytes.length > MAX_DATAGRAM_BYTES) {
    throw new ZdsError(
      'ZDS_MESSAGE_TOO_LARGE',
      `ZDS ${requestKind(req)} message is ${bytes.length} bytes; ztunnel reads at most ${MAX_DATAGRAM_BYTES}`,
      false,
    );
  }
  return bytes;
}

export function encodeResponse(res: WorkloadResponse): Uint8Array {
  assertUnicode(res, 'WorkloadResponse');
  return zds.WorkloadResponse.encode(res.ack ? { ack: withoutDefaults(res.ack) } : {}).finish();
}

export function encodeHello(version = 1): Uint8Array {
  return zds.ZdsHello.encode(version === 0 ? {} : { version }).finish();
}

// ---- strict decoding ----

const WIRE_VARINT = 0;
const WIRE_LENGTH_DELIMITED = 2;
const utf8 = new TextDecoder('utf-8', { fatal: true });

type MessageName =
  | 'ZdsHello'
  | 'WorkloadInfo'
  | 'AddWorkload'
  | 'KeepWorkload'
  | 'DelWorkload'
  | 'SnapshotSent'
  | 'WorkloadRequest'
  | 'Ack'
  | 'WorkloadResponse';

/** A field of zds.proto as prost reads it: a varint, a UTF-8 string, or another message. */
export interface FieldSpec {
  name: string;
  kind: 'varint' | 'string' | MessageName;
  /** The oneof the field belongs to. */
  oneof?: string;
}

/**
 * zds.proto's fields by message and number, for the strict walk below (the generated code skips
 * a field with the wrong wire type; prost refuses it). test/unit/zds-static.test.ts checks this
 * table against zds.proto itself.
 */
export const ZDS_FIELDS = {
  ZdsHello: { 1: { name: 'version', kind: 'varint' } },
  WorkloadInfo: {
    1: { name: 'name', kind: 'string' },
    2: { name: 'namespace', kind: 'string' },
    3: { name: 'serviceAccount', kind: 'string' },
  },
  AddWorkload: { 1: { name: 'uid', kind: 'string' }, 2: { name: 'workloadInfo', kind: 'WorkloadInfo' } },
  KeepWorkload: { 1: { name: 'uid', kind: 'string' } },
  DelWorkload: { 2: { name: 'uid', kind: 'string' } },
  SnapshotSent: {},
  WorkloadRequest: {
    1: { name: 'add', kind: 'AddWorkload', oneof: 'payload' },
    2: { name: 'del', kind: 'DelWorkload', oneof: 'payload' },
    3: { name: 'snapshotSent', kind: 'SnapshotSent', oneof: 'payload' },
    5: { name: 'keep', kind: 'KeepWorkload', oneof: 'payload' },
  },
  Ack: { 1: { name: 'error', kind: 'string' } },
  WorkloadResponse: { 1: { name: 'ack', kind: 'Ack', oneof: 'payload' } },
} as const satisfies Record<MessageName, Record<number, FieldSpec>>;

/**
 * Walks the message: a known field with the wrong wire type or a string that is not UTF-8 is an
 * error (as in prost); unknown fields are skipped. Returns, for each oneof, the member that
 * appeared last on the wire.
 */
function validate(type: MessageName, bytes: Uint8Array): Map<string, string> {
  const reader = protobuf.Reader.create(bytes);
  const fields: Partial<Record<number, FieldSpec>> = ZDS_FIELDS[type];
  const lastOneof = new Map<string, string>();
  while (reader.pos < reader.len) {
    const tag = reader.uint32();
    if (tag >>> 3 === 0) throw new Error('invalid tag value: 0'); // prost's words; protobufjs would skip it
    const field = fields[tag >>> 3];
    const wireType = tag & 7;
    if (!field) {
      reader.skipType(wireType);
      continue;
    }
    const expected = field.kind === 'varint' ? WIRE_VARINT : WIRE_LENGTH_DELIMITED;
    if (wireType !== expected) throw new Error(`field ${field.name}: wrong wire type ${wireType}`);
    if (field.oneof) lastOneof.set(field.oneof, field.name);
    if (field.kind === 'varint') {
      reader.uint64();
      continue;
    }
    const value = reader.bytes();
    if (field.kind === 'string') utf8.decode(value);
    else validate(field.kind, value);
  }
  return lastOneof;
}

/** Checks the bytes as prost would, then decodes them with the generated code. */
function decodeStrict<T>(
  type: MessageName,
  bytes: Uint8Array,
  decode: (bytes: Uint8Array) => T,
): { message: T; oneofs: Map<string, string> } {
  try {
    const oneofs = validate(type, bytes);
    return { message: decode(bytes), oneofs };
  } catch (err) {
    throw new ZdsError('ZDS_MALFORMED', `malformed ${type}: ${err instanceof Error ? err.message : String(err)}`, false);
  }
}

export function decodeHello(bytes: Uint8Array): { version: number } {
  const { message } = decodeStrict('ZdsHello', bytes, (b) => zds.ZdsHello.decode(b));
  return { version: message.version ?? 0 };
}

/** Returns the ack's error text ('' = success). A response without an ack is malformed. */
export function decodeAck(bytes: Uint8Array): string {
  const { message, oneofs } = decodeStrict('WorkloadResponse', bytes, (b) => zds.WorkloadResponse.decode(b));
  if (oneofs.get('payload') !== 'ack' || !message.ack) throw new ZdsError('ZDS_MALFORMED', 'WorkloadResponse without an ack', false);
  return message.ack.error ?? '';
}

/** Decodes a request the way ztunnel does (used by the test client and for diagnostics). */
export function decodeRequest(bytes: Uint8Array): WorkloadRequest | undefined {
  const { message, oneofs } = decodeStrict('WorkloadRequest', bytes, (b) => zds.WorkloadRequest.decode(b));
  switch (oneofs.get('payload')) {
    case undefined:
      return undefined;
    case 'add': {
      const add = { uid: message.add?.uid ?? '' };
      const info = message.add?.workloadInfo;
      if (!info) return { add };
      return {
        add: {
          ...add,
          workloadInfo: { name: info.name ?? '', namespace: info.namespace ?? '', serviceAccount: info.serviceAccount ?? '' },
        },
      };
    }
    case 'del':
      return { del: { uid: message.del?.uid ?? '' } };
    case 'keep':
      return { keep: { uid: message.keep?.uid ?? '' } };
    default:
      return { snapshotSent: {} };
  }
}
