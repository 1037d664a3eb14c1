// The plugin log sink (<run dir>/log.sock, Istio's `POST /log`): the agent's PluginLogServer on
// its own, then end to end with the real istio-cni binary teeing its log lines to it.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer, request, type IncomingHttpHeaders, type Server } from 'node:http';
import { createServer as createNetServer, type Server as NetServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { PluginLogServer } from '../../src/agent/plugin-log-server.js';
import { PLUGIN_LOG_SOCKET } from '../../src/cni/protocol.js';
import type { Logger } from '../../src/ops/log.js';
import { FakePluginAgent, reply } from '../helpers/plugin-agent.js';
import { cniArgs, netconf as istioNetconf, requirePluginBinary, runPlugin, stdoutJson, type PluginRun } from '../helpers/plugin-exec.js';

type LogRecord = Record<string, unknown>;

/** A pino logger shaped like the agent's (src/ops/log.ts), writing into an array. */
function capturedLogger(): { log: Logger; records: LogRecord[] } {
  const records: LogRecord[] = [];
  const destination = { write: (line: string) => void records.push(JSON.parse(line) as LogRecord) };
  const log = pino({ name: 'ambient-node-agent', level: 'debug', base: undefined, timestamp: pino.stdTimeFunctions.isoTime }, destination);
  return { log, records };
}

const pluginRecords = (records: LogRecord[]): LogRecord[] => records.filter((r) => r['scope'] === 'cni-plugin');

function httpUnix(
  socketPath: string,
  method: string,
  path: string,
  body?: string,
): Promise<{ status: number; body: string; headers: IncomingHttpHeaders }> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string | number> = { 'Content-Type': 'application/json' };
    if (body !== undefined) headers['Content-Length'] = Buffer.byteLength(body);
    const req = request({ socketPath, path, method, headers, timeout: 10_000 }, (res) => {
      let text = '';
      res.setEncoding('utf8').on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text, headers: res.headers }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

const postLog = (socketPath: string, body: unknown) =>
  httpUnix(socketPath, 'POST', '/log', typeof body === 'string' ? body : JSON.stringify(body));

// Lines as Istio's plugin (zap's JSON encoder) writes them: key order, microsecond UTC time,
// lowercase level, and the encoder's trailing newline.
const line = (fields: Record<string, unknown>): string => `${JSON.stringify({ time: '2026-01-02T03:04:05.123456Z', ...fields })}\n`;

describe('PluginLogServer', () => {
  let dir: string;
  let socketPath: string;
  let server: PluginLogServer | undefined;
  let records: LogRecord[];

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'plugin-log-'));
    socketPath = join(dir, 'run', PLUGIN_LOG_SOCKET);
    const captured = capturedLogger();
    records = captured.records;
    server = new PluginLogServer(socketPath, captured.log);
    await server.start();
  });

  afterEach(async () => {
    await server?.close();
    server = undefined;
    rmSync(dir, { recursive: true, force: true });
  });

  it('re-emits each line under scope cni-plugin at its level, keeping its fields', async () => {
    const res = await postLog(socketPath, [
      line({ level: 'info', scope: 'cni-plugin', msg: 'pod added', pod: 'shop/web-1', container: 'c1' }),
      line({ level: 'warn', scope: 'cni-plugin', msg: 'agent unreachable  ', pod: 'shop/web-2', command: 'ADD' }),
      line({
        level: 'error',
        scope: 'cni-plugin',
        msg: 'failed',
        pod: 'shop/web-3',
        caller: 'plugin/plugin.go:123',
        attempt: 2,
        extra: { a: [1] },
      }),
      line({ level: 'debug', scope: 'cni-plugin', msg: 'details' }),
    ]);
    expect(res.status).toBe(200);

    const out = pluginRecords(records);
    expect(out.map((r) => [r['level'], r['msg']])).toEqual([
      [30, 'pod added'],
      [40, 'agent unreachable'], // trimmed, as Istio's agent does
      [50, 'failed'],
      [20, 'details'],
    ]);
    expect(out[0]).toMatchObject({
      name: 'ambient-node-agent',
      scope: 'cni-plugin',
      pod: 'shop/web-1',
      container: 'c1',
      pluginTime: '2026-01-02T03:04:05.123456Z',
    });
    expect(out[1]).toMatchObject({ pod: 'shop/web-2', command: 'ADD' });
    expect(out[2]).toMatchObject({ caller: 'plugin/plugin.go:123', attempt: 2, extra: { a: [1] } });
    for (const r of out) {
      // The agent's own time, not the plugin's.
      expect(r['time']).not.toBe('2026-01-02T03:04:05.123456Z');
      expect(Date.parse(r['time'] as string)).toBeGreaterThan(Date.now() - 60_000);
      expect(r).not.toHaveProperty('pluginScope');
      expect(r).not.toHaveProperty('pluginLevel');
    }
    expect(server?.stats).toEqual({ batches: 1, lines: 4, skipped: 0, rejected: 0 });
  });

  it('does not let line fields override the record’s scope, level, time or name', async () => {
    // Parse the raw text too: JSON.parse keeps the last of duplicate keys, which would hide a clash.
    const raw: string[] = [];
    const destination = { write: (s: string) => void raw.push(s) };
    const log = pino(
      { name: 'ambient-node-agent', level: 'debug', base: undefined, timestamp: pino.stdTimeFunctions.isoTime },
      destination,
    );
    await server?.close();
    server = new PluginLogServer(socketPath, log);
    await server.start();

    const res = await postLog(socketPath, [
      line({ level: 'info', scope: 'somewhere-else', msg: 'hi', name: 'istio-cni', pid: 7, hostname: 'node-1', pluginTime: 'x' }),
    ]);
    expect(res.status).toBe(200);
    const text = raw.find((s) => s.includes('"msg":"hi"')) ?? '';
    for (const key of ['level', 'time', 'scope', 'name', 'msg']) expect(text.split(`"${key}":`)).toHaveLength(2);
    const rec = JSON.parse(text) as LogRecord;
    expect(rec).toMatchObject({
      level: 30,
      scope: 'cni-plugin',
      name: 'ambient-node-agent',
      pluginScope: 'somewhere-else',
      pluginName: 'istio-cni',
      pluginPid: 7,
      pluginHostname: 'node-1',
      pluginTime: '2026-01-02T03:04:05.123456Z', // the line's "time" came first
    });
  });

  it('maps zap, Istio and pino level names and numbers', async () => {
    const res = await postLog(socketPath, [
      line({ level: 'warning', msg: 'a' }),
      line({ level: 'WARN', msg: 'b' }),
      line({ level: 'fatal', msg: 'c' }),
      line({ level: 'panic', msg: 'd' }),
      line({ level: 40, msg: 'e' }),
      line({ level: 10, msg: 'f' }),
      line({ level: 60, msg: 'g' }),
      line({ level: 'verbose', msg: 'h' }),
      line({ msg: 'i' }),
    ]);
    expect(res.status).toBe(200);
    const byMsg = Object.fromEntries(pluginRecords(records).map((r) => [r['msg'], r]));
    expect(byMsg['a']).toMatchObject({ level: 40 });
    expect(byMsg['a']).not.toHaveProperty('pluginLevel');
    expect(byMsg['b']).toMatchObject({ level: 40 });
    // A dying plugin is an error in the agent's log, not an agent fatal; the original is kept.
    expect(byMsg['c']).toMatchObject({ level: 50, pluginLevel: 'fatal' });
    expect(byMsg['d']).toMatchObject({ level: 50, pluginLevel: 'panic' });
    expect(byMsg['e']).toMatchObject({ level: 40 });
    expect(byMsg['e']).not.toHaveProperty('pluginLevel');
    expect(byMsg['f']).toBeUndefined(); // trace: below the logger's debug level
    expect(byMsg['g']).toMatchObject({ level: 50, pluginLevel: 60 });
    expect(byMsg['h']).toMatchObject({ level: 30, pluginLevel: 'verbose' });
    expect(byMsg['i']).toMatchObject({ level: 30 });
    expect(server?.stats.lines).toBe(9);
  });

  it('skips elements that are not strings holding a JSON object, and logs the rest', async () => {
    const res = await postLog(socketPath, [
      line({ level: 'info', msg: 'first' }),
      42,
      null,
      { level: 'info', msg: 'an object, not a string' },
      'not json',
      '[1,2]',
      '"a string"',
      '{"__proto__":{"polluted":true},"level":"info","msg":"proto"}',
      line({ level: 'warn', msg: 'last' }),
    ]);
    expect(res.status).toBe(200);
    expect(pluginRecords(records).map((r) => r['msg'])).toEqual(['first', 'proto', 'last']);
    expect(({} as Record<string, unknown>)['polluted']).toBeUndefined();
    expect(server?.stats).toMatchObject({ batches: 1, lines: 3, skipped: 6 });
    // The server is still fine afterwards.
    expect((await postLog(socketPath, [line({ level: 'info', msg: 'again' })])).status).toBe(200);
  });

  it('accepts an empty batch', async () => {
    expect((await postLog(socketPath, [])).status).toBe(200);
    expect(pluginRecords(records)).toHaveLength(0);
  });

  it.each([
    ['not JSON', '[{"level"'],
    ['an object', JSON.stringify({ level: 'info', msg: 'x' })],
    ['a string', JSON.stringify(line({ level: 'info', msg: 'x' }))],
    ['empty', ''],
    ['null', 'null'],
  ])('answers 400 to a body that is %s, and logs no plugin line', async (_label, body) => {
    const res = await postLog(socketPath, body);
    expect(res.status).toBe(400);
    expect(pluginRecords(records)).toHaveLength(0);
    expect(server?.stats).toMatchObject({ batches: 0, lines: 0, rejected: 1 });
    expect(records.filter((r) => r['component'] === 'plugin-log' && r['level'] === 40)).toHaveLength(1);
  });

  it('answers 404 to another path and 405 to another method', async () => {
    expect((await httpUnix(socketPath, 'POST', '/cmdadd', '[]')).status).toBe(404);
    const get = await httpUnix(socketPath, 'GET', '/log');
    expect(get.status).toBe(405);
    expect(get.headers['allow']).toBe('POST');
    expect((await httpUnix(socketPath, 'POST', '/log?x=1', JSON.stringify([line({ msg: 'q' })]))).status).toBe(200);
    expect(pluginRecords(records).map((r) => r['msg'])).toEqual(['q']);
  });

  it('refuses a body over 1 MiB with 413', async () => {
    const big = JSON.stringify([line({ level: 'info', msg: 'x'.repeat(1024 * 1024) })]);
    const res = await postLog(socketPath, big).catch((err: Error) => ({ status: -1, body: err.message }));
    // The reply may race the unread body; either way nothing is logged.
    if (res.status !== -1) expect(res.status).toBe(413);
    // Without Content-Length (chunked), the limit applies while reading.
    const streamed = await new Promise<number>((resolve) => {
      const req = request({ socketPath, path: '/log', method: 'POST', headers: { 'Content-Type': 'application/json' } }, (r) => {
        r.resume();
        resolve(r.statusCode ?? 0);
      });
      req.on('error', () => resolve(-1));
      const piece = 'x'.repeat(256 * 1024);
      req.write(`["${piece}`);
      for (let i = 0; i < 4; i++) req.write(piece);
      req.end('"]');
    });
    if (streamed !== -1) expect(streamed).toBe(413);
    expect(server?.stats.rejected).toBe(2);
    expect(pluginRecords(records)).toHaveLength(0);
    expect((await postLog(socketPath, [line({ msg: 'after' })])).status).toBe(200);
  });

  it('creates a 0600 socket in a 0750 directory', () => {
    expect(statSync(socketPath).mode & 0o777).toBe(0o600);
    expect(statSync(join(dir, 'run')).mode & 0o777).toBe(0o750);
  });

  it('replaces a stale socket and refuses to remove a file that is not one', async () => {
    // A socket file left by an agent that was killed.
    await server?.close();
    const stale = createNetServer();
    await new Promise<void>((resolve) => stale.listen(socketPath, resolve));
    const captured = capturedLogger();
    server = new PluginLogServer(socketPath, captured.log);
    await server.start();
    expect((await postLog(socketPath, [line({ msg: 'new' })])).status).toBe(200);
    expect(pluginRecords(captured.records)).toHaveLength(1);
    await new Promise<void>((resolve) => stale.close(() => resolve()));

    const file = join(dir, 'not-a-socket');
    writeFileSync(file, 'keep me');
    await expect(new PluginLogServer(file, captured.log).start()).rejects.toThrow(/not a socket/);
    expect(existsSync(file)).toBe(true);
  });
});

// ---------------------------------------------------------------------------------------------

const POD = { name: 'web-7d9c', namespace: 'shop', uid: '0b6c9f3e-1111-4a5b-9c1d-2e3f4a5b6c7d', infraContainerId: 'infra-abc' };
const CONTAINER_ID = 'c0ffee0123456789';

function cniEnv(command = 'ADD'): Record<string, string> {
  return {
    CNI_COMMAND: command,
    CNI_CONTAINERID: CONTAINER_ID,
    CNI_NETNS: '/var/run/netns/cni-1234',
    CNI_IFNAME: 'eth0',
    CNI_PATH: '/opt/cni/bin',
    CNI_ARGS: cniArgs(POD),
  };
}

/** The plugin does not evaluate selectors; these tests run with none. */
function netconf(runDir: string, overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return istioNetconf(runDir, { enablement_selectors: [], ...overrides });
}

/** Records what arrives on log.sock, raw, and answers 200 (or never, for the timeout case). */
class LogRecorder {
  readonly requests: { method: string; url: string; headers: IncomingHttpHeaders; body: string }[] = [];
  readonly #server: Server;

  private constructor(answer: boolean) {
    this.#server = createServer((req, res) => {
      let body = '';
      req.setEncoding('utf8').on('data', (c: string) => (body += c));
      req.on('end', () => {
        this.requests.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });
        if (answer) res.writeHead(200).end();
      });
    });
  }

  static async start(socketPath: string, answer = true): Promise<LogRecorder> {
    const r = new LogRecorder(answer);
    await new Promise<void>((resolve, reject) => {
      r.#server.once('error', reject);
      r.#server.listen(socketPath, resolve);
    });
    return r;
  }

  async close(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

describe('istio-cni plugin → agent log', () => {
  let runDir: string;
  let agent: FakePluginAgent | undefined;
  let sink: PluginLogServer | undefined;
  let recorder: LogRecorder | undefined;
  let silent: NetServer | undefined;
  const silentSockets = new Set<Socket>();
  let records: LogRecord[];

  beforeAll(() => {
    requirePluginBinary();
  });

  beforeEach(() => {
    runDir = mkdtempSync(join(tmpdir(), 'plugin-log-e2e-'));
    records = [];
  });

  afterEach(async () => {
    await agent?.close();
    await sink?.close();
    await recorder?.close();
    for (const s of silentSockets) s.destroy();
    if (silent) await new Promise<void>((resolve) => silent?.close(() => resolve()));
    agent = sink = recorder = silent = undefined;
    rmSync(runDir, { recursive: true, force: true });
  });

  const logSocket = (): string => join(runDir, PLUGIN_LOG_SOCKET);

  async function startSink(): Promise<PluginLogServer> {
    const captured = capturedLogger();
    records = captured.records;
    sink = new PluginLogServer(logSocket(), captured.log);
    await sink.start();
    return sink;
  }

  function expectError(run: PluginRun): Record<string, unknown> {
    expect(run.status, run.stderr).toBe(1);
    return stdoutJson(run);
  }

  it('an agent answering 500: the plugin’s error line reaches the agent log under scope cni-plugin', async () => {
    agent = await FakePluginAgent.start(runDir, reply(500, 'boom'));
    await startSink();
    const run = await runPlugin(cniEnv(), netconf(runDir));
    expect(expectError(run)).toMatchObject({ code: 999 });
    expect(run.stderr).toMatch(/"level":"error".*status code 500/); // stderr unchanged

    const out = pluginRecords(records);
    expect(out).toHaveLength(1);
    const rec = out[0] ?? {};
    expect(rec).toMatchObject({ level: 50, scope: 'cni-plugin', command: 'ADD', pod: 'shop/web-7d9c', container: CONTAINER_ID });
    expect(rec['msg']).toBe('istio-cni cmdAdd failed to contact node Istio CNI agent: unable to push CNI event (status code 500): boom');
    expect(rec['pluginTime']).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
    // The very line the plugin wrote on stderr, fields and all.
    const stderrLine = JSON.parse(run.stderr.trim()) as LogRecord;
    expect(rec['pluginTime']).toBe(stderrLine['time']);
    expect(sink?.stats).toEqual({ batches: 1, lines: 1, skipped: 0, rejected: 0 });
  });

  it('the agent unreachable (no pluginevent.sock): the warning reaches the agent log', async () => {
    await startSink();
    const run = await runPlugin(cniEnv(), netconf(runDir));
    expect(run.status, run.stderr).toBe(0);
    const out = pluginRecords(records);
    expect(out).toHaveLength(1);
    expect(out[0]).toMatchObject({ level: 40, scope: 'cni-plugin', pod: 'shop/web-7d9c', container: CONTAINER_ID });
    expect(out[0]?.['msg']).toMatch(/unreachable.*snapshot unavailable/);
  });

  it('plugin_log_level error: the warning is not sent, an error is', async () => {
    await startSink();
    const quiet = await runPlugin(cniEnv(), netconf(runDir, { plugin_log_level: 'error' }));
    expect(quiet.status).toBe(0);
    expect(quiet.stderr).toBe('');
    expect(pluginRecords(records)).toHaveLength(0);
    expect(sink?.stats.batches).toBe(0); // nothing to send: no request at all

    agent = await FakePluginAgent.start(runDir, reply(500, 'boom'));
    expectError(await runPlugin(cniEnv(), netconf(runDir, { plugin_log_level: 'error' })));
    expect(pluginRecords(records).map((r) => r['level'])).toEqual([50]);
  });

  it('plugin_log_level debug: debug lines arrive as debug', async () => {
    agent = await FakePluginAgent.start(runDir, reply(200));
    await startSink();
    const run = await runPlugin(cniEnv(), netconf(runDir, { plugin_log_level: 'debug' }));
    expect(run.status, run.stderr).toBe(0);
    const out = pluginRecords(records);
    expect(out.length).toBeGreaterThanOrEqual(1);
    expect(out.length).toBe(run.stderr.trim().split('\n').length);
    for (const r of out) expect(r).toMatchObject({ level: 20, command: 'ADD', pod: 'shop/web-7d9c' });
  });

  it('a quiet successful ADD sends nothing', async () => {
    agent = await FakePluginAgent.start(runDir, reply(200));
    await startSink();
    const run = await runPlugin(cniEnv(), netconf(runDir));
    expect(run.status).toBe(0);
    expect(run.stderr).toBe('');
    expect(sink?.stats.batches).toBe(0);
  });

  it('sends Istio’s wire format: one POST /log, a JSON array of JSON-line strings', async () => {
    recorder = await LogRecorder.start(logSocket());
    const run = await runPlugin(cniEnv(), netconf(runDir, { plugin_log_level: 'debug' }));
    expect(run.status).toBe(0);
    expect(recorder.requests).toHaveLength(1);
    const [req] = recorder.requests;
    expect(req?.method).toBe('POST');
    expect(req?.url).toBe('/log');
    expect(req?.headers['content-type']).toBe('application/json');
    const batch = JSON.parse(req?.body ?? '') as unknown[];
    expect(Array.isArray(batch)).toBe(true);
    // Exactly the stderr lines, each with zap's trailing newline.
    expect(batch.join('')).toBe(run.stderr);
    for (const el of batch) {
      expect(typeof el).toBe('string');
      expect(el as string).toMatch(/\n$/);
      const parsed = JSON.parse(el as string) as LogRecord;
      expect(Object.keys(parsed).slice(0, 4)).toEqual(['time', 'level', 'scope', 'msg']);
      expect(parsed['scope']).toBe('cni-plugin');
    }
  });

  it('without log.sock the plugin behaves exactly as before, without delay', async () => {
    // A warning and debug lines to send, but nowhere to send them.
    const first = await runPlugin(cniEnv(), netconf(runDir, { plugin_log_level: 'debug' }));
    const runs = [first, await runPlugin(cniEnv(), netconf(runDir, { plugin_log_level: 'debug' }))];
    for (const run of runs) {
      expect(run.status).toBe(0);
      expect(stdoutJson(run)).toEqual({ cniVersion: '1.0.0', dns: {} });
      expect(run.stderr).toMatch(/"level":"warn".*unreachable/);
      expect(run.stderr).not.toMatch(/could not send the plugin log/);
      expect(run.elapsedMs).toBeLessThan(500);
    }

    // With the sink present the result is the same.
    await startSink();
    const withSink = await runPlugin(cniEnv(), netconf(runDir, { plugin_log_level: 'debug' }));
    expect(withSink.status).toBe(first.status);
    expect(withSink.stdout).toBe(first.stdout);
    expect(withSink.elapsedMs).toBeLessThan(500);
    expect(pluginRecords(records).length).toBeGreaterThanOrEqual(1);
  });

  it('a log.sock that is not a socket, or that nobody listens on, is ignored quickly', async () => {
    writeFileSync(logSocket(), '');
    let run = await runPlugin(cniEnv(), netconf(runDir, { plugin_log_level: 'debug' }));
    expect(run.status).toBe(0);
    expect(run.elapsedMs).toBeLessThan(500);
    expect(run.stderr).not.toMatch(/could not send the plugin log/); // not a socket: not even tried
    rmSync(logSocket());

    // A socket inode left behind by a dead agent: connection refused.
    const made = spawnSync('python3', ['-c', `import socket; s=socket.socket(socket.AF_UNIX); s.bind(${JSON.stringify(logSocket())})`]);
    if (made.status !== 0 || !statSync(logSocket()).isSocket()) return; // no python3: covered by the case above
    run = await runPlugin(cniEnv(), netconf(runDir, { plugin_log_level: 'debug' }));
    expect(run.status).toBe(0);
    expect(stdoutJson(run)).toEqual({ cniVersion: '1.0.0', dns: {} });
    expect(run.elapsedMs).toBeLessThan(500);
    expect(run.stderr).toMatch(/"level":"debug".*could not send the plugin log.*Connection refused/);
  });

  it('a log sink that never answers costs at most ~1 s and does not change the result', async () => {
    silent = createNetServer((s) => {
      silentSockets.add(s);
      s.on('error', () => {});
    });
    await new Promise<void>((resolve) => silent?.listen(logSocket(), resolve));
    const run = await runPlugin(cniEnv(), netconf(runDir));
    expect(run.status).toBe(0);
    expect(stdoutJson(run)).toEqual({ cniVersion: '1.0.0', dns: {} });
    expect(run.elapsedMs).toBeGreaterThanOrEqual(900);
    expect(run.elapsedMs).toBeLessThan(1_500);
    expect(run.stderr.trim().split('\n')).toHaveLength(1); // the warning; the sink failure only at debug

    const debug = await runPlugin(cniEnv(), netconf(runDir, { plugin_log_level: 'debug' }));
    expect(debug.status).toBe(0);
    expect(debug.stderr).toMatch(/"level":"debug".*could not send the plugin log.*no reply within 1000 ms/);
  });

  it('an error exit (bad CNI_ARGS after the config is read) still flushes what was logged', async () => {
    await startSink();
    // An unknown plugin_log_level is warned about once the config is read; the run then fails.
    const env = { ...cniEnv(), CNI_ARGS: 'K8S_POD_NAME' };
    const run = await runPlugin(env, netconf(runDir, { plugin_log_level: 'loud' }));
    expect(run.status).toBe(1);
    expect(stdoutJson(run)).toMatchObject({ code: 4 });
    expect(pluginRecords(records).map((r) => [r['level'], r['msg']])).toEqual([[40, 'unknown plugin_log_level "loud", using info']]);
  });
});
