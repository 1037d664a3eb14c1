// The host probe sets and the host dataplane against the fake addon. A small local subclass of
// the fake models the two sets the way the kernel does (atomic transactions, `add element` of an
// existing element keeps its old comment, `delete element` of an absent one fails, `flush table`
// keeps elements) and answers the JSON `list set` / `list sets` commands, so both the exact
// transaction texts and the resulting contents can be checked.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino, type Logger } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { systemError } from '../../src/addon/errors.js';
import type { NetnsHandle, NetnsTarget } from '../../src/addon/net-addon.js';
import type { ResultsOf, Step } from '../../src/addon/steps.js';
import { HostDataplane } from '../../src/host/host-dataplane.js';
import { parseProbeIp, parseProbeSetJson, ProbeSets, renderElementChanges } from '../../src/host/probe-sets.js';
import { defaultRuleSettings } from '../../src/rules/settings.js';
import { FakeNetAddon } from '../fakes/fake-net-addon.js';
import { istioGoldenPath } from '../fixtures/istio-golden.js';

const HOST = '/proc/self/ns/net';
const T = 'inet istio-ambient-nat';
const V4 = 'istio-inpod-probes-v4';
const V6 = 'istio-inpod-probes-v6';
const SET_COMMENT = 'UUID of the pods that are part of ambient mesh';
const goldenPath = (name: string): string => istioGoldenPath(`nftables/${name}`);

type Elements = Map<string, string | undefined>;

function nftError(message: string): Error {
  return systemError('EINVAL', -22, 'nft_run_cmd_from_buffer', `EINVAL: Invalid argument, nft_run_cmd_from_buffer: ${message}`);
}

/** The fake addon plus a model of table `inet istio-ambient-nat` and its sets. */
class SetModelAddon extends FakeNetAddon {
  table = false;
  sets = new Map<string, { type: string; elements: Elements }>();
  /** Element changes (scripts without `list`) that reached the model, in order. */
  get scripts(): string[] {
    return this.namespaces.get(HOST)?.nftScripts ?? [];
  }
  /** Runs that only listed. */
  listRuns = 0;

  constructor() {
    super();
    this.addNetns(HOST);
  }

  elements(set: string): Record<string, string | undefined> {
    return Object.fromEntries(this.sets.get(set)?.elements ?? []);
  }

  seed(set: string, elements: Record<string, string | undefined>): void {
    this.table = true;
    const type = set === V4 ? 'ipv4_addr' : 'ipv6_addr';
    this.sets.set(set, { type, elements: new Map(Object.entries(elements)) });
  }

  override async run<const S extends readonly Step[]>(target: NetnsTarget, steps: S): Promise<ResultsOf<S>> {
    const nft = steps.every((s) => s.op === 'nft');
    if (nft && steps.length > 0 && steps.every((s) => s.op === 'nft' && s.script.startsWith('list '))) {
      this.runs.push({ target: target === 'fresh' ? 'fresh' : target.path, steps: [...steps] });
      if (target !== 'fresh' && target.closed) throw new Error('netns is already closed');
      if (steps.some((s) => s.op === 'nft' && s.script === 'list ruleset')) return super.run(target, steps);
      this.listRuns++;
      return steps.map((s) => ({ op: 'nft', output: this.#list(s.op === 'nft' ? s.script : '') })) as ResultsOf<S>;
    }
    if (target !== 'fresh' && nft) {
      // Apply on a copy and keep it only if every command succeeds: a transaction.
      const before = { table: this.table, sets: this.#copySets() };
      try {
        for (const s of steps) if (s.op === 'nft') this.#apply(s.script);
      } catch (err) {
        this.table = before.table;
        this.sets = before.sets;
        throw err;
      }
    }
    return super.run(target, steps);
  }

  #copySets(): Map<string, { type: string; elements: Elements }> {
    return new Map([...this.sets].map(([k, v]) => [k, { type: v.type, elements: new Map(v.elements) }]));
  }

  #list(script: string): string {
    const meta = { metainfo: { version: '1.0.6', release_name: 'Lester Gooch #5', json_schema_version: 1 } };
    if (script === 'list sets inet') {
      const sets = [...this.sets].map(([name, s]) => ({
        set: { family: 'inet', name, table: 'istio-ambient-nat', type: s.type, handle: 1 },
      }));
      return JSON.stringify({ nftables: [meta, ...sets] });
    }
    const m = /^list set inet istio-ambient-nat (\S+)$/.exec(script);
    const set = m ? this.sets.get(m[1] ?? '') : undefined;
    if (!m || !set) throw nftError(`Error: No such file or directory\n${script}`);
    const elem = [...set.elements].map(([val, comment]) => (comment === undefined ? val : { elem: { val, comment } }));
    const body = { family: 'inet', name: m[1], table: 'istio-ambient-nat', type: set.type, handle: 1, comment: SET_COMMENT };
    return JSON.stringify({ nftables: [meta, { set: elem.length > 0 ? { ...body, elem } : body }] });
  }

  #apply(script: string): void {
    for (const line of script.split('\n').filter((l) => l !== '')) {
      let m: RegExpExecArray | null;
      if (line === `add table ${T}`) {
        this.table = true;
      } else if (line === `delete table ${T}`) {
        if (!this.table) throw nftError('Error: Could not process rule: No such file or directory');
        this.table = false;
        this.sets.clear();
      } else if ((m = /^add set inet istio-ambient-nat (\S+) \{ type (\S+) ;/.exec(line))) {
        if (!this.table) throw nftError('Error: No such file or directory');
        if (!this.sets.has(m[1] ?? '')) this.sets.set(m[1] ?? '', { type: m[2] ?? '', elements: new Map() });
      } else if ((m = /^flush set inet istio-ambient-nat (\S+)$/.exec(line))) {
        this.#set(m[1]).elements.clear();
      } else if ((m = /^(add|delete) element inet istio-ambient-nat (\S+) \{ (.*) \}$/.exec(line))) {
        const set = this.#set(m[2]);
        for (const item of (m[3] ?? '').split(', ')) {
          const e = /^(\S+)(?: comment "([^"]*)")?$/.exec(item);
          if (!e) throw nftError(`Error: syntax error in ${JSON.stringify(item)}`);
          const ip = e[1] ?? '';
          if (m[1] === 'delete') {
            if (!set.elements.has(ip)) throw nftError('Error: Could not process rule: No such file or directory');
            set.elements.delete(ip);
          } else if (!set.elements.has(ip)) {
            set.elements.set(ip, e[2]); // an existing element keeps its old comment (as the kernel)
          }
        }
      } else if (!/^(flush table|add chain|add rule) /.test(line)) {
        throw new Error(`model does not know: ${line}`);
      }
    }
  }

  #set(name: string | undefined): { type: string; elements: Elements } {
    const set = this.sets.get(name ?? '');
    if (!set) throw nftError('Error: No such file or directory');
    return set;
  }
}

function capturingLogger(): { log: Logger; lines: Array<{ level: number; msg: string } & Record<string, unknown>> } {
  const lines: Array<{ level: number; msg: string } & Record<string, unknown>> = [];
  const log = pino({ level: 'debug' }, { write: (s: string) => void lines.push(JSON.parse(s)) });
  return { log, lines };
}

function setup(ipv6 = true, extra: { maxChangesPerTransaction?: number } = {}) {
  const addon = new SetModelAddon();
  const ns: NetnsHandle = addon.openNetns(HOST);
  const { log, lines } = capturingLogger();
  const sets = new ProbeSets(addon, ns, { ipv6, log, ...extra });
  return { addon, ns, sets, lines };
}

describe('probe IP parsing', () => {
  it('keeps IPv4, canonicalises IPv6 as nft lists it, unmaps IPv4-mapped addresses', () => {
    expect(parseProbeIp('10.0.0.1')).toEqual({ family: 4, ip: '10.0.0.1' });
    expect(parseProbeIp('FD00:0:0::0:1')).toEqual({ family: 6, ip: 'fd00::1' });
    expect(parseProbeIp('2001:db8:0:0:1:0:0:1')).toEqual({ family: 6, ip: '2001:db8::1:0:0:1' });
    expect(parseProbeIp('2001:db8:0:1:1:1:1:1')).toEqual({ family: 6, ip: '2001:db8:0:1:1:1:1:1' });
    expect(parseProbeIp('::ffff:10.0.0.1')).toEqual({ family: 4, ip: '10.0.0.1' });
    expect(parseProbeIp('::ffff:a00:2')).toEqual({ family: 4, ip: '10.0.0.2' });
    expect(parseProbeIp('::1')).toEqual({ family: 6, ip: '::1' });
    expect(parseProbeIp('::')).toEqual({ family: 6, ip: '::' });
  });

  it.each(['10.0.0.256', '010.0.0.1', '10.0.0.1; flush ruleset', '10.0.0.1 }', ' 10.0.0.1', 'fe80::1%eth0', '', 'pod', '10.0.0.0/24'])(
    'rejects %j',
    (ip) => expect(() => parseProbeIp(ip)).toThrow(/invalid pod IP/),
  );
});

describe('JSON listing', () => {
  it('reads elements with and without comments and ignores other objects', () => {
    const json = JSON.stringify({
      nftables: [
        { metainfo: { json_schema_version: 1 } },
        { set: { name: 'other', elem: ['10.9.9.9'] } },
        { set: { name: V4, elem: [{ elem: { val: '10.0.0.1', comment: 'u1' } }, '10.0.0.3', { elem: { val: '10.0.0.4' } }] } },
      ],
    });
    expect(parseProbeSetJson(json, V4)).toEqual(
      new Map([
        ['10.0.0.1', 'u1'],
        ['10.0.0.3', ''],
        ['10.0.0.4', ''],
      ]),
    );
  });

  it('an empty set has no elem; odd shapes are skipped and reported; bad JSON throws', () => {
    expect(parseProbeSetJson('{"nftables":[{"set":{"name":"s"}}]}', 's')).toEqual(new Map());
    const skipped: string[] = [];
    const odd = {
      nftables: [{ set: { name: 's', elem: [{ prefix: { addr: '10.0.0.0', len: 8 } }, 'bogus', { elem: { val: 'FD00::0:1' } }] } }],
    };
    expect(parseProbeSetJson(JSON.stringify(odd), 's', (w) => skipped.push(w))).toEqual(new Map([['fd00::1', '']]));
    expect(skipped).toHaveLength(2);
    expect(() => parseProbeSetJson('not json', 's')).toThrow(/unreadable JSON listing of set s/);
    expect(() => parseProbeSetJson('{}', 's')).toThrow(/no "nftables" array/);
  });

  it('list() returns both families', async () => {
    const { addon, sets } = setup();
    addon.seed(V4, { '10.0.0.1': 'u1', '10.0.0.2': undefined });
    addon.seed(V6, { 'fd00::1': 'u6' });
    expect(await sets.list()).toEqual(
      new Map([
        ['10.0.0.1', 'u1'],
        ['10.0.0.2', ''],
        ['fd00::1', 'u6'],
      ]),
    );
    expect(addon.runs).toHaveLength(1); // one run, one step per set
    expect(addon.runs[0]?.steps).toEqual([
      { op: 'nft', script: `list set ${T} ${V4}`, json: true },
      { op: 'nft', script: `list set ${T} ${V6}`, json: true },
    ]);
  });

  it('a listing failure carries the namespace path', async () => {
    const { sets } = setup();
    await expect(sets.list()).rejects.toThrow(`probe sets in ${HOST}: EINVAL`);
  });
});

describe('ProbeSets transactions', () => {
  it('ensure creates table and sets (keeping elements); flush empties both', async () => {
    const { addon, sets } = setup();
    await sets.ensure();
    addon.sets.get(V4)?.elements.set('10.0.0.1', 'u1');
    await sets.ensure();
    expect(addon.elements(V4)).toEqual({ '10.0.0.1': 'u1' });
    await sets.flush();
    expect(addon.elements(V4)).toEqual({});
    const setLine = (name: string, type: string): string => `add set ${T} ${name} { type ${type} ; comment "${SET_COMMENT}" ; }\n`;
    const ensure = `add table ${T}\n${setLine(V4, 'ipv4_addr')}${setLine(V6, 'ipv6_addr')}`;
    expect(addon.scripts).toEqual([ensure, ensure, `flush set ${T} ${V4}\nflush set ${T} ${V6}\n`]);
  });

  it('without IPv6 only the v4 set exists and is flushed', async () => {
    const { addon, sets } = setup(false);
    await sets.ensure();
    await sets.flush();
    expect([...addon.sets.keys()]).toEqual([V4]);
    expect(addon.scripts[1]).toBe(`flush set ${T} ${V4}\n`);
    expect(sets.setNames).toEqual([V4]);
  });

  it('upsert adds with the UID as comment; IPv6 goes to -v6 in canonical form', async () => {
    const { addon, sets } = setup();
    await sets.ensure();
    expect(await sets.upsert('10.0.0.1', 'uid-a')).toBe('added');
    expect(await sets.upsert('FD00:0::7', 'uid-a')).toBe('added');
    expect(await sets.upsert('::ffff:10.0.0.2', 'uid-b')).toBe('added');
    expect(addon.scripts.slice(1)).toEqual([
      `add element ${T} ${V4} { 10.0.0.1 comment "uid-a" }\n`,
      `add element ${T} ${V6} { fd00::7 comment "uid-a" }\n`,
      `add element ${T} ${V4} { 10.0.0.2 comment "uid-b" }\n`,
    ]);
    expect(addon.elements(V4)).toEqual({ '10.0.0.1': 'uid-a', '10.0.0.2': 'uid-b' });
    expect(addon.elements(V6)).toEqual({ 'fd00::7': 'uid-a' });
  });

  it('upsert of the same IP and UID changes nothing', async () => {
    const { addon, sets } = setup();
    addon.seed(V4, { '10.0.0.1': 'uid-a' });
    addon.seed(V6, {});
    expect(await sets.upsert('10.0.0.1', 'uid-a')).toBe('unchanged');
    expect(addon.scripts).toEqual([]);
    // Only the set of the address's family is listed.
    expect(addon.runs[0]?.steps).toEqual([{ op: 'nft', script: `list set ${T} ${V4}`, json: true }]);
  });

  it('an IP reused by another pod: delete + add in one transaction, the new UID wins', async () => {
    const { addon, sets, lines } = setup();
    addon.seed(V4, { '10.0.0.1': 'uid-old', '10.0.0.9': undefined });
    addon.seed(V6, { 'fd00::1': 'uid-old' });
    expect(await sets.upsert('10.0.0.1', 'uid-new')).toBe('replaced');
    expect(await sets.upsert('10.0.0.9', 'uid-x')).toBe('replaced'); // an element without a comment too
    expect(await sets.upsert('fd00::1', 'uid-new')).toBe('replaced');
    expect(addon.scripts).toEqual([
      `delete element ${T} ${V4} { 10.0.0.1 }\nadd element ${T} ${V4} { 10.0.0.1 comment "uid-new" }\n`,
      `delete element ${T} ${V4} { 10.0.0.9 }\nadd element ${T} ${V4} { 10.0.0.9 comment "uid-x" }\n`,
      `delete element ${T} ${V6} { fd00::1 }\nadd element ${T} ${V6} { fd00::1 comment "uid-new" }\n`,
    ]);
    expect(addon.elements(V4)).toEqual({ '10.0.0.1': 'uid-new', '10.0.0.9': 'uid-x' });
    expect(addon.elements(V6)).toEqual({ 'fd00::1': 'uid-new' });
    expect(lines.some((l) => l.previousUid === 'uid-old' && l.uid === 'uid-new')).toBe(true);
  });

  it('the model is faithful: a plain add would have kept the old UID (the Istio nft bug we avoid)', async () => {
    const { addon, ns } = setup();
    addon.seed(V4, { '10.0.0.1': 'uid-old' });
    await addon.run(ns, [{ op: 'nft', script: `add element ${T} ${V4} { 10.0.0.1 comment "uid-new" }\n` }]);
    expect(addon.elements(V4)).toEqual({ '10.0.0.1': 'uid-old' });
  });

  it('concurrent upserts of one IP are serialised: the last caller wins, nothing fails', async () => {
    const { addon, sets } = setup();
    addon.seed(V4, {});
    addon.seed(V6, {});
    const outcomes = await Promise.all([
      sets.upsert('10.0.0.1', 'uid-a'),
      sets.upsert('10.0.0.1', 'uid-b'),
      sets.remove('10.0.0.1', 'uid-a'),
    ]);
    expect(outcomes).toEqual(['added', 'replaced', false]);
    expect(addon.elements(V4)).toEqual({ '10.0.0.1': 'uid-b' });
  });

  it('IPv6 is rejected with a clear error when IPv6 is off, before anything runs', async () => {
    const { addon, sets } = setup(false);
    await expect(sets.upsert('fd00::1', 'uid-a')).rejects.toThrow(/pod IP fd00::1 is IPv6 but IPv6 is disabled/);
    await expect(sets.remove('fd00::1', 'uid-a')).rejects.toThrow(/IPv6 is disabled/);
    await expect(sets.sync(new Map([['fd00::1', 'u']]), { prune: true })).rejects.toThrow(/IPv6 is disabled/);
    expect(addon.runs).toEqual([]);
  });

  it.each(['10.0.0.1 }; flush ruleset; add element inet x y { 1.1.1.1', '10.0.0.256', 'fe80::1%eth0', '', 'host.example'])(
    'invalid IP %j is rejected before any nft text',
    async (ip) => {
      const { addon, sets } = setup();
      await expect(sets.upsert(ip, 'uid-a')).rejects.toThrow(/invalid pod IP/);
      await expect(sets.remove(ip, 'uid-a')).rejects.toThrow(/invalid pod IP/);
      await expect(
        sets.sync(
          new Map([
            ['10.0.0.1', 'ok'],
            [ip, 'uid-a'],
          ]),
          { prune: true },
        ),
      ).rejects.toThrow(/invalid pod IP/);
      expect(addon.runs).toEqual([]);
    },
  );

  it.each(['a"b', 'x\ny', '', 'a'.repeat(129), 'uid" ; flush ruleset ; "', '-leading'])(
    'invalid UID %j is rejected before any nft text',
    async (uid) => {
      const { addon, sets } = setup();
      await expect(sets.upsert('10.0.0.1', uid)).rejects.toThrow(/invalid pod UID/);
      await expect(sets.remove('10.0.0.1', uid)).rejects.toThrow(/invalid pod UID/);
      await expect(sets.sync(new Map([['10.0.0.1', uid]]), { prune: false })).rejects.toThrow(/invalid pod UID/);
      expect(addon.runs).toEqual([]);
    },
  );

  it('remove deletes only when the comment equals the UID', async () => {
    const { addon, sets, lines } = setup();
    addon.seed(V4, { '10.0.0.1': 'uid-new', '10.0.0.2': 'uid-a', '10.0.0.3': undefined });
    addon.seed(V6, { 'fd00::1': 'uid-a' });
    expect(await sets.remove('10.0.0.1', 'uid-old')).toBe(false); // reused by another pod: kept
    expect(await sets.remove('10.0.0.3', 'uid-a')).toBe(false); // no comment: not ours to remove
    expect(await sets.remove('10.0.0.4', 'uid-a')).toBe(false); // absent: success, nothing to do
    expect(addon.scripts).toEqual([]);
    const warning = lines.find((l) => l.msg.includes('not removed'));
    expect(warning).toMatchObject({ level: 40, ip: '10.0.0.1', uid: 'uid-old', holderUid: 'uid-new' });
    expect(await sets.remove('10.0.0.2', 'uid-a')).toBe(true);
    expect(await sets.remove('FD00::1', 'uid-a')).toBe(true);
    expect(addon.scripts).toEqual([`delete element ${T} ${V4} { 10.0.0.2 }\n`, `delete element ${T} ${V6} { fd00::1 }\n`]);
    expect(addon.elements(V4)).toEqual({ '10.0.0.1': 'uid-new', '10.0.0.3': undefined });
  });
});

describe('ProbeSets.sync', () => {
  function seeded(prune: boolean) {
    const s = setup();
    s.addon.seed(V4, { '10.0.0.1': 'u1', '10.0.0.2': 'u2-old', '10.0.0.3': 'u3-gone' });
    s.addon.seed(V6, { 'fd00::3': 'u3-gone', 'fd00::1': 'u1' });
    const expected = new Map([
      ['10.0.0.1', 'u1'],
      ['10.0.0.2', 'u2'],
      ['10.0.0.5', 'u5'],
      ['fd00:0::1', 'u1'],
      ['fd00::5', 'u5'],
    ]);
    return { ...s, expected, prune };
  }

  it('upserts, replaces and prunes in one transaction', async () => {
    const { addon, sets, expected } = seeded(true);
    const result = await sets.sync(expected, { prune: true });
    expect(result).toEqual({ added: 2, replaced: 1, unchanged: 2, pruned: 2, transactions: 1 });
    expect(addon.scripts).toEqual([
      `delete element ${T} ${V4} { 10.0.0.2, 10.0.0.3 }\n` +
        `add element ${T} ${V4} { 10.0.0.2 comment "u2", 10.0.0.5 comment "u5" }\n` +
        `delete element ${T} ${V6} { fd00::3 }\n` +
        `add element ${T} ${V6} { fd00::5 comment "u5" }\n`,
    ]);
    expect(addon.elements(V4)).toEqual({ '10.0.0.1': 'u1', '10.0.0.2': 'u2', '10.0.0.5': 'u5' });
    expect(addon.elements(V6)).toEqual({ 'fd00::1': 'u1', 'fd00::5': 'u5' });
    expect(addon.listRuns).toBe(1);
  });

  it('without prune, unexpected entries stay', async () => {
    const { addon, sets, expected } = seeded(false);
    const result = await sets.sync(expected, { prune: false });
    expect(result).toEqual({ added: 2, replaced: 1, unchanged: 2, pruned: 0, transactions: 1 });
    expect(addon.scripts).toEqual([
      `delete element ${T} ${V4} { 10.0.0.2 }\n` +
        `add element ${T} ${V4} { 10.0.0.2 comment "u2", 10.0.0.5 comment "u5" }\n` +
        `add element ${T} ${V6} { fd00::5 comment "u5" }\n`,
    ]);
    expect(addon.elements(V4)['10.0.0.3']).toBe('u3-gone');
    expect(addon.elements(V6)['fd00::3']).toBe('u3-gone');
  });

  it('nothing to change: no transaction', async () => {
    const { addon, sets } = setup();
    addon.seed(V4, { '10.0.0.1': 'u1' });
    addon.seed(V6, {});
    expect(await sets.sync(new Map([['10.0.0.1', 'u1']]), { prune: true })).toMatchObject({ unchanged: 1, transactions: 0 });
    expect(addon.scripts).toEqual([]);
  });

  it('prune of an empty expectation empties the sets', async () => {
    const { addon, sets } = setup();
    addon.seed(V4, { '10.0.0.1': 'u1', '10.0.0.2': undefined });
    addon.seed(V6, {});
    await sets.sync(new Map(), { prune: true });
    expect(addon.scripts).toEqual([`delete element ${T} ${V4} { 10.0.0.1, 10.0.0.2 }\n`]);
  });

  it('startup with 150 pods is one listing and one transaction', async () => {
    const { addon, sets } = setup();
    await sets.ensure();
    const expected = new Map(Array.from({ length: 150 }, (_, i) => [`10.1.${i >> 8}.${i & 0xff}`, `pod-${i}`] as [string, string]));
    expect(await sets.sync(expected, { prune: true })).toMatchObject({ added: 150, transactions: 1 });
    expect(addon.scripts).toHaveLength(2); // ensure + the sync transaction
    expect(addon.scripts[1]?.split('\n').filter(Boolean)).toHaveLength(1); // one `add element` with all 150
    expect(Object.keys(addon.elements(V4))).toHaveLength(150);
    expect(addon.listRuns).toBe(1);
  });

  it('larger batches split at maxChangesPerTransaction, keeping each replacement whole', async () => {
    const { addon, sets } = setup(true, { maxChangesPerTransaction: 64 });
    addon.seed(V4, Object.fromEntries(Array.from({ length: 150 }, (_, i) => [`10.1.${i >> 8}.${i & 0xff}`, 'old'])));
    addon.seed(V6, {});
    const expected = new Map(Array.from({ length: 150 }, (_, i) => [`10.1.${i >> 8}.${i & 0xff}`, `pod-${i}`] as [string, string]));
    expect(await sets.sync(expected, { prune: true })).toMatchObject({ replaced: 150, transactions: 3 });
    for (const script of addon.scripts) {
      const [del, add] = script.split('\n');
      expect((del?.match(/,/g) ?? []).length).toBe((add?.match(/,/g) ?? []).length);
    }
    expect(new Set(Object.values(addon.elements(V4))).has('old')).toBe(false);
  });

  it('one IP expected under two UIDs is refused (also via its IPv4-mapped spelling)', async () => {
    const { addon, sets } = setup();
    await expect(
      sets.sync(
        new Map([
          ['10.0.0.1', 'a'],
          ['::ffff:10.0.0.1', 'b'],
        ]),
        { prune: true },
      ),
    ).rejects.toThrow(/10\.0\.0\.1 is expected under two pod UIDs/);
    expect(addon.runs).toEqual([]);
  });

  it('a failed transaction changes nothing (the kernel applies all or nothing)', async () => {
    const { addon, sets } = setup();
    addon.seed(V4, { '10.0.0.1': 'u1' });
    addon.seed(V6, {});
    addon.failOn = (step) => (step.op === 'nft' && step.script.startsWith('delete') ? nftError('boom') : undefined);
    await expect(sets.sync(new Map([['10.0.0.2', 'u2']]), { prune: true })).rejects.toThrow(/probe sets in .*boom/s);
    addon.failOn = () => undefined;
    // The queue is not stuck after a failure.
    expect(await sets.upsert('10.0.0.3', 'u3')).toBe('added');
  });

  it('renderElementChanges: an empty batch is an empty script', () => {
    expect(renderElementChanges([])).toBe('');
  });
});

describe('HostDataplane (fake addon)', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  function procDirWith(processes: Array<{ pid: number; comm: string; cmdline: string; uid: number }>): string {
    const dir = mkdtempSync(join(tmpdir(), 'ana-proc-'));
    dirs.push(dir);
    for (const p of processes) addProcess(dir, p);
    return dir;
  }

  function addProcess(dir: string, p: { pid: number; comm: string; cmdline: string; uid: number }): void {
    mkdirSync(join(dir, String(p.pid)));
    writeFileSync(join(dir, String(p.pid), 'comm'), `${p.comm}\n`);
    writeFileSync(join(dir, String(p.pid), 'cmdline'), p.cmdline.split(' ').join('\0'));
    writeFileSync(join(dir, String(p.pid), 'status'), `Name:\t${p.comm}\nUid:\t${p.uid}\t${p.uid}\t${p.uid}\t${p.uid}\n`);
  }

  function dataplane(ipv6: boolean, opts: { kubeletUid?: number; procDir?: string; intervalMs?: number } = {}) {
    const addon = new SetModelAddon();
    const hostNetns = addon.openNetns(HOST);
    const { log, lines } = capturingLogger();
    const host = new HostDataplane({
      addon,
      hostNetns,
      settings: defaultRuleSettings({ ipv6 }),
      procDir: opts.procDir ?? '/nonexistent',
      ...(opts.kubeletUid !== undefined ? { kubeletUid: opts.kubeletUid } : {}),
      ...(opts.intervalMs !== undefined ? { kubeletLookupIntervalMs: opts.intervalMs } : {}),
      log,
    });
    return { addon, host, lines };
  }

  it('start: ensure, flush, then the golden hostprobe transaction (sets kept, elements flushed)', async () => {
    const { addon, host } = dataplane(false, { kubeletUid: 1000 });
    addon.seed(V4, { '10.0.0.1': 'left-over' });
    await host.start();
    expect(addon.elements(V4)).toEqual({});
    expect(addon.scripts[1]).toBe(`flush set ${T} ${V4}\n`);
    expect(addon.scripts.at(-1)).toBe(readFileSync(goldenPath('hostprobe.golden'), 'utf8'));
    expect(host.kubeletUid).toBe(1000);
  });

  it('start finds the kubelet UID in procDir, retrying until it appears', async () => {
    const procDir = procDirWith([{ pid: 7, comm: 'bash', cmdline: 'bash', uid: 0 }]);
    const { addon, host, lines } = dataplane(false, { procDir, intervalMs: 20 });
    const started = host.start();
    setTimeout(() => addProcess(procDir, { pid: 42, comm: 'kubelet', cmdline: '/usr/bin/kubelet --config x', uid: 1234 }), 30);
    await started;
    expect(host.kubeletUid).toBe(1234);
    expect(addon.scripts.at(-1)).toContain('skuid 1234 ip daddr @istio-inpod-probes-v4');
    expect(lines.some((l) => l.msg.includes('retrying'))).toBe(true);
  });

  it('no kubelet after every attempt: the clear error, and nothing written', async () => {
    const procDir = procDirWith([{ pid: 7, comm: 'kubelet-impostor', cmdline: 'x', uid: 5 }]);
    const { addon, host } = dataplane(false, { procDir, intervalMs: 1 });
    await expect(host.start()).rejects.toThrow(`no kubelet process (kubelet, kubelite, k3s) found in ${procDir} (10 attempts, 1 ms apart)`);
    expect(addon.runs).toEqual([]);
  });

  it('podEnrolled / podRemoved; IPv6 skipped with a debug log when IPv6 is off', async () => {
    const { addon, host, lines } = dataplane(false, { kubeletUid: 1000 });
    await host.start();
    await host.podEnrolled('uid-a', ['10.0.0.1', 'fd00::1']);
    expect(addon.elements(V4)).toEqual({ '10.0.0.1': 'uid-a' });
    expect(lines.find((l) => l.msg.includes('IPv6 pod IP skipped'))).toMatchObject({ level: 20, ip: 'fd00::1' });
    await host.podRemoved('uid-b', ['10.0.0.1', 'fd00::1']);
    expect(addon.elements(V4)).toEqual({ '10.0.0.1': 'uid-a' });
    await host.podRemoved('uid-a', ['10.0.0.1', 'fd00::1']);
    expect(addon.elements(V4)).toEqual({});
  });

  it('podEnrolled validates every IP before changing anything', async () => {
    const { addon, host } = dataplane(true, { kubeletUid: 1000 });
    await host.start();
    const before = addon.scripts.length;
    await expect(host.podEnrolled('uid-a', ['10.0.0.1', '10.0.0.999'])).rejects.toThrow(/invalid pod IP/);
    expect(addon.scripts).toHaveLength(before);
  });

  it('syncEnrolled prunes only when every pod has an IP', async () => {
    const { addon, host } = dataplane(true, { kubeletUid: 1000 });
    await host.start();
    addon.sets.get(V4)?.elements.set('10.0.0.99', 'stale');
    await host.syncEnrolled([
      { uid: 'a', ips: ['10.0.0.1', 'fd00::1'] },
      { uid: 'b', ips: [] },
    ]);
    expect(host.lastSync).toMatchObject({ added: 2, pruned: 0, pruneApplied: false });
    expect(addon.elements(V4)).toEqual({ '10.0.0.99': 'stale', '10.0.0.1': 'a' });
    await host.syncEnrolled([
      { uid: 'a', ips: ['10.0.0.1', 'fd00::1'] },
      { uid: 'b', ips: ['10.0.0.2'] },
    ]);
    expect(host.lastSync).toMatchObject({ added: 1, unchanged: 2, pruned: 1, pruneApplied: true, transactions: 1 });
    expect(addon.elements(V4)).toEqual({ '10.0.0.1': 'a', '10.0.0.2': 'b' });
    expect(addon.elements(V6)).toEqual({ 'fd00::1': 'a' });
  });

  it('syncEnrolled: an IP reported by two pods goes to the later one, with a warning', async () => {
    const { addon, host, lines } = dataplane(false, { kubeletUid: 1000 });
    await host.start();
    await host.syncEnrolled([
      { uid: 'a', ips: ['10.0.0.1'] },
      { uid: 'b', ips: ['10.0.0.1'] },
    ]);
    expect(addon.elements(V4)).toEqual({ '10.0.0.1': 'b' });
    expect(lines.some((l) => l.level === 40 && l.otherUid === 'a')).toBe(true);
  });

  it('cleanup deletes the table in one idempotent transaction', async () => {
    const { addon, host } = dataplane(true, { kubeletUid: 1000 });
    await host.start();
    await host.cleanup();
    await host.cleanup();
    expect(addon.table).toBe(false);
    expect(addon.scripts.slice(-1)).toEqual([`add table ${T}\ndelete table ${T}\n`]);
  });

  it('verify reports missing probe sets; before start it refuses', async () => {
    const { addon, host } = dataplane(true, {});
    await expect(host.verify()).rejects.toThrow(/not started/);
    const started = dataplane(true, { kubeletUid: 1000 });
    await started.host.start();
    // The fake's listings are empty, so only the set check is meaningful here.
    started.addon.sets.delete(V6);
    const report = await started.host.verify();
    expect(report.missing).toContainEqual({ kind: 'set', where: T, text: `set ${V6} { type ipv6_addr ; }` });
    expect(addon.runs).toEqual([]);
  });
});
