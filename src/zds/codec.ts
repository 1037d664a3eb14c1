// ZDS messages <-> bytes, with protobufjs over the project's zds.proto. Encoding matches what
// Go and prost produce (proto3 defaults are omitted); decoding is strict where ztunnel's prost
// decoder is strict (wire types, UTF-8) and lenient where it is lenient (unknown fields skipped,
// the last oneof member on the wire wins).
import { join } from 'node:path';
import protobuf from 'protobufjs';
import { projectRoot } from '../project-root.js';
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

const root = protobuf.loadSync(join(projectRoot(), 'src', 'zds', 'zds.proto'));
const types = {
  hello: root.lookupType('istio.workload.zds.ZdsHello'),
  request: root.lookupType('istio.workload.zds.WorkloadRequest'),
  response: root.lookupType('istio.workload.zds.WorkloadResponse'),
};

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
  const bytes = types.request.encode(types.request.fromObject(wireShape(req))).finish();
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
  return types.response.encode(types.response.fromObject(res.ack ? { ack: withoutDefaults(res.ack) } : {})).finish();
}

export function encodeHello(version = 1): Uint8Array {
  return types.hello.encode(types.hello.fromObject(version === 0 ? {} : { version })).finish();
}

// ---- strict decoding ----

const WIRE_VARINT = 0;
const WIRE_LENGTH_DELIMITED = 2;
const utf8 = new TextDecoder('utf-8', { fatal: true });

function expectedWireType(field: protobuf.Field): number {
  return field.resolvedType instanceof protobuf.Type || field.type === 'string' || field.type === 'bytes'
    ? WIRE_LENGTH_DELIMITED
    : WIRE_VARINT;
}

/**
 * Walks the message with protobufjs' reflection: a known field with the wrong wire type or a
 * string that is not UTF-8 is an error (as in prost); unknown fields are skipped. Returns, for
 * each oneof, the member that appeared last on the wire.
 */
function validate(type: protobuf.Type, bytes: Uint8Array): Map<string, string> {
  const reader = protobuf.Reader.create(bytes);
  const lastOneof = new Map<string, string>();
  while (reader.pos < reader.len) {
    const tag = reader.uint32();
    if (tag >>> 3 === 0) throw new Error('invalid tag value: 0'); // prost's words; protobufjs would skip it
    const field = type.fieldsById[tag >>> 3];
    const wireType = tag & 7;
    if (!field) {
      reader.skipType(wireType);
      continue;
    }
    if (wireType !== expectedWireType(field)) throw new Error(`field ${field.name}: wrong wire type ${wireType}`);
    if (field.partOf) lastOneof.set(field.partOf.name, field.name);
    if (wireType === WIRE_VARINT) {
      reader.uint64();
      continue;
    }
    const value = reader.bytes();
    if (field.resolvedType instanceof protobuf.Type) validate(field.resolvedType, value);
    else if (field.type === 'string') utf8.decode(value);
  }
  return lastOneof;
}

function decodeStrict(
  type: protobuf.Type,
  bytes: Uint8Array,
  what: string,
): { message: Record<string, unknown>; oneofs: Map<string, string> } {
  try {
    const oneofs = validate(type, bytes);
    const message = type.toObject(type.decode(bytes), { defaults: false }) as Record<string, unknown>;
    return { message, oneofs };
  } catch (err) {
    throw new ZdsError('ZDS_MALFORMED', `malformed ${what}: ${err instanceof Error ? err.message : String(err)}`, false);
  }
}

export function decodeHello(bytes: Uint8Array): { version: number } {
  const { message } = decodeStrict(types.hello, bytes, 'ZdsHello');
  return { version: typeof message['version'] === 'number' ? message['version'] : 0 };
}

/** Returns the ack's error text ('' = success). A response without an ack is malformed. */
export function decodeAck(bytes: Uint8Array): string {
  const { message, oneofs } = decodeStrict(types.response, bytes, 'WorkloadResponse');
  if (oneofs.get('payload') !== 'ack') throw new ZdsError('ZDS_MALFORMED', 'WorkloadResponse without an ack', false);
  const ack = message['ack'] as { error?: string };
  return ack.error ?? '';
}

/** Decodes a request the way ztunnel does (used by the test client and for diagnostics). */
export function decodeRequest(bytes: Uint8Array): WorkloadRequest | undefined {
  const { message, oneofs } = decodeStrict(types.request, bytes, 'WorkloadRequest');
  const member = oneofs.get('payload');
  if (member === undefined) return undefined;
  const body = (message[member] ?? {}) as Record<string, unknown>;
  switch (member) {
    case 'add': {
      const info = body['workloadInfo'] as Partial<WorkloadInfo> | undefined;
      const add = { uid: (body['uid'] as string | undefined) ?? '' };
      return info
        ? {
            add: {
              ...add,
              workloadInfo: { name: info.name ?? '', namespace: info.namespace ?? '', serviceAccount: info.serviceAccount ?? '' },
            },
          }
        : { add };
    }
    case 'del':
      return { del: { uid: (body['uid'] as string | undefined) ?? '' } };
    case 'keep':
      return { keep: { uid: (body['uid'] as string | undefined) ?? '' } };
    default:
      return { snapshotSent: {} };
  }
}
