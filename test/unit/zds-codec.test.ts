import { describe, expect, it } from 'vitest';
import {
  decodeAck,
  decodeHello,
  decodeRequest,
  encodeHello,
  encodeRequest,
  encodeResponse,
  MAX_DATAGRAM_BYTES,
} from '../../src/zds/codec.js';
import { ZdsError } from '../../src/zds/errors.js';

const hex = (b: Uint8Array): string => Buffer.from(b).toString('hex');
const bytes = (h: string): Uint8Array => Buffer.from(h.replace(/ /g, ''), 'hex');

describe('ZDS codec: exact bytes (docs/zds-protocol.md §1, as prost and Go produce them)', () => {
  it.each([
    ['ZdsHello{version: V1}', hex(encodeHello()), '0801'],
    ['WorkloadResponse{ack: {error: ""}}', hex(encodeResponse({ ack: { error: '' } })), '0a00'],
    ['WorkloadResponse{ack: {error: "x"}}', hex(encodeResponse({ ack: { error: 'x' } })), '0a030a0178'],
    ['WorkloadRequest{snapshot_sent: {}}', hex(encodeRequest({ snapshotSent: {} })), '1a00'],
    ['WorkloadRequest{del: {uid: "u"}}', hex(encodeRequest({ del: { uid: 'u' } })), '1203120175'],
    ['WorkloadRequest{keep: {uid: "u"}}', hex(encodeRequest({ keep: { uid: 'u' } })), '2a030a0175'],
    [
      'WorkloadRequest{add: {uid: "u", workload_info: {}}}',
      hex(encodeRequest({ add: { uid: 'u', workloadInfo: { name: '', namespace: '', serviceAccount: '' } } })),
      '0a050a01751200',
    ],
  ])('%s', (_name, actual, expected) => {
    expect(actual).toBe(expected);
  });

  it('encodes a full add with every workload field', () => {
    const encoded = encodeRequest({ add: { uid: 'u1', workloadInfo: { name: 'p', namespace: 'n', serviceAccount: 's' } } });
    expect(hex(encoded)).toBe('0a' + '0f' + '0a027531' + '12' + '09' + '0a0170' + '12016e' + '1a0173');
    expect(decodeRequest(encoded)).toEqual({ add: { uid: 'u1', workloadInfo: { name: 'p', namespace: 'n', serviceAccount: 's' } } });
  });
});

describe('ZDS codec: limits enforced at the source', () => {
  it('refuses a datagram over 1024 bytes with a clear error', () => {
    const uid = 'u'.repeat(MAX_DATAGRAM_BYTES);
    expect(() => encodeRequest({ del: { uid } })).toThrow(/ZDS del message is 10\d\d bytes; ztunnel reads at most 1024/);
    const err = (() => {
      try {
        encodeRequest({ keep: { uid } });
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(ZdsError);
    expect(err).toMatchObject({ code: 'ZDS_MESSAGE_TOO_LARGE', retryable: false });
  });

  it('accepts a datagram of exactly 1024 bytes', () => {
    // del = tag, 2-byte length, inner tag, 2-byte length, uid: 6 bytes of framing
    const encoded = encodeRequest({ del: { uid: 'u'.repeat(1024 - 6) } });
    expect(encoded.length).toBe(1024);
  });
});

describe('ZDS codec: decoding like prost', () => {
  it('reads acks and hellos', () => {
    expect(decodeAck(bytes('0a00'))).toBe('');
    expect(decodeAck(bytes('0a030a0178'))).toBe('x');
    expect(decodeHello(bytes('0801'))).toEqual({ version: 1 });
    expect(decodeHello(bytes(''))).toEqual({ version: 0 });
  });

  it('skips unknown fields (for example the Windows namespace of experimental branches)', () => {
    // add{uid:"u", workload_info:{name:"p", windows_namespace(5):{id:1}}, field 3 (unknown): "zz"}
    const msg = bytes('0a 10 0a 01 75 12 07 0a 01 70 2a 02 08 01 1a 02 7a 7a');
    expect(decodeRequest(msg)).toEqual({ add: { uid: 'u', workloadInfo: { name: 'p', namespace: '', serviceAccount: '' } } });
    expect(decodeAck(bytes('0a 00 10 05 1a 01 41'))).toBe(''); // unknown varint and string after the ack
  });

  it('lets the last oneof member on the wire win', () => {
    expect(decodeRequest(bytes('0a050a01751200 1203120176'))).toEqual({ del: { uid: 'v' } });
    expect(decodeRequest(bytes('1203120176 1a00'))).toEqual({ snapshotSent: {} });
    expect(decodeRequest(bytes('1a00 1203120176 1a00 2a030a0177'))).toEqual({ keep: { uid: 'w' } });
  });

  it('returns undefined for a request with no payload (ztunnel: "no payload")', () => {
    expect(decodeRequest(bytes('2202 0000'))).toBeUndefined(); // only an unknown field 4
  });

  it.each([
    ['truncated length', '0a05 0a01'],
    ['truncated varint', '08ff'],
    ['wrong wire type for a known field', '0800'],
    ['invalid UTF-8 in a string', '0a03 0a01 ff'],
    ['nested wrong wire type', '0a02 0801'],
  ])('rejects malformed input: %s', (_why, h) => {
    expect(() => decodeAck(bytes(h))).toThrow(expect.objectContaining({ code: 'ZDS_MALFORMED' }));
  });

  it('rejects a response without an ack', () => {
    expect(() => decodeAck(bytes(''))).toThrow('WorkloadResponse without an ack');
  });
});
