// The agent's parsers for the plugin's /cmdadd, /cmdcheck and /cmddel bodies, fed arbitrary JSON:
// they return an event whose every field is valid, or throw BadRequest (a 400) with a short
// message, and never anything else. Valid events always pass unchanged.
import { isIP } from 'node:net';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { BadRequest, parseAddEvent, parseDelEvent } from '../../src/agent/plugin-event-server.js';
import type { PluginAddEvent, PluginDelEvent } from '../../src/cni/protocol.js';
import { fuzzParams, fuzzTest } from '../helpers/fuzz.js';

// ---- the oracle (written independently of the parser) -----------------------------------------

const isPodName = (v: string): boolean => v.length <= 253 && v.split('.').every((l) => /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(l));
const isNamespace = (v: string): boolean => v.length <= 63 && /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(v);
const isId =
  (max: number) =>
  (v: string): boolean =>
    v.length <= max && /^[A-Za-z0-9][A-Za-z0-9_.-]*$/.test(v);
const isNetns = (v: string): boolean =>
  v.startsWith('/') && !v.includes('\0') && Buffer.byteLength(v) < 4096 && !v.split('/').includes('..');
const isMask = (v: string): boolean =>
  v === '' || ([4, 16].includes(Buffer.from(v, 'base64').length) && Buffer.from(v, 'base64').toString('base64') === v);

function eventProblems(e: PluginAddEvent | PluginDelEvent, netnsRequired: boolean): string[] {
  const p: string[] = [];
  if (netnsRequired ? !isNetns(e.Netns) : e.Netns !== '' && !isNetns(e.Netns)) p.push('Netns');
  if (!isPodName(e.PodName)) p.push('PodName');
  if (!isNamespace(e.PodNamespace)) p.push('PodNamespace');
  if (e.PodUID !== '' && !isId(128)(e.PodUID ?? '')) p.push('PodUID');
  if (e.ContainerID !== '' && !isId(1024)(e.ContainerID ?? '')) p.push('ContainerID');
  if ('IPs' in e) {
    if (e.IPs.length > 64) p.push('IPs length');
    for (const ip of e.IPs) {
      if (isIP(ip.Address.IP) === 0 || ip.Address.IP.includes('%')) p.push('IP');
      if (!isMask(ip.Address.Mask)) p.push('Mask');
      if (ip.Gateway !== '' && (isIP(ip.Gateway) === 0 || ip.Gateway.includes('%'))) p.push('Gateway');
      if (ip.Interface !== null && !(Number.isSafeInteger(ip.Interface) && ip.Interface >= 0)) p.push('Interface');
    }
  }
  return p;
}

/** Runs the parser: a valid event, or a BadRequest with a short message; anything else fails. */
function parseOrReject<T extends PluginAddEvent | PluginDelEvent>(parse: (b: unknown) => T, body: unknown): T | undefined {
  try {
    return parse(body);
  } catch (err) {
    if (!(err instanceof BadRequest)) throw new Error(`parser threw something other than BadRequest: ${String(err)}`, { cause: err });
    expect(err.message.length).toBeGreaterThan(0);
    expect(err.message.length).toBeLessThan(300); // values are quoted by their start only
    return undefined;
  }
}

// ---- arbitraries --------------------------------------------------------------------------------

const hostileString = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 30 }),
  fc.constantFrom(
    '',
    ' ',
    'web;rm -rf',
    'Web',
    'web\n',
    'a..b',
    '-web',
    'web-',
    '.web',
    'a'.repeat(64),
    'a'.repeat(254),
    'x'.repeat(100_000),
  ),
  fc.constantFrom(
    '/var/run/netns/x',
    'var/run/netns/x',
    '/var/run/netns/../../etc',
    '/..',
    '/a/\u0000/b',
    `/${'p'.repeat(5000)}`,
    '/proc/1/ns/net',
  ),
  fc.constantFrom('10.0.0.1', '::1', 'fd00::5', '10.0.0.1 ', '10.0.0.256', '1.2.3.4; x', '::ffff:1.2.3.4', 'fe80::1%eth0'),
  fc.constantFrom('////AA==', '//////////8AAAAAAAAAAA==', '////AA', 'not base64', '////////', 'AAAAAAAAAAAAAAAAAAAAAAAA'),
);
const anyJson: fc.Arbitrary<unknown> = fc.oneof(
  { arbitrary: fc.jsonValue({ maxDepth: 2 }), weight: 2 },
  { arbitrary: hostileString, weight: 3 },
  { arbitrary: fc.constantFrom(-1, 0.5, 2 ** 53, -0, 1e308, Number.MAX_SAFE_INTEGER, 7), weight: 1 },
);

/** Values that Kubernetes and a runtime really produce. */
const validName = fc.stringMatching(/^[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?){0,2}$/);
const validNamespace = fc.stringMatching(/^[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?$/);
const validNetns = fc.oneof(
  fc.stringMatching(/^[a-z0-9-]{1,20}$/).map((n) => `/var/run/netns/cni-${n}`),
  fc.nat(99_999).map((n) => `/proc/${n}/ns/net`),
);
const validIpConfig = fc.record({
  Interface: fc.oneof(fc.constant(null), fc.nat(8)),
  Address: fc.oneof(
    fc.record({ IP: fc.ipV4(), Mask: fc.constantFrom('////AA==', '/////w==', 'AAAAAA==') }),
    fc.record({ IP: fc.ipV6(), Mask: fc.constantFrom('//////////8AAAAAAAAAAA==', '/////////////////////w==') }),
  ),
  Gateway: fc.oneof(fc.constant(''), fc.ipV4(), fc.ipV6()),
});
const validAdd: fc.Arbitrary<PluginAddEvent> = fc.record({
  Netns: validNetns,
  PodName: validName,
  PodNamespace: validNamespace,
  IPs: fc.array(validIpConfig, { maxLength: 4 }),
  PodUID: fc.oneof(fc.uuid(), fc.constant('')),
  ContainerID: fc.oneof(fc.stringMatching(/^[0-9a-f]{64}$/), fc.constant('')),
});

/** A valid event with fields replaced, removed, or extra ones added. */
const mutatedAdd: fc.Arbitrary<unknown> = fc
  .tuple(
    validAdd,
    fc.dictionary(
      fc.constantFrom('Netns', 'PodName', 'PodNamespace', 'PodUID', 'ContainerID', 'IPs', 'Extra', '__proto__', 'constructor'),
      anyJson,
      { maxKeys: 2 },
    ),
    fc.array(fc.tuple(fc.nat(), fc.constantFrom('Interface', 'Address', 'Gateway', 'IP', 'Mask'), anyJson), { maxLength: 2 }),
  )
  .map(([event, fields, ipEdits]) => {
    const body = JSON.parse(JSON.stringify(event)) as Record<string, unknown>;
    for (const [k, v] of Object.entries(fields)) body[k] = v;
    const ips = body['IPs'];
    if (Array.isArray(ips) && ips.length > 0) {
      for (const [i, key, value] of ipEdits) {
        const entry = ips[i % ips.length] as Record<string, unknown> | null;
        if (typeof entry !== 'object' || entry === null) continue;
        if (key === 'IP' || key === 'Mask') {
          if (typeof entry['Address'] === 'object' && entry['Address'] !== null) (entry['Address'] as Record<string, unknown>)[key] = value;
        } else entry[key] = value;
      }
    }
    return body;
  });

const bodies = fc.oneof(
  { arbitrary: mutatedAdd, weight: 6 },
  { arbitrary: fc.jsonValue({ maxDepth: 4 }), weight: 1 },
  { arbitrary: fc.object({ maxDepth: 2 }), weight: 1 },
  {
    arbitrary: fc
      .array(fc.constant(null), { minLength: 60, maxLength: 70 })
      .map((IPs) => ({ Netns: '/n', PodName: 'a', PodNamespace: 'b', IPs })),
    weight: 1,
  },
);

describe('fuzz: plugin event parsers', () => {
  it('parseAddEvent: arbitrary bodies give a fully valid event or a BadRequest', fuzzTest(), () => {
    let accepted = 0;
    fc.assert(
      fc.property(bodies, (body) => {
        const event = parseOrReject(parseAddEvent, body);
        if (event) {
          accepted++;
          expect(eventProblems(event, true)).toEqual([]);
        }
      }),
      fuzzParams(3000),
    );
    expect(accepted).toBeGreaterThan(0); // the mutations leave some bodies valid
  });

  it('parseDelEvent: arbitrary bodies give a fully valid event or a BadRequest', fuzzTest(), () => {
    fc.assert(
      fc.property(bodies, (body) => {
        const event = parseOrReject(parseDelEvent, body);
        if (event) expect(eventProblems(event, false)).toEqual([]);
      }),
      fuzzParams(2000),
    );
  });

  it('valid events pass unchanged (validation refuses nothing a runtime sends)', fuzzTest(), () => {
    fc.assert(
      fc.property(validAdd, (event) => {
        expect(parseAddEvent(JSON.parse(JSON.stringify(event)))).toEqual(event);
        const { IPs: _ips, ...del } = event;
        expect(parseDelEvent(JSON.parse(JSON.stringify(del)))).toEqual(del);
        expect(parseDelEvent({ ...del, Netns: '' })).toEqual({ ...del, Netns: '' });
      }),
      fuzzParams(1000),
    );
  });

  describe('explicit hostile fields are 400s', () => {
    const good = {
      Netns: '/var/run/netns/x',
      PodName: 'web',
      PodNamespace: 'shop',
      PodUID: 'uid-web',
      ContainerID: 'c-web',
      IPs: [{ Interface: 0, Address: { IP: '10.0.0.5', Mask: '////AA==' }, Gateway: '10.0.0.1' }],
    };
    const ip = good.IPs[0]!;
    const cases: Array<[string, Record<string, unknown>]> = [
      ['PodName with ";"', { PodName: 'web;flush ruleset' }],
      ['PodName with a newline', { PodName: 'web\nx' }],
      ['PodName of 100 KB', { PodName: 'a'.repeat(100_000) }],
      ['upper-case PodName', { PodName: 'Web' }],
      ['PodNamespace of 64 bytes', { PodNamespace: 'a'.repeat(64) }],
      ['PodNamespace with a dot', { PodNamespace: 'a.b' }],
      ['relative Netns', { Netns: 'var/run/netns/x' }],
      ['Netns with ".."', { Netns: '/var/run/netns/../../../etc/shadow' }],
      ['Netns with NUL', { Netns: '/var/run/netns/x\u0000y' }],
      ['Netns over PATH_MAX', { Netns: `/${'a'.repeat(5000)}` }],
      ['PodUID with a slash', { PodUID: '../../x' }],
      ['PodUID of 129 bytes', { PodUID: 'u'.repeat(129) }],
      ['ContainerID with a quote', { ContainerID: 'c"x' }],
      ['a number for PodName', { PodName: 5 }],
      ['IPs not an array', { IPs: {} }],
      ['65 IPs', { IPs: Array.from({ length: 65 }, () => ip) }],
      ['an IP that is not one', { IPs: [{ ...ip, Address: { IP: '10.0.0.5; drop', Mask: '////AA==' } }] }],
      ['an IP with a zone', { IPs: [{ ...ip, Address: { IP: 'fe80::1%eth0', Mask: '' } }] }],
      ['a mask that is not base64 of 4 or 16 bytes', { IPs: [{ ...ip, Address: { IP: '10.0.0.5', Mask: '////' } }] }],
      ['a gateway that is not an IP', { IPs: [{ ...ip, Gateway: 'gw' }] }],
      ['a negative interface', { IPs: [{ ...ip, Interface: -1 }] }],
      ['a fractional interface', { IPs: [{ ...ip, Interface: 1.5 }] }],
      ['an interface as a string', { IPs: [{ ...ip, Interface: '1' }] }],
      ['a null IPs entry', { IPs: [null] }],
    ];
    it.each(cases)('%s', (_label, change) => {
      const body = { ...good, ...change };
      expect(() => parseAddEvent(body)).toThrow(BadRequest);
      if (!('IPs' in change)) expect(() => parseDelEvent(body)).toThrow(BadRequest);
      try {
        parseAddEvent(body);
      } catch (err) {
        expect((err as Error).message.length).toBeLessThan(300);
      }
    });

    it('the body itself must be an object', () => {
      for (const body of [null, 1, 'x', [], [good], true]) {
        expect(() => parseAddEvent(body)).toThrow(BadRequest);
        expect(() => parseDelEvent(body)).toThrow(BadRequest);
      }
    });

    it('absent optional fields and null are Go zero values', () => {
      expect(parseAddEvent({ Netns: '/n', PodName: 'a', PodNamespace: 'b' })).toEqual({
        Netns: '/n',
        PodName: 'a',
        PodNamespace: 'b',
        PodUID: '',
        ContainerID: '',
        IPs: [],
      });
      expect(parseAddEvent({ ...good, IPs: [{ Address: { IP: '::1' } }] }).IPs).toEqual([
        { Interface: null, Address: { IP: '::1', Mask: '' }, Gateway: '' },
      ]);
      expect(parseDelEvent({ Netns: null, PodName: 'a', PodNamespace: 'b', PodUID: null })).toMatchObject({ Netns: '', PodUID: '' });
    });
  });
});
