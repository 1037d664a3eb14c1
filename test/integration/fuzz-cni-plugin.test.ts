// Hostile input for the real istio-cni plugin binary: arbitrary and mutated stdin (random bytes,
// truncated JSON, wrong types, deep nesting, huge strings, invalid UTF-8), arbitrary CNI_*
// variables and CNI_ARGS, and arbitrary replies from the agent. Whatever comes in, the plugin
// must exit 0 or 1 (never on a signal), print at most one JSON document on stdout (the CNI spec
// error object when it fails), keep stderr to JSON lines, and forward to the agent only bodies the
// agent's own parser accepts.
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseAddEvent, parseDelEvent, parseGcEvent } from '../../src/agent/plugin-event-server.js';
import { PLUGIN_EVENT_SOCKET } from '../../src/cni/protocol.js';
import { fuzzParams, fuzzTest, runPluginBytes, utf8Text, type RawPluginRun } from '../helpers/fuzz.js';
import { FakePluginAgent } from '../helpers/plugin-agent.js';
import { cniArgs, netconf, requirePluginBinary } from '../helpers/plugin-exec.js';

const SUPPORTED_VERSIONS = ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'];
const COMMANDS = ['ADD', 'DEL', 'CHECK', 'VERSION', 'STATUS', 'GC'];
const SPEC_ERROR_KEYS = new Set(['cniVersion', 'code', 'msg', 'details']);
const POD = { name: 'web-7d9c', namespace: 'shop', uid: '0b6c9f3e-1111-4a5b-9c1d-2e3f4a5b6c7d', infraContainerId: 'infra-abc' };
const GOOD_ENV = {
  CNI_COMMAND: 'ADD',
  CNI_CONTAINERID: 'c0ffee0123456789',
  CNI_NETNS: '/var/run/netns/cni-1234-5678',
  CNI_IFNAME: 'eth0',
  CNI_PATH: '/opt/cni/bin',
  CNI_ARGS: cniArgs(POD),
};
const PREV_RESULT = {
  cniVersion: '1.0.0',
  interfaces: [{ name: 'eth0', mac: '0a:58:0a:f4:01:05', sandbox: GOOD_ENV.CNI_NETNS }],
  ips: [{ interface: 0, address: '10.244.1.5/24', gateway: '10.244.1.1' }, { address: 'fd00:10:244::5/64' }],
  routes: [{ dst: '0.0.0.0/0', gw: '10.244.1.1' }],
  dns: {},
};

/** What the CNI spec allows on stdout, checked on every run; returns stdout's document, if any. */
function expectCniOutcome(run: RawPluginRun): Record<string, unknown> | undefined {
  const stderr = run.stderr.toString('utf8');
  expect(run.signal, `killed by a signal; stderr: ${stderr.slice(0, 2000)}`).toBeNull();
  expect([0, 1], `exit status; stderr: ${stderr.slice(0, 2000)}`).toContain(run.status);
  // The logger writes one JSON object per line, whatever bytes the values held.
  for (const line of utf8Text(run.stderr).split('\n')) {
    if (line === '') continue;
    const parsed = JSON.parse(line) as Record<string, unknown>;
    expect(typeof parsed['level']).toBe('string');
    expect(typeof parsed['msg']).toBe('string');
  }
  const out = utf8Text(run.stdout);
  if (run.status === 0 && out === '') return undefined; // DEL, CHECK, STATUS, GC
  expect(
    out.endsWith('\n') && out.indexOf('\n') === out.length - 1,
    `exactly one line on stdout: ${JSON.stringify(out.slice(0, 500))}`,
  ).toBe(true);
  const doc = JSON.parse(out) as unknown;
  expect(typeof doc === 'object' && doc !== null && !Array.isArray(doc)).toBe(true);
  const obj = doc as Record<string, unknown>;
  expect(SUPPORTED_VERSIONS).toContain(obj['cniVersion']);
  if (run.status === 1) {
    for (const key of Object.keys(obj)) expect(SPEC_ERROR_KEYS, `unexpected key ${key} in the error object`).toContain(key);
    expect(Number.isInteger(obj['code'])).toBe(true);
    expect(obj['code'] as number).toBeGreaterThan(0);
    expect(typeof obj['msg']).toBe('string');
    expect((obj['msg'] as string).length).toBeGreaterThan(0);
    if ('details' in obj) expect(typeof obj['details']).toBe('string');
  }
  return obj;
}

// ---- arbitraries ----------------------------------------------------------------------------

/** Strings a runtime would never send: separators, quotes, newlines, shell and rule syntax, long. */
const hostileText = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.string({ unit: 'binary-ascii', maxLength: 40 }),
  fc.constantFrom(
    '',
    ' ',
    'eth0; flush ruleset',
    'a"b',
    "a'b",
    'a\nb',
    'a\r\nb',
    '\t',
    '=',
    ';',
    'K8S_POD_NAME=x',
    '../../etc/passwd',
    '/var/run/netns/../../../etc',
    'relative/netns',
    '-rf',
    '$(reboot)',
    '`id`',
    '%s%s%s%n',
    '\u2028',
    '\u00a0',
    'é',
    'Web-7D9C',
    'a'.repeat(16),
    'x'.repeat(300),
  ),
  // long, but kept to 20 KB so a failure report stays readable (100 KB cases are explicit below)
  fc.integer({ min: 1_000, max: 20_000 }).map((n) => 'h'.repeat(n)),
);

/**
 * Environment values cannot hold NUL (execve strings are C strings), and one NAME=value string
 * must stay under the kernel's MAX_ARG_STRLEN (128 KiB) or the spawn itself fails.
 */
const MAX_ENV_VALUE = 120_000;
const envSafe = (s: string): string => s.replace(/\0/g, '').slice(0, MAX_ENV_VALUE);
const envText = hostileText.map(envSafe);

/** Mostly the good value (so the later code paths run), sometimes hostile, sometimes unset. */
function mostly<T>(good: T, bad: fc.Arbitrary<string>): fc.Arbitrary<T | string | undefined> {
  return fc.oneof(
    { arbitrary: fc.constant(good), weight: 4 },
    { arbitrary: bad, weight: 2 },
    { arbitrary: fc.constant(undefined), weight: 1 },
  );
}

const dnsLabel = fc.stringMatching(/^[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?$/);
const argKey = fc.oneof(
  {
    arbitrary: fc.constantFrom('K8S_POD_NAME', 'K8S_POD_NAMESPACE', 'K8S_POD_UID', 'K8S_POD_INFRA_CONTAINER_ID', 'IgnoreUnknown'),
    weight: 4,
  },
  { arbitrary: envText.map((s) => s.replace(/[;=]/g, '')), weight: 1 },
);
const argValue = fc.oneof({ arbitrary: dnsLabel, weight: 2 }, { arbitrary: fc.uuid(), weight: 1 }, { arbitrary: envText, weight: 2 });
const argPair = fc.oneof(
  { arbitrary: fc.tuple(argKey, argValue).map(([k, v]) => `${k}=${v}`), weight: 6 },
  { arbitrary: argKey, weight: 1 }, // no '='
  { arbitrary: fc.constantFrom('', '=', '==', '=x', 'K8S_POD_NAME==x', 'K8S_POD_NAME=a=b'), weight: 1 },
);
/** CNI_ARGS: the usual pairs shuffled with hostile ones, duplicates and broken pairs. */
const cniArgsArb: fc.Arbitrary<string> = fc
  .oneof(
    { arbitrary: fc.array(argPair, { maxLength: 8 }).map((pairs) => pairs.join(';')), weight: 4 },
    {
      arbitrary: fc
        .tuple(fc.array(argPair, { maxLength: 4 }), fc.shuffledSubarray(cniArgs(POD).split(';')))
        .map(([a, b]) => [...b, ...a].join(';')),
      weight: 4,
    },
    { arbitrary: envText, weight: 1 },
    { arbitrary: fc.integer({ min: 1, max: 4_000 }).map((n) => Array.from({ length: n }, (_, i) => `K${i}=v${i}`).join(';')), weight: 1 },
  )
  .map(envSafe);

const envArb = fc.record({
  CNI_COMMAND: fc.oneof(
    { arbitrary: fc.constantFrom(...COMMANDS), weight: 6 },
    { arbitrary: envText, weight: 1 },
    { arbitrary: fc.constant(undefined), weight: 1 },
  ),
  CNI_CONTAINERID: mostly(GOOD_ENV.CNI_CONTAINERID, envText),
  CNI_NETNS: mostly(GOOD_ENV.CNI_NETNS, envText),
  CNI_IFNAME: mostly(GOOD_ENV.CNI_IFNAME, envText),
  CNI_PATH: mostly(GOOD_ENV.CNI_PATH, envText),
  CNI_ARGS: fc.oneof(
    { arbitrary: fc.constant(GOOD_ENV.CNI_ARGS), weight: 2 },
    { arbitrary: cniArgsArb, weight: 3 },
    { arbitrary: fc.constant(undefined), weight: 1 },
  ),
});

/** Integers JSON.stringify cannot write (beyond 2^53, beyond 2^64), spliced in as raw digits. */
const RAW = '__raw_number__';
const rawNumber = fc.constantFrom('9007199254740993', '18446744073709551615', '18446744073709551616', '-0', '1e400', '2147483648', '-1');
const spliceRaw = (json: string): string => json.replace(new RegExp(`"${RAW}([^"]*)"`, 'g'), '$1');

const hostileJson: fc.Arbitrary<unknown> = fc.oneof(
  { arbitrary: fc.jsonValue({ maxDepth: 3 }), weight: 3 },
  { arbitrary: hostileText, weight: 2 },
  { arbitrary: rawNumber.map((n) => `${RAW}${n}`), weight: 1 },
);

const ipEntry = fc.record(
  {
    address: fc.oneof(
      fc.tuple(fc.ipV4(), fc.integer({ min: -1, max: 40 })).map(([ip, p]) => `${ip}/${p}`),
      fc.tuple(fc.ipV6(), fc.integer({ min: 0, max: 130 })).map(([ip, p]) => `${ip}/${p}`),
      fc.constantFrom('10.0.0.1\u0000junk/24', '10.0.0.1/24\u0000', '10.0.0.1/+8', '10.0.0.1/ 8', '::ffff:1.2.3.4/120', '1.2.3.4/024'),
      hostileJson,
    ),
    gateway: fc.oneof(fc.ipV4(), fc.ipV6(), fc.constant(null), hostileJson),
    interface: fc.oneof(
      fc.nat(4),
      fc.constant(null),
      rawNumber.map((n) => `${RAW}${n}`),
      hostileJson,
    ),
  },
  { requiredKeys: [] },
);

const prevResultArb = fc.oneof(
  { arbitrary: fc.constant(PREV_RESULT), weight: 2 },
  { arbitrary: fc.array(ipEntry, { maxLength: 5 }).map((ips) => ({ ...PREV_RESULT, ips })), weight: 4 },
  {
    arbitrary: fc
      .integer({ min: 60, max: 80 })
      .map((n) => ({ ...PREV_RESULT, ips: Array.from({ length: n }, () => ({ address: '10.0.0.1/32' })) })),
    weight: 1,
  },
  { arbitrary: hostileJson, weight: 2 },
);

const CONFIG_KEYS = [
  'cniVersion',
  'name',
  'type',
  'cni_agent_run_dir',
  'ambient_enabled',
  'exclude_namespaces',
  'pod_namespace',
  'plugin_log_level',
  'enablement_selectors',
  'native_nftables',
  'enable_ambient_detection_retry',
  'dns',
  'ipam',
];

/** A config text: the installer's config with some fields replaced, and often a prevResult. */
function configText(runDir: string): fc.Arbitrary<string> {
  return fc
    .record({
      overrides: fc.dictionary(fc.constantFrom(...CONFIG_KEYS), hostileJson, { maxKeys: 3 }),
      version: fc.constantFrom(...SUPPORTED_VERSIONS, '0.2.0', '9.9.9'),
      prevResult: fc.option(prevResultArb, { nil: undefined }),
    })
    .map(({ overrides, version, prevResult }) => {
      // An empty or absent run dir makes the plugin use /var/run/istio-cni: never aim the fuzzer
      // at an agent that might really run on this machine.
      const runDirOverride = overrides['cni_agent_run_dir'];
      if (runDirOverride === '' || runDirOverride === null) overrides['cni_agent_run_dir'] = `${runDir}/empty-override`;
      return spliceRaw(
        JSON.stringify(netconf(runDir, { cniVersion: version, ...(prevResult === undefined ? {} : { prevResult }), ...overrides })),
      );
    });
}

type Mutation =
  | { kind: 'truncate'; at: number }
  | { kind: 'insert'; at: number; bytes: Uint8Array }
  | { kind: 'delete'; at: number; length: number }
  | { kind: 'overwrite'; at: number; byte: number };

const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({ kind: fc.constant('truncate' as const), at: fc.nat() }),
  fc.record({
    kind: fc.constant('insert' as const),
    at: fc.nat(),
    // invalid UTF-8 (lone continuation, overlong, surrogate, 0xff), NUL, quotes and brackets
    bytes: fc.oneof(
      fc.uint8Array({ minLength: 1, maxLength: 6 }),
      fc.constantFrom(
        ...[[0xff], [0xc0, 0xaf], [0xed, 0xa0, 0x80], [0x80], [0], [0x22], [0x5b], [0x7d], [0x5c]].map((b) => Uint8Array.from(b)),
      ),
    ),
  }),
  fc.record({ kind: fc.constant('delete' as const), at: fc.nat(), length: fc.integer({ min: 1, max: 16 }) }),
  fc.record({ kind: fc.constant('overwrite' as const), at: fc.nat(), byte: fc.nat(255) }),
);

/** `text` as UTF-8 with the first `marker` replaced by raw `bytes`. */
function withBytes(text: string, marker: string, bytes: number[]): Buffer {
  const at = text.indexOf(marker);
  return Buffer.concat([Buffer.from(text.slice(0, at)), Buffer.from(bytes), Buffer.from(text.slice(at + marker.length))]);
}

function mutate(text: string, mutations: readonly Mutation[]): Buffer {
  let bytes = Buffer.from(text, 'utf8');
  for (const m of mutations) {
    const at = bytes.length === 0 ? 0 : m.at % (bytes.length + 1);
    if (m.kind === 'truncate') bytes = bytes.subarray(0, at);
    else if (m.kind === 'insert') bytes = Buffer.concat([bytes.subarray(0, at), m.bytes, bytes.subarray(at)]);
    else if (m.kind === 'delete') bytes = Buffer.concat([bytes.subarray(0, at), bytes.subarray(at + m.length)]);
    else if (at < bytes.length) bytes = Buffer.concat([bytes.subarray(0, at), Buffer.of(m.byte), bytes.subarray(at + 1)]);
  }
  return bytes;
}

/** Deeply nested arrays/objects (balanced or not) in a field, or as the whole document. */
function deepNesting(runDir: string): fc.Arbitrary<Buffer> {
  return fc
    .record({
      depth: fc.oneof(fc.integer({ min: 100, max: 200 }), fc.integer({ min: 1_000, max: 200_000 })),
      open: fc.constantFrom('[', '{"a":'),
      where: fc.constantFrom('prevResult', 'enablement_selectors', 'ipam', 'top'),
      balanced: fc.boolean(),
    })
    .map(({ depth, open, where, balanced }) => {
      const close = open === '[' ? ']' : '}';
      const nested = open.repeat(depth) + (open === '[' ? '' : '1') + (balanced ? close.repeat(depth) : '');
      if (where === 'top') return Buffer.from(nested);
      const base = JSON.stringify(netconf(runDir, { [where]: '__NESTED__' }));
      return Buffer.from(base.replace('"__NESTED__"', where === 'prevResult' ? `{"ips":[],"x":${nested}}` : nested));
    });
}

function stdinArb(runDir: string): fc.Arbitrary<Buffer> {
  const config = configText(runDir);
  return fc.oneof(
    { arbitrary: config.map((t) => Buffer.from(t)), weight: 4 },
    { arbitrary: fc.tuple(config, fc.array(mutation, { minLength: 1, maxLength: 4 })).map(([t, ms]) => mutate(t, ms)), weight: 4 },
    { arbitrary: fc.uint8Array({ maxLength: 512 }).map((b) => Buffer.from(b)), weight: 1 },
    { arbitrary: fc.jsonValue({ maxDepth: 4 }).map((v) => Buffer.from(JSON.stringify(v) ?? '')), weight: 1 },
    { arbitrary: deepNesting(runDir), weight: 1 },
  );
}

// ---- the agent side -------------------------------------------------------------------------

/** Outcomes of one property's runs ('ok' or the error code), to check the fuzzer went deep. */
class Outcomes {
  readonly counts = new Map<string, number>();
  forwarded = 0;

  add(run: RawPluginRun, doc: Record<string, unknown> | undefined): void {
    const key = run.status === 0 ? 'ok' : String(doc?.['code']);
    this.counts.set(key, (this.counts.get(key) ?? 0) + 1);
  }

  get(key: string): number {
    return this.counts.get(key) ?? 0;
  }
}

/** Every body the plugin forwarded must pass the agent's own validation. */
function expectForwardedBodiesValid(agent: FakePluginAgent, outcomes?: Outcomes): void {
  if (outcomes) outcomes.forwarded += agent.requests.length;
  for (const req of agent.requests.splice(0)) {
    expect(req.method).toBe('POST');
    const parse = req.url === '/cmddel' ? parseDelEvent : req.url === '/cmdgc' ? parseGcEvent : parseAddEvent;
    expect(() => parse(req.body), `forwarded ${req.url} body ${req.rawBody.slice(0, 500)}`).not.toThrow();
  }
}

/** A stream server answering every connection with `response` (settable per run), then closing. */
class ScriptedAgent {
  response: Buffer = Buffer.alloc(0);
  connections = 0;
  readonly #server: Server;
  readonly #sockets = new Set<Socket>();

  constructor(readonly socketPath: string) {
    this.#server = createServer((socket) => {
      this.connections++;
      this.#sockets.add(socket);
      socket.on('close', () => this.#sockets.delete(socket));
      socket.on('error', () => {});
      let seen = '';
      const response = this.response;
      socket.on('data', (d: Buffer) => {
        seen += d.toString('latin1');
        if (seen.includes('\r\n\r\n')) socket.end(response);
      });
    });
  }

  listen(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#server.once('error', reject);
      this.#server.listen(this.socketPath, () => resolve());
    });
  }

  async close(): Promise<void> {
    for (const s of this.#sockets) s.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

const httpReply = fc.oneof(
  { arbitrary: fc.uint8Array({ maxLength: 300 }).map((b) => Buffer.from(b)), weight: 2 },
  {
    arbitrary: fc
      .record({
        status: fc.oneof(
          fc.constantFrom('200', '500', '404', '100', '204', '999', '000', '20', '2000', '-1', 'abc'),
          fc.nat(999).map(String),
        ),
        headers: fc.array(
          fc.oneof(
            fc.constantFrom(
              'Content-Length: 5',
              'Content-Length: 0',
              'Content-Length: -1',
              'Content-Length: 99999999999999999999',
              'Content-Length: 1048577',
              'Transfer-Encoding: chunked',
              'Transfer-Encoding: gzip',
              'Connection: close',
              'X',
            ),
            fc.tuple(fc.string({ maxLength: 10 }), fc.string({ maxLength: 20 })).map(([k, v]) => `${k}: ${v}`),
          ),
          { maxLength: 4 },
        ),
        body: fc.oneof(
          fc.string({ unit: 'binary', maxLength: 50 }),
          fc.constantFrom(
            '5\r\nhello\r\n0\r\n\r\n',
            'ffffffffffffffff\r\n',
            'zz\r\n',
            '5\r\nhelloXX',
            '0\r\n',
            '1\r\nx\r\n0\r\nTrailer: y\r\n\r\n',
          ),
        ),
        separator: fc.constantFrom('\r\n', '\n'),
      })
      .map(({ status, headers, body, separator }) =>
        Buffer.from(`HTTP/1.1 ${status} X${separator}${headers.map((h) => `${h}${separator}`).join('')}${separator}${body}`),
      ),
    weight: 5,
  },
);

describe('fuzz: the istio-cni plugin binary', () => {
  let dir: string;
  let runDir: string;
  let agent: FakePluginAgent;

  beforeAll(async () => {
    requirePluginBinary();
    dir = mkdtempSync(join(tmpdir(), 'fuzz-plugin-'));
    runDir = join(dir, 'run');
    mkdirSync(runDir);
    agent = await FakePluginAgent.start(runDir);
  });

  afterAll(async () => {
    await agent?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('stdin: arbitrary and mutated network configs never crash it, failures are spec error objects', fuzzTest(), async () => {
    const outcomes = new Outcomes();
    await fc.assert(
      fc.asyncProperty(fc.constantFrom('ADD', 'DEL', 'CHECK', 'STATUS', 'GC'), stdinArb(runDir), async (command, stdin) => {
        const run = await runPluginBytes({ ...GOOD_ENV, CNI_COMMAND: command }, stdin);
        outcomes.add(run, expectCniOutcome(run));
        expectForwardedBodiesValid(agent, outcomes);
      }),
      fuzzParams(400),
    );
    // The inputs reached past the decoder: some were forwarded, some refused as bad JSON or config.
    expect(outcomes.get('ok')).toBeGreaterThan(0);
    expect(outcomes.forwarded).toBeGreaterThan(0);
    expect(outcomes.get('6')).toBeGreaterThan(0);
    expect(outcomes.get('7')).toBeGreaterThan(0);
  });

  it('env and CNI_ARGS: arbitrary values never crash it, failures are spec error objects', fuzzTest(), async () => {
    const stdin = fc.constantFrom(
      Buffer.from(JSON.stringify(netconf(runDir))),
      Buffer.from(JSON.stringify(netconf(runDir, { prevResult: PREV_RESULT }))),
      Buffer.from(JSON.stringify(netconf(runDir, { exclude_namespaces: null, pod_namespace: 'shop' }))),
    );
    const outcomes = new Outcomes();
    await fc.assert(
      fc.asyncProperty(envArb, stdin, async (env, input) => {
        const run = await runPluginBytes(env, input);
        const doc = expectCniOutcome(run);
        outcomes.add(run, doc);
        expectForwardedBodiesValid(agent, outcomes);
        if (env.CNI_COMMAND === 'VERSION') expect(doc?.['supportedVersions']).toEqual(SUPPORTED_VERSIONS);
        // With every variable well-formed and a good config, every command succeeds against this
        // agent (validation must not reject what a runtime really sends).
        const wellFormed = (['CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME', 'CNI_ARGS'] as const).every((k) => env[k] === GOOD_ENV[k]);
        if (wellFormed && COMMANDS.includes(env.CNI_COMMAND ?? '')) expect(run.status, utf8Text(run.stdout)).toBe(0);
      }),
      fuzzParams(400),
    );
    expect(outcomes.get('ok')).toBeGreaterThan(0);
    expect(outcomes.forwarded).toBeGreaterThan(0);
    expect(outcomes.get('4')).toBeGreaterThan(0);
  });

  it('env and stdin together', fuzzTest(), async () => {
    await fc.assert(
      fc.asyncProperty(envArb, stdinArb(runDir), async (env, stdin) => {
        expectCniOutcome(await runPluginBytes(env, stdin));
        expectForwardedBodiesValid(agent);
      }),
      fuzzParams(150),
    );
  });

  it('agent replies: arbitrary bytes and broken HTTP never crash it', fuzzTest(), async () => {
    const replyDir = join(dir, 'reply');
    mkdirSync(replyDir);
    const scripted = new ScriptedAgent(join(replyDir, PLUGIN_EVENT_SOCKET));
    await scripted.listen();
    try {
      const conf = Buffer.from(JSON.stringify(netconf(replyDir, { prevResult: PREV_RESULT })));
      await fc.assert(
        fc.asyncProperty(fc.constantFrom('ADD', 'DEL', 'CHECK'), httpReply, async (command, response) => {
          scripted.response = response;
          const before = scripted.connections;
          const run = await runPluginBytes({ ...GOOD_ENV, CNI_COMMAND: command }, conf);
          const doc = expectCniOutcome(run);
          expect(scripted.connections).toBe(before + 1);
          // Unreadable replies count as an absent agent: ADD fails open here (no snapshot says
          // the namespace is ambient); a readable non-200 fails ADD with 999.
          if (run.status === 1) expect(doc?.['code']).toBe(999);
        }),
        fuzzParams(200),
      );
    } finally {
      await scripted.close();
    }
  });

  describe('explicit hostile cases', () => {
    const cases: Array<[string, Record<string, string | undefined>, () => Buffer, number | undefined]> = [
      [
        'nesting 200000 deep in prevResult (was a stack overflow)',
        GOOD_ENV,
        () =>
          Buffer.from(JSON.stringify(netconf(runDir)).replace(/}$/, `,"prevResult":{"x":${'['.repeat(200_000)}${']'.repeat(200_000)}}}`)),
        6,
      ],
      [
        'nesting 200000 deep in enablement_selectors (was a stack overflow)',
        { ...GOOD_ENV, CNI_COMMAND: 'DEL' },
        () =>
          Buffer.from(
            JSON.stringify(netconf(runDir)).replace(/}$/, `,"enablement_selectors":${'['.repeat(200_000)}${']'.repeat(200_000)}}`),
          ),
        6,
      ],
      ['17 MiB of stdin', GOOD_ENV, () => Buffer.alloc(17 << 20, 0x20), 6],
      ['a 1 MB network name', GOOD_ENV, () => Buffer.from(JSON.stringify(netconf(runDir, { name: 'n'.repeat(1 << 20) }))), 7],
      [
        'invalid UTF-8 in a string',
        GOOD_ENV,
        () => withBytes(JSON.stringify(netconf(runDir, { pod_namespace: 'MARK' })), 'MARK', [0x61, 0xff, 0xc0, 0xaf]),
        6,
      ],
      [
        'a UTF-16 surrogate encoded in UTF-8',
        GOOD_ENV,
        () => withBytes(JSON.stringify(netconf(runDir, { name: 'MARK' })), 'MARK', [0xed, 0xa0, 0x80]),
        6,
      ],
      [
        'NUL inside an address',
        GOOD_ENV,
        () => Buffer.from(JSON.stringify(netconf(runDir, { prevResult: { ...PREV_RESULT, ips: [{ address: '10.0.0.1\u0000junk/24' }] } }))),
        7,
      ],
      [
        'an interface index past 2^53',
        GOOD_ENV,
        () =>
          Buffer.from(
            JSON.stringify(netconf(runDir, { prevResult: { ...PREV_RESULT, ips: [{ address: '10.0.0.1/24', interface: 1 }] } })).replace(
              '"interface":1',
              '"interface":9007199254740993',
            ),
          ),
        7,
      ],
      ['a relative run dir', GOOD_ENV, () => Buffer.from(JSON.stringify(netconf('relative/run'))), 7],
      ['a run dir with NUL', GOOD_ENV, () => Buffer.from(JSON.stringify(netconf(`${runDir}\u0000/x`))), 7],
      [
        'interface name "eth0; flush ruleset"',
        { ...GOOD_ENV, CNI_IFNAME: 'eth0; flush ruleset' },
        () => Buffer.from(JSON.stringify(netconf(runDir))),
        4,
      ],
      ['a container ID with a quote', { ...GOOD_ENV, CNI_CONTAINERID: 'abc"def' }, () => Buffer.from(JSON.stringify(netconf(runDir))), 4],
      ['a relative netns', { ...GOOD_ENV, CNI_NETNS: 'var/run/netns/x' }, () => Buffer.from(JSON.stringify(netconf(runDir))), 4],
      [
        'a netns escaping with ..',
        { ...GOOD_ENV, CNI_NETNS: '/var/run/netns/../../../etc/passwd' },
        () => Buffer.from(JSON.stringify(netconf(runDir))),
        4,
      ],
      [
        'a pod name with a newline',
        { ...GOOD_ENV, CNI_ARGS: cniArgs({ ...POD, name: 'web\nx' }) },
        () => Buffer.from(JSON.stringify(netconf(runDir))),
        4,
      ],
      [
        'a 100 KB pod name',
        { ...GOOD_ENV, CNI_ARGS: cniArgs({ ...POD, name: 'a'.repeat(100_000) }) },
        () => Buffer.from(JSON.stringify(netconf(runDir))),
        4,
      ],
      [
        'an upper-case namespace',
        { ...GOOD_ENV, CNI_ARGS: cniArgs({ ...POD, namespace: 'Shop' }) },
        () => Buffer.from(JSON.stringify(netconf(runDir))),
        4,
      ],
      [
        'a pod UID with a slash',
        { ...GOOD_ENV, CNI_ARGS: cniArgs({ ...POD, uid: '../x' }) },
        () => Buffer.from(JSON.stringify(netconf(runDir))),
        4,
      ],
      [
        'duplicate keys: the last one counts',
        { ...GOOD_ENV, CNI_ARGS: `${cniArgs(POD)};K8S_POD_NAME=Bad_Name` },
        () => Buffer.from(JSON.stringify(netconf(runDir))),
        4,
      ],
      [
        'duplicate keys ending valid',
        { ...GOOD_ENV, CNI_ARGS: `K8S_POD_NAME=Bad_Name;${cniArgs(POD)}` },
        () => Buffer.from(JSON.stringify(netconf(runDir))),
        undefined,
      ],
    ];
    it.each(cases)('%s', async (_label, env, stdin, code) => {
      const run = await runPluginBytes(env, stdin());
      const doc = expectCniOutcome(run);
      if (code === undefined) {
        expect(run.status).toBe(0);
      } else {
        expect(run.status).toBe(1);
        expect(doc?.['code']).toBe(code);
      }
      expectForwardedBodiesValid(agent);
    });

    it('invalid UTF-8 in CNI_ARGS and CNI_IFNAME (set through python3: Node only passes text)', async () => {
      // Node can only pass UTF-8 environment strings; python3 sets the raw bytes and execs the
      // plugin (argv only: the bytes are in the fixed program text, nothing is interpolated).
      const program = [
        'import os, sys',
        'env = dict(os.environb)',
        "env[b'CNI_ARGS'] = b'K8S_POD_NAMESPACE=shop;K8S_POD_NAME=w\\xff\\xc0'",
        "env[b'CNI_IFNAME'] = b'e\\xed\\xa0\\x80'",
        'os.execve(sys.argv[1], [sys.argv[1]], env)',
      ].join('\n');
      const env = { CNI_COMMAND: 'ADD', CNI_CONTAINERID: 'c1', CNI_NETNS: '/var/run/netns/x' };
      const run = await runPluginBytes(env, Buffer.from(JSON.stringify(netconf(runDir))), ['python3', '-c', program]);
      const doc = expectCniOutcome(run);
      expect(run.status).toBe(1);
      expect(doc?.['code']).toBe(4);
      expectForwardedBodiesValid(agent);
    });
  });
});
