// The persisted pod registry (<run dir>/pods/<uid>.json) is input too: a restarted agent reads
// whatever it finds there. Random, corrupt, truncated, oversized and foreign files, hostile file
// names, and things that are not regular files must never make load() throw or hang; each
// unusable file is set aside as *.corrupt and reported, every good one loads.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parseEnrolledPod, PodStateStore, STATE_DIR, stateFileName, type EnrolledPod } from '../../src/standalone/state-store.js';
import { fuzzParams, fuzzTest } from '../helpers/fuzz.js';

// ---- the oracle for a loaded pod (independent of state-store.ts) -------------------------------

const dnsLabel = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const isSubdomain = (v: string): boolean => v.length <= 253 && v.split('.').every((l) => dnsLabel.test(l));
function podProblems(p: EnrolledPod): string[] {
  const problems: string[] = [];
  if (p.uid === '' || p.uid.length > 512 || /[\u0000-\u001f\u007f]/.test(p.uid)) problems.push('uid');
  if (!isSubdomain(p.name)) problems.push('name');
  if (!(p.namespace.length <= 63 && dnsLabel.test(p.namespace))) problems.push('namespace');
  if (!isSubdomain(p.serviceAccount)) problems.push('serviceAccount');
  if (!p.netnsPath.startsWith('/') || p.netnsPath.includes('\0') || p.netnsPath.split('/').includes('..')) problems.push('netnsPath');
  if (!Number.isSafeInteger(p.netnsIno) || p.netnsIno < 0 || !Number.isSafeInteger(p.netnsDev) || p.netnsDev < 0) problems.push('ino/dev');
  if (!p.ips.every((ip) => typeof ip === 'string' && isIP(ip) !== 0 && !ip.includes('%'))) problems.push('ips');
  if (p.containerId !== '' && !/^[A-Za-z0-9][A-Za-z0-9_.-]*$/.test(p.containerId)) problems.push('containerId');
  return problems;
}

// ---- arbitraries --------------------------------------------------------------------------------

const name = fc.stringMatching(/^[a-z0-9]([-a-z0-9]{0,15}[a-z0-9])?$/);
const validPod: fc.Arbitrary<EnrolledPod> = fc
  .record({
    name,
    namespace: name,
    serviceAccount: fc.oneof(fc.constant('default'), name),
    netnsPath: fc.oneof(
      name.map((n) => `/var/run/netns/${n}`),
      fc.nat(99_999).map((n) => `/proc/${n}/ns/net`),
    ),
    netnsIno: fc.nat(),
    netnsDev: fc.nat(),
    ips: fc.array(fc.oneof(fc.ipV4(), fc.ipV6()), { maxLength: 3 }),
    containerId: fc.oneof(fc.constant(''), fc.stringMatching(/^[0-9a-f]{12,64}$/)),
    uidKind: fc.constantFrom('uuid', 'standalone', 'odd'),
    uuid: fc.uuid(),
    odd: fc.string({ unit: 'binary', minLength: 1, maxLength: 300 }).filter((s) => !/[\u0000-\u001f\u007f]/.test(s)),
  })
  .map(({ uidKind, uuid, odd, ...rest }) => ({
    uid: uidKind === 'uuid' ? uuid : uidKind === 'standalone' ? `${rest.namespace}/${rest.name}` : odd,
    ...rest,
  }));

const hostileJsonValue = fc.oneof(
  fc.jsonValue({ maxDepth: 2 }),
  fc.constantFrom('', '../../etc/shadow', 'rel/ns', '/ns/\u0000x', 'Web', 'a;b', '10.0.0.1%eth0', -1, 1.5, 2 ** 60, null),
);

/** Contents a damaged, hand-edited or foreign state file may hold. */
const badContent: fc.Arbitrary<string | Buffer> = fc.oneof(
  { arbitrary: fc.uint8Array({ maxLength: 200 }).map((b) => Buffer.from(b)), weight: 2 },
  {
    arbitrary: fc.tuple(validPod, fc.nat()).map(([p, n]) => {
      const t = JSON.stringify(p);
      return t.slice(0, n % t.length);
    }),
    weight: 2,
  },
  {
    arbitrary: fc
      .tuple(
        validPod,
        fc.constantFrom<keyof EnrolledPod>(
          'uid',
          'name',
          'namespace',
          'serviceAccount',
          'netnsPath',
          'netnsIno',
          'netnsDev',
          'ips',
          'containerId',
        ),
        hostileJsonValue,
      )
      .map(([p, key, value]) => JSON.stringify({ ...p, [key]: value })),
    weight: 3,
  },
  { arbitrary: fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v) ?? ''), weight: 1 },
  { arbitrary: validPod.map((p) => `${JSON.stringify(p)}${' '.repeat(70 * 1024)}`), weight: 1 }, // over 64 KiB
  { arbitrary: fc.constant(''), weight: 1 },
);

/** File names a person or another program could leave: any bytes but '/' and NUL, then .json. */
const hostileName = fc
  .oneof(
    fc.string({ unit: 'binary', minLength: 0, maxLength: 40 }),
    fc.constantFrom('', '.', '..', '-rf', ' ', '\n', 'a b', '%2f', '%00', 'sha256-00', '..%2f..%2fetc'),
  )
  .map((s) => `${s.replace(/[/\0]/g, '_')}.json`)
  .filter((n) => Buffer.byteLength(n) <= 255);

/** Files that are none of the store's business (left alone, not reported), and a crash's temp file (removed). */
const TEMP_LEFTOVER = 'x.json.tmp.0123456789ab';
const otherName = fc.constantFrom('README', TEMP_LEFTOVER, 'y.json.corrupt', 'z.jsonx', '.hidden');

interface Layout {
  goods: EnrolledPod[];
  bads: Array<{ name: string; content: string | Buffer; misnamedPod?: EnrolledPod }>;
  others: string[];
}

const layout: fc.Arbitrary<Layout> = fc.record({
  goods: fc.array(validPod, { maxLength: 4 }),
  bads: fc.array(
    fc.oneof(
      fc.record({ name: hostileName, content: badContent }),
      // a good pod under a name that is not its own
      fc
        .record({ name: hostileName, misnamedPod: validPod })
        .map(({ name: n, misnamedPod }) => ({ name: n, content: JSON.stringify(misnamedPod), misnamedPod })),
    ),
    { maxLength: 5 },
  ),
  others: fc.uniqueArray(otherName, { maxLength: 2 }),
});

/** What load() must make of a file, decided without the store: a pod, or unusable. */
function oracle(name: string, content: string | Buffer): EnrolledPod | undefined {
  const bytes = typeof content === 'string' ? Buffer.from(content) : content;
  if (bytes.length > 64 * 1024) return undefined;
  let pod: EnrolledPod;
  try {
    pod = parseEnrolledPod(bytes.toString('utf8'));
  } catch {
    return undefined;
  }
  return podProblems(pod).length === 0 && stateFileName(pod.uid) === name ? pod : undefined;
}

/** The file name the store's contract gives a UID, written out byte by byte (its escaping rule). */
function expectedFileName(uid: string): string {
  let safe = '';
  for (const byte of Buffer.from(uid, 'utf8')) {
    const c = String.fromCharCode(byte);
    safe += /[A-Za-z0-9_-]/.test(c) ? c : `%${byte.toString(16).padStart(2, '0')}`;
  }
  if (safe.length > 200) safe = `sha256-${createHash('sha256').update(uid).digest('hex')}`;
  return `${safe}.json`;
}

const byUid = (a: EnrolledPod, b: EnrolledPod): number => (a.uid < b.uid ? -1 : a.uid > b.uid ? 1 : 0);

describe('fuzz: the pod state store', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'fuzz-state-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('stateFileName: safe UIDs (UUIDs) keep their text, anything else is escaped byte by byte or hashed', fuzzTest(), () => {
    const safeChar = fc.constantFrom(...'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-');
    const uid = fc.oneof(
      fc.uuid(),
      fc.string({ unit: safeChar, minLength: 1, maxLength: 260 }),
      fc.string({ unit: 'binary', minLength: 1, maxLength: 120 }),
      fc.string({ minLength: 1, maxLength: 80 }),
    );
    fc.assert(
      fc.property(uid, (u) => stateFileName(u) === expectedFileName(u)),
      fuzzParams(2000),
    );
    expect(stateFileName('6f1c7e2a-9d3b-4c55-8a1e-0b2f3c4d5e6f')).toBe('6f1c7e2a-9d3b-4c55-8a1e-0b2f3c4d5e6f.json');
    expect(stateFileName('shop/web')).toBe('shop%2fweb.json');
    expect(stateFileName('a'.repeat(200))).toBe(`${'a'.repeat(200)}.json`);
    expect(stateFileName('a'.repeat(201))).toMatch(/^sha256-[0-9a-f]{64}\.json$/);
    expect(() => stateFileName('')).toThrow(RangeError);
  });

  it('load() removes temp files a crash left between write and rename, and keeps the pods', () => {
    const store = new PodStateStore(dir);
    const pod: EnrolledPod = {
      uid: 'u1',
      name: 'web',
      namespace: 'shop',
      serviceAccount: 'default',
      netnsPath: '/var/run/netns/a',
      netnsIno: 1,
      netnsDev: 4,
      ips: ['10.0.0.5'],
      containerId: 'c1',
    };
    store.put(pod);
    const leftover = join(dir, STATE_DIR, `${stateFileName('u2')}.tmp.0123456789ab`);
    writeFileSync(leftover, '{"uid":"u2"');
    const loaded = new PodStateStore(dir).load();
    expect(loaded).toEqual({ pods: [pod], problems: [] });
    expect(existsSync(leftover)).toBe(false);
  });

  it('parseEnrolledPod: arbitrary text gives a pod whose every field is valid, or an Error', fuzzTest(), () => {
    const text = fc.oneof(
      badContent.map((c) => c.toString()),
      validPod.map((p) => JSON.stringify(p)),
      fc.string({ unit: 'binary', maxLength: 100 }),
    );
    fc.assert(
      fc.property(text, (t) => {
        let pod: EnrolledPod;
        try {
          pod = parseEnrolledPod(t);
        } catch (err) {
          expect(err).toBeInstanceOf(Error);
          expect((err as Error).message.length).toBeLessThan(1_000);
          return;
        }
        expect(podProblems(pod)).toEqual([]);
      }),
      fuzzParams(3000),
    );
  });

  it('every pod parseEnrolledPod accepts survives put() and load()', fuzzTest(), () => {
    fc.assert(
      fc.property(validPod, (pod) => {
        const runDir = mkdtempSync(join(dir, 'rt-'));
        new PodStateStore(runDir).put(pod);
        expect(new PodStateStore(runDir).load()).toEqual({ pods: [pod], problems: [] });
      }),
      fuzzParams(200),
    );
  });

  it('load(): never throws, sets aside and reports exactly the unusable *.json files, loads the good ones', fuzzTest(), () => {
    let n = 0;
    fc.assert(
      fc.property(layout, ({ goods, bads, others }) => {
        const runDir = join(dir, `run-${n++}`);
        const store = new PodStateStore(runDir);
        mkdirSync(store.dir, { recursive: true });
        const files = new Map<string, EnrolledPod | undefined>(); // name -> the pod it must load as
        for (const pod of goods) {
          const file = stateFileName(pod.uid);
          if (files.has(file)) continue;
          store.put(pod);
          files.set(file, pod);
        }
        for (const bad of bads) {
          // (setting aside x.json replaces an older x.json.corrupt: keep the "others" out of that)
          if (files.has(bad.name) || others.includes(`${bad.name}.corrupt`)) continue;
          writeFileSync(join(store.dir, bad.name), bad.content);
          files.set(bad.name, oracle(bad.name, bad.content));
        }
        const otherContent = new Map<string, string>();
        for (const other of others) {
          writeFileSync(join(store.dir, other), `not ours: ${other}`);
          otherContent.set(other, `not ours: ${other}`);
        }

        const loaded = new PodStateStore(runDir).load();

        const expectedPods = [...files.values()].filter((p): p is EnrolledPod => p !== undefined);
        expect([...loaded.pods].sort(byUid)).toEqual([...expectedPods].sort(byUid));
        const expectedBad = [...files.entries()]
          .filter(([, p]) => p === undefined)
          .map(([f]) => f)
          .sort();
        expect(loaded.problems.map((p) => basename(p.file)).sort()).toEqual(expectedBad);
        for (const problem of loaded.problems) {
          expect(problem.reason.length).toBeGreaterThan(0);
          expect(existsSync(problem.file)).toBe(false);
          expect(existsSync(`${problem.file}.corrupt`)).toBe(true);
        }
        for (const [file, pod] of files) if (pod) expect(existsSync(join(store.dir, file))).toBe(true);
        for (const [other, content] of otherContent) {
          if (other === TEMP_LEFTOVER) expect(existsSync(join(store.dir, other))).toBe(false);
          else expect(readFileSync(join(store.dir, other), 'utf8')).toBe(content);
        }

        // Idempotent: what was set aside is not reported again, the good pods load again.
        const again = new PodStateStore(runDir).load();
        expect(again.problems).toEqual([]);
        expect([...again.pods].sort(byUid)).toEqual([...expectedPods].sort(byUid));
      }),
      fuzzParams(150),
    );
  });

  describe('explicit hostile entries', () => {
    const good: EnrolledPod = {
      uid: '0b6c9f3e-1111-4a5b-9c1d-2e3f4a5b6c7d',
      name: 'web',
      namespace: 'shop',
      serviceAccount: 'default',
      netnsPath: '/var/run/netns/web',
      netnsIno: 4026532000,
      netnsDev: 4,
      ips: ['10.1.0.5'],
      containerId: 'c0ffee',
    };

    function storeWith(setUp: (podsDir: string) => void): { store: PodStateStore; podsDir: string } {
      const store = new PodStateStore(dir);
      store.put(good);
      setUp(store.dir);
      return { store: new PodStateStore(dir), podsDir: store.dir };
    }

    it.each([
      [
        'a FIFO (would block a plain read forever)',
        (d: string) => expect(spawnSync('mkfifo', [join(d, 'fifo.json')]).status).toBe(0),
        'fifo.json',
        /not a regular file/,
      ],
      [
        'a symlink to /dev/zero (would be read without end)',
        (d: string) => symlinkSync('/dev/zero', join(d, 'zero.json')),
        'zero.json',
        /./,
      ],
      [
        'a symlink to a good file elsewhere',
        (d: string) => {
          writeFileSync(join(dir, 'elsewhere.json'), JSON.stringify(good));
          symlinkSync(join(dir, 'elsewhere.json'), join(d, 'link.json'));
        },
        'link.json',
        /./,
      ],
      ['a directory named like a state file', (d: string) => mkdirSync(join(d, 'dir.json')), 'dir.json', /not a regular file/],
      [
        'a 10 MB file',
        (d: string) => writeFileSync(join(d, 'big.json'), Buffer.alloc(10 << 20, 0x20)),
        'big.json',
        /larger than 65536 bytes/,
      ],
      [
        'a netns path escaping with ..',
        (d: string) =>
          writeFileSync(
            join(d, stateFileName('x')),
            JSON.stringify({ ...good, uid: 'x', netnsPath: '/var/run/netns/../../../proc/1/ns/net' }),
          ),
        stateFileName('x'),
        /netnsPath/,
      ],
      [
        'a hostile name in the pod',
        (d: string) => writeFileSync(join(d, stateFileName('y')), JSON.stringify({ ...good, uid: 'y', name: 'web; flush ruleset' })),
        stateFileName('y'),
        /name/,
      ],
      [
        'an IP with a zone',
        (d: string) => writeFileSync(join(d, stateFileName('z')), JSON.stringify({ ...good, uid: 'z', ips: ['fe80::1%eth0'] })),
        stateFileName('z'),
        /ips/,
      ],
    ])('%s is set aside and reported; the good pod still loads', (_label, setUp, file, reason) => {
      const { store, podsDir } = storeWith(setUp);
      const started = Date.now();
      const { pods, problems } = store.load();
      expect(Date.now() - started).toBeLessThan(2_000);
      expect(pods).toEqual([good]);
      expect(problems).toEqual([{ file: join(podsDir, file), reason: expect.stringMatching(reason) }]);
      expect(lstatSync(`${join(podsDir, file)}.corrupt`)).toBeTruthy();
      expect(new PodStateStore(dir).load()).toEqual({ pods: [good], problems: [] });
    });

    it('a regular file where the pods directory belongs is set aside, and put() works again', () => {
      writeFileSync(join(dir, STATE_DIR), 'not a directory');
      const store = new PodStateStore(dir);
      expect(store.load()).toEqual({ pods: [], problems: [{ file: join(dir, STATE_DIR), reason: 'not a directory' }] });
      expect(existsSync(join(dir, `${STATE_DIR}.corrupt`))).toBe(true);
      store.put(good);
      expect(new PodStateStore(dir).load()).toEqual({ pods: [good], problems: [] });
    });
  });
});
