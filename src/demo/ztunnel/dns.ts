// The ztunnel stand-in's DNS codec: just enough of RFC 1035 for one question and one A answer,
// and the stand-in's answer to a query (names under the demo's suffix from its records).
import net from 'node:net';

export const DNS_TYPE_A = 1;
export const DNS_TYPE_AAAA = 28;
export const DNS_CLASS_IN = 1;
export const DNS_RCODE = { NOERROR: 0, FORMERR: 1, SERVFAIL: 2, NXDOMAIN: 3, NOTIMP: 4, REFUSED: 5 } as const;
const RCODE_NAMES = ['NOERROR', 'FORMERR', 'SERVFAIL', 'NXDOMAIN', 'NOTIMP', 'REFUSED'];

const DNS_HEADER_BYTES = 12;
const FLAG_QR = 0x8000;
const FLAG_AA = 0x0400;
const FLAG_TC = 0x0200;
const FLAG_RD = 0x0100;
const MAX_NAME_BYTES = 255;

export interface DnsQuestion {
  /** Labels joined by '.', without the root dot; bytes outside printable ASCII (and '.', '\') as \DDD. */
  name: string;
  type: number;
  class: number;
}

export interface DnsQuery {
  id: number;
  flags: number;
  question: DnsQuestion;
}

export interface DnsAnswer {
  name: string;
  type: number;
  class: number;
  ttl: number;
  /** Dotted quad for A records, hex for anything else. */
  data: string;
}

export interface DnsResponse {
  id: number;
  flags: number;
  rcode: number;
  truncated: boolean;
  question: DnsQuestion | undefined;
  answers: DnsAnswer[];
}

/** A message that is not a well-formed query; `id` is known when the header was readable. */
export class DnsFormatError extends Error {
  override readonly name = 'DnsFormatError';
  constructor(
    message: string,
    readonly id: number | undefined,
    readonly flags: number | undefined,
    /** The rcode to answer with; undefined = do not answer at all. */
    readonly rcode: number | undefined,
  ) {
    super(message);
  }
}

export function rcodeName(rcode: number): string {
  return RCODE_NAMES[rcode] ?? `RCODE${rcode}`;
}

function labelText(bytes: Uint8Array): string {
  let out = '';
  for (const b of bytes) {
    if (b > 0x20 && b < 0x7f && b !== 0x2e && b !== 0x5c) out += String.fromCharCode(b);
    else out += `\\${b.toString().padStart(3, '0')}`;
  }
  return out;
}

/** Reads a (possibly compressed) name at `offset`; returns it and the offset after it. */
function readName(msg: Uint8Array, offset: number, allowPointers: boolean): { name: string; next: number } {
  const labels: string[] = [];
  let pos = offset;
  let next: number | undefined;
  let total = 0;
  for (let hops = 0; ;) {
    const len = msg[pos];
    if (len === undefined) throw new Error('name runs past the end of the message');
    if (len === 0) {
      pos += 1;
      break;
    }
    if ((len & 0xc0) === 0xc0) {
      if (!allowPointers) throw new Error('compression pointer in the question');
      const low = msg[pos + 1];
      if (low === undefined) throw new Error('truncated compression pointer');
      if (++hops > 32) throw new Error('compression pointer loop');
      next ??= pos + 2;
      pos = ((len & 0x3f) << 8) | low;
      continue;
    }
    if ((len & 0xc0) !== 0) throw new Error(`unsupported label type 0x${len.toString(16)}`);
    if (pos + 1 + len > msg.length) throw new Error('label runs past the end of the message');
    total += len + 1;
    if (total + 1 > MAX_NAME_BYTES) throw new Error('name longer than 255 bytes');
    labels.push(labelText(msg.subarray(pos + 1, pos + 1 + len)));
    pos += 1 + len;
  }
  return { name: labels.join('.'), next: next ?? pos };
}

function encodeName(name: string): Buffer {
  const trimmed = name.endsWith('.') ? name.slice(0, -1) : name;
  const parts: Buffer[] = [];
  if (trimmed !== '') {
    for (const label of trimmed.split('.')) {
      const bytes = Buffer.from(label, 'ascii');
      if (bytes.length === 0 || bytes.length > 63 || !/^[\x21-\x7e]+$/.test(label))
        throw new TypeError(`invalid DNS label in ${JSON.stringify(name)}`);
      parts.push(Buffer.from([bytes.length]), bytes);
    }
  }
  parts.push(Buffer.from([0]));
  const out = Buffer.concat(parts);
  if (out.length > MAX_NAME_BYTES) throw new TypeError(`DNS name too long: ${name}`);
  return out;
}

/**
 * Parses a query with exactly one question. Throws DnsFormatError: without `rcode` for what
 * must not be answered (shorter than a header, or a response), with FORMERR/NOTIMP otherwise.
 * Answer/authority/additional sections (EDNS OPT) are ignored.
 */
export function parseDnsQuery(msg: Uint8Array): DnsQuery {
  if (msg.length < DNS_HEADER_BYTES)
    throw new DnsFormatError(`${msg.length}-byte message is shorter than a DNS header`, undefined, undefined, undefined);
  const view = Buffer.from(msg.buffer, msg.byteOffset, msg.byteLength);
  const id = view.readUInt16BE(0);
  const flags = view.readUInt16BE(2);
  if (flags & FLAG_QR) throw new DnsFormatError('message is a response, not a query', id, flags, undefined);
  const opcode = (flags >> 11) & 0xf;
  if (opcode !== 0) throw new DnsFormatError(`opcode ${opcode} is not QUERY`, id, flags, DNS_RCODE.NOTIMP);
  const qdcount = view.readUInt16BE(4);
  if (qdcount !== 1) throw new DnsFormatError(`${qdcount} questions (exactly one supported)`, id, flags, DNS_RCODE.FORMERR);
  let name: string;
  let next: number;
  try {
    ({ name, next } = readName(msg, DNS_HEADER_BYTES, false));
  } catch (err) {
    throw new DnsFormatError(`bad question name: ${(err as Error).message}`, id, flags, DNS_RCODE.FORMERR);
  }
  if (next + 4 > msg.length) throw new DnsFormatError('question without type and class', id, flags, DNS_RCODE.FORMERR);
  return { id, flags, question: { name, type: view.readUInt16BE(next), class: view.readUInt16BE(next + 2) } };
}

function header(id: number, flags: number, qd: number, an: number): Buffer {
  const h = Buffer.alloc(DNS_HEADER_BYTES);
  h.writeUInt16BE(id, 0);
  h.writeUInt16BE(flags, 2);
  h.writeUInt16BE(qd, 4);
  h.writeUInt16BE(an, 6);
  return h;
}

function questionBytes(q: DnsQuestion): Buffer {
  const tail = Buffer.alloc(4);
  tail.writeUInt16BE(q.type, 0);
  tail.writeUInt16BE(q.class, 2);
  return Buffer.concat([encodeName(q.name), tail]);
}

function ipv4Bytes(ip: string): Buffer {
  if (net.isIPv4(ip)) return Buffer.from(ip.split('.').map(Number));
  throw new TypeError(`not an IPv4 address: ${ip}`);
}

/** A response to `query`: rcode, and at most one A record (name compressed to the question). */
export function buildDnsResponse(
  query: { id: number; flags: number; question?: DnsQuestion },
  rcode: number,
  a?: { ip: string; ttl?: number },
): Buffer {
  const flags = FLAG_QR | FLAG_AA | (query.flags & FLAG_RD) | (rcode & 0xf);
  const parts = [header(query.id, flags, query.question ? 1 : 0, a ? 1 : 0)];
  if (query.question) parts.push(questionBytes(query.question));
  if (a) {
    if (!query.question) throw new TypeError('an answer needs the question');
    const rr = Buffer.alloc(12);
    rr.writeUInt16BE(0xc000 | DNS_HEADER_BYTES, 0); // pointer to the question's name
    rr.writeUInt16BE(DNS_TYPE_A, 2);
    rr.writeUInt16BE(DNS_CLASS_IN, 4);
    rr.writeUInt32BE(a.ttl ?? 30, 6);
    rr.writeUInt16BE(4, 10);
    parts.push(rr, ipv4Bytes(a.ip));
  }
  return Buffer.concat(parts);
}

/** A recursion-desired query with one question (what a stub resolver sends). */
export function buildDnsQuery(id: number, name: string, type = DNS_TYPE_A): Buffer {
  return Buffer.concat([header(id & 0xffff, FLAG_RD, 1, 0), questionBytes({ name, type, class: DNS_CLASS_IN })]);
}

/** Parses a response (for clients): header, the question if any, and the answer records. */
export function parseDnsResponse(msg: Uint8Array): DnsResponse {
  if (msg.length < DNS_HEADER_BYTES) throw new Error(`${msg.length}-byte message is shorter than a DNS header`);
  const view = Buffer.from(msg.buffer, msg.byteOffset, msg.byteLength);
  const id = view.readUInt16BE(0);
  const flags = view.readUInt16BE(2);
  if (!(flags & FLAG_QR)) throw new Error('message is a query, not a response');
  const qdcount = view.readUInt16BE(4);
  const ancount = view.readUInt16BE(6);
  if (qdcount > 1) throw new Error(`${qdcount} questions in a response`);
  let pos = DNS_HEADER_BYTES;
  let question: DnsQuestion | undefined;
  if (qdcount === 1) {
    const { name, next } = readName(msg, pos, true);
    if (next + 4 > msg.length) throw new Error('truncated question');
    question = { name, type: view.readUInt16BE(next), class: view.readUInt16BE(next + 2) };
    pos = next + 4;
  }
  const answers: DnsAnswer[] = [];
  for (let i = 0; i < ancount; i++) {
    const { name, next } = readName(msg, pos, true);
    if (next + 10 > msg.length) throw new Error('truncated resource record');
    const type = view.readUInt16BE(next);
    const rdlen = view.readUInt16BE(next + 8);
    const start = next + 10;
    if (start + rdlen > msg.length) throw new Error('truncated rdata');
    const rdata = view.subarray(start, start + rdlen);
    answers.push({
      name,
      type,
      class: view.readUInt16BE(next + 2),
      ttl: view.readUInt32BE(next + 4),
      data: type === DNS_TYPE_A && rdlen === 4 ? [...rdata].join('.') : rdata.toString('hex'),
    });
    pos = start + rdlen;
  }
  return { id, flags, rcode: flags & 0xf, truncated: (flags & FLAG_TC) !== 0, question, answers };
}

export interface DnsVerdict {
  /** What to send back; undefined = drop silently. */
  response: Buffer | undefined;
  name?: string;
  /** The address answered, or the rcode name (NXDOMAIN, FORMERR, ...), or NODATA. */
  answer: string;
}

/**
 * The stand-in's resolver: A queries for a name under `suffix` found in `records` get that
 * address; a known name asked for another type gets NOERROR without answers (NODATA); every
 * other name gets NXDOMAIN. Malformed queries get FORMERR (or nothing, see parseDnsQuery).
 */
export function answerDnsQuery(msg: Uint8Array, records: ReadonlyMap<string, string>, suffix = '.demo'): DnsVerdict {
  let query: DnsQuery;
  try {
    query = parseDnsQuery(msg);
  } catch (err) {
    const e = err as DnsFormatError;
    if (e.rcode === undefined || e.id === undefined || e.flags === undefined) return { response: undefined, answer: 'dropped' };
    return { response: buildDnsResponse({ id: e.id, flags: e.flags }, e.rcode), answer: rcodeName(e.rcode) };
  }
  const { question } = query;
  const key = question.name.toLowerCase();
  const ip = key.endsWith(suffix.toLowerCase()) ? records.get(key) : undefined;
  if (ip === undefined || question.class !== DNS_CLASS_IN) {
    return { response: buildDnsResponse(query, DNS_RCODE.NXDOMAIN), name: question.name, answer: 'NXDOMAIN' };
  }
  if (question.type !== DNS_TYPE_A) return { response: buildDnsResponse(query, DNS_RCODE.NOERROR), name: question.name, answer: 'NODATA' };
  return { response: buildDnsResponse(query, DNS_RCODE.NOERROR, { ip }), name: question.name, answer: ip };
}
