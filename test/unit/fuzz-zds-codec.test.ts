// Hostile bytes for the ZDS decoders (what a peer on the ZDS socket can send) and round trips for
// everything the encoders accept. A decoder either returns a well-typed value or throws the
// codec's own ZdsError (code ZDS_MALFORMED); an encoder never produces bytes its decoder (or
// ztunnel's prost) would refuse.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  decodeAck,
  decodeHello,
  decodeRequest,
  encodeHello,
  encodeRequest,
  encodeResponse,
  MAX_DATAGRAM_BYTES,
  type WorkloadRequest,
} from '../../src/zds/codec.js';
import { ZdsError } from '../../src/zds/errors.js';
import { fuzzParams, fuzzTest } from '../helpers/fuzz.js';

/** Runs `decode`; its only way to fail is a ZdsError ZDS_MALFORMED. */
function decodesOrMalformed<T>(decode: (b: Uint8Array) => T, bytes: Uint8Array): { value: T } | { error: ZdsError } {
  try {
    return { value: decode(bytes) };
  } catch (err) {
    if (!(err instanceof ZdsError) || err.code !== 'ZDS_MALFORMED' || err.retryable) {
      throw new Error(`decoder threw something other than ZdsError ZDS_MALFORMED: ${String(err)}`, { cause: err });
    }
    return { error: err };
  }
}

function expectWellTypedRequest(req: WorkloadRequest | undefined): void {
  if (req === undefined) return;
  const keys = Object.keys(req);
  expect(keys).toHaveLength(1);
  const isStr = (v: unknown): boolean => typeof v === 'string';
  if ('add' in req) {
    expect(isStr(req.add.uid)).toBe(true);
    if (req.add.workloadInfo) expect(Object.values(req.add.workloadInfo).every(isStr)).toBe(true);
  } else if ('del' in req) expect(isStr(req.del.uid)).toBe(true);
  else if ('keep' in req) expect(isStr(req.keep.uid)).toBe(true);
  else expect(req).toEqual({ snapshotSent: {} });
}

/** Strings over all of UTF-16, lone surrogates included (what a JS string can hold). */
const anyUtf16 = fc.string({ unit: fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)), maxLength: 30 });
const text = fc.oneof(
  { arbitrary: fc.string({ unit: 'binary', maxLength: 40 }), weight: 4 },
  { arbitrary: anyUtf16, weight: 1 },
  { arbitrary: fc.constant(''), weight: 1 },
  { arbitrary: fc.integer({ min: 300, max: 1_200 }).map((n) => 'u'.repeat(n)), weight: 1 },
);
const workloadInfo = fc.record({ name: text, namespace: text, serviceAccount: text });
const request: fc.Arbitrary<WorkloadRequest> = fc.oneof(
  fc
    .record({ add: fc.record({ uid: text, workloadInfo: fc.option(workloadInfo, { nil: undefined }) }) })
    .map((r) => (r.add.workloadInfo === undefined ? { add: { uid: r.add.uid } } : (r as WorkloadRequest))),
  fc.record({ del: fc.record({ uid: text }) }),
  fc.record({ keep: fc.record({ uid: text }) }),
  fc.constant({ snapshotSent: {} } as WorkloadRequest),
);

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const strings = (v: unknown): string[] =>
  typeof v === 'string' ? [v] : typeof v === 'object' && v !== null ? Object.values(v).flatMap(strings) : [];

/** Valid encodings with a few bytes changed, inserted, dropped or cut off. */
function mutated(base: fc.Arbitrary<Uint8Array>): fc.Arbitrary<Uint8Array> {
  const edit = fc.oneof(
    fc.record({ kind: fc.constant('set' as const), at: fc.nat(), byte: fc.nat(255) }),
    fc.record({ kind: fc.constant('insert' as const), at: fc.nat(), byte: fc.nat(255) }),
    fc.record({ kind: fc.constant('delete' as const), at: fc.nat(), byte: fc.constant(0) }),
    fc.record({ kind: fc.constant('truncate' as const), at: fc.nat(), byte: fc.constant(0) }),
  );
  return fc.tuple(base, fc.array(edit, { minLength: 1, maxLength: 4 })).map(([bytes, edits]) => {
    let b = Array.from(bytes);
    for (const e of edits) {
      const at = b.length === 0 ? 0 : e.at % (b.length + 1);
      if (e.kind === 'set' && at < b.length) b[at] = e.byte;
      else if (e.kind === 'insert') b.splice(at, 0, e.byte);
      else if (e.kind === 'delete') b.splice(at, 1);
      else if (e.kind === 'truncate') b = b.slice(0, at);
    }
    return Uint8Array.from(b);
  });
}

const validRequestBytes = request.chain((r) => {
  try {
    return fc.constant(encodeRequest(r));
  } catch {
    return fc.constant(encodeRequest({ snapshotSent: {} }));
  }
});

/** Protobuf-looking noise: tags for fields 0..7 with every wire type, varints, lengths. */
const protoNoise = fc
  .array(
    fc.oneof(
      fc.record({ field: fc.nat(7), wire: fc.nat(7) }).map(({ field, wire }) => [(field << 3) | wire]),
      fc.constantFrom([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], [0x80], [0x7f], [0x00], [0x0b], [0x0c], [0x23], [0x24]),
      fc.uint8Array({ maxLength: 4 }).map((a) => Array.from(a)),
    ),
    { maxLength: 40 },
  )
  .map((parts) => Uint8Array.from(parts.flat()));

const hostileBytes = fc.oneof(
  { arbitrary: fc.uint8Array({ maxLength: 2 * MAX_DATAGRAM_BYTES }), weight: 3 },
  { arbitrary: protoNoise, weight: 3 },
  { arbitrary: mutated(validRequestBytes), weight: 3 },
  { arbitrary: mutated(fc.string({ unit: 'binary', maxLength: 20 }).map((e) => encodeResponse({ ack: { error: e } }))), weight: 1 },
);

describe('fuzz: ZDS codec', () => {
  it('decoders: arbitrary bytes give a well-typed value or ZdsError ZDS_MALFORMED, nothing else', fuzzTest(), () => {
    fc.assert(
      fc.property(hostileBytes, (bytes) => {
        const hello = decodesOrMalformed(decodeHello, bytes);
        if ('value' in hello) expect(Number.isInteger(hello.value.version)).toBe(true);
        const ack = decodesOrMalformed(decodeAck, bytes);
        if ('value' in ack) expect(typeof ack.value).toBe('string');
        const req = decodesOrMalformed(decodeRequest, bytes);
        if ('value' in req) expectWellTypedRequest(req.value);
      }),
      fuzzParams(3000),
    );
  });

  it('requests round-trip; what cannot be sent is refused at the source with a ZdsError', fuzzTest(), () => {
    fc.assert(
      fc.property(request, (req) => {
        let bytes: Uint8Array;
        try {
          bytes = encodeRequest(req);
        } catch (err) {
          expect(err).toBeInstanceOf(ZdsError);
          const code = (err as ZdsError).code;
          if (strings(req).some((s) => LONE_SURROGATE.test(s))) expect(code).toBe('ZDS_INVALID_MESSAGE');
          else expect(code).toBe('ZDS_MESSAGE_TOO_LARGE');
          return;
        }
        expect(
          strings(req).some((s) => LONE_SURROGATE.test(s)),
          'a lone surrogate was encoded',
        ).toBe(false);
        expect(bytes.length).toBeGreaterThan(0);
        expect(bytes.length).toBeLessThanOrEqual(MAX_DATAGRAM_BYTES);
        expect(decodeRequest(bytes)).toEqual(req);
      }),
      fuzzParams(3000),
    );
  });

  it('acks and hellos round-trip', fuzzTest(), () => {
    fc.assert(
      fc.property(text, fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }), (error, version) => {
        if (LONE_SURROGATE.test(error)) {
          expect(() => encodeResponse({ ack: { error } })).toThrow(ZdsError);
        } else {
          expect(decodeAck(encodeResponse({ ack: { error } }))).toBe(error);
        }
        expect(decodeHello(encodeHello(version))).toEqual({ version });
      }),
      fuzzParams(2000),
    );
  });

  describe('explicit hostile datagrams', () => {
    const cases: Array<[string, Uint8Array]> = [
      ['field number 0 (prost: invalid tag value: 0)', Buffer.from('0000', 'hex')],
      ['100 000 nested groups of an unknown field', Buffer.alloc(100_000, 0x23)],
      ['an end-group tag with no group', Buffer.from('24', 'hex')],
      ['wire types 6 and 7', Buffer.from('0e00', 'hex')],
      ['a length far past the end', Buffer.from('0affffffff0f', 'hex')],
      ['a 10-byte varint tag', Buffer.from('ffffffffffffffffff01', 'hex')],
      ['1 MiB of 0xff', Buffer.alloc(1 << 20, 0xff)],
    ];
    it.each(cases)('%s', (_label, bytes) => {
      for (const decode of [decodeHello, decodeAck, decodeRequest] as Array<(b: Uint8Array) => unknown>) {
        expect(() => decode(bytes)).toThrow(ZdsError);
      }
    });

    it('lone surrogates are refused by the encoders rather than sent as invalid UTF-8', () => {
      // What encodeRequest({ del: { uid: 'a\uD800b' } }) used to produce: CESU-8, not UTF-8.
      expect(() => decodeRequest(Buffer.from('1207120561eda08062', 'hex'))).toThrow(ZdsError);
      expect(() => encodeRequest({ del: { uid: 'a\uD800b' } })).toThrow(expect.objectContaining({ code: 'ZDS_INVALID_MESSAGE' }));
      expect(() => encodeRequest({ add: { uid: 'u', workloadInfo: { name: '\uDC00', namespace: 'n', serviceAccount: 's' } } })).toThrow(
        ZdsError,
      );
      expect(() => encodeResponse({ ack: { error: '\uD83D' } })).toThrow(ZdsError);
      expect(decodeRequest(encodeRequest({ del: { uid: 'a\uD83D\uDE00b' } }))).toEqual({ del: { uid: 'a\uD83D\uDE00b' } }); // a proper pair is fine
    });
  });
});
