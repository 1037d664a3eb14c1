// Shared pieces of the fuzz tests (test/**/fuzz-*.test.ts): run counts and seeds, and running the
// plugin binary with raw bytes on stdin.
//
// Every property runs with fast-check's random seed unless FUZZ_SEED is set; a failure prints
// the seed and the shrunk counter-example (re-run with FUZZ_SEED=<seed> to replay it).
// FUZZ_RUNS_FACTOR scales every run count (e.g. 10 for a long local session, 0.1 for a quick one).
import { spawn } from 'node:child_process';
import type { Parameters } from 'fast-check';
import { requirePluginBinary } from './plugin-exec.js';

function envNumber(name: string): number | undefined {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return undefined;
  const n = Number(raw);
  if (!Number.isFinite(n)) throw new Error(`${name}=${raw} is not a number`);
  return n;
}

/**
 * Test options for a property test: a generous timeout (scaled like the run counts), so a slow,
 * busy machine does not turn a passing property into a timeout; the run counts keep them short.
 */
export function fuzzTest(): { timeout: number } {
  return { timeout: 60_000 * Math.max(1, envNumber('FUZZ_RUNS_FACTOR') ?? 1) };
}

/** fast-check parameters: `numRuns` scaled by FUZZ_RUNS_FACTOR, FUZZ_SEED when given. */
export function fuzzParams<T>(numRuns: number, extra: Parameters<T> = {}): Parameters<T> {
  const factor = envNumber('FUZZ_RUNS_FACTOR') ?? 1;
  const seed = envNumber('FUZZ_SEED');
  return { numRuns: Math.max(1, Math.round(numRuns * factor)), ...(seed === undefined ? {} : { seed }), ...extra };
}

export interface RawPluginRun {
  status: number | null;
  signal: NodeJS.Signals | null;
  stdout: Buffer;
  stderr: Buffer;
}

/** As runPlugin (plugin-exec.ts): a sanitizer build's runtime options are passed on when set. */
const SANITIZER_ENV = ['ASAN_OPTIONS', 'UBSAN_OPTIONS', 'LSAN_OPTIONS'] as const;

/** PATH and any sanitizer options: all a plugin run inherits from the test's environment. */
export function pluginBaseEnv(): Record<string, string> {
  const env: Record<string, string> = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
  for (const k of SANITIZER_ENV) if (process.env[k] !== undefined) env[k] = process.env[k]!;
  return env;
}

/**
 * Spawns the plugin (requirePluginBinary: AMBIENT_CNI_PLUGIN may select a sanitizer build) with
 * exactly `env` (plus pluginBaseEnv()) and `stdin` as raw bytes, so that invalid UTF-8 reaches
 * it unchanged (runPlugin in plugin-exec.ts sends text).
 */
export function runPluginBytes(
  env: Record<string, string | undefined>,
  stdin: Uint8Array,
  launcher: readonly string[] = [],
): Promise<RawPluginRun> {
  const binary = requirePluginBinary();
  const childEnv = pluginBaseEnv();
  for (const [k, v] of Object.entries(env)) if (v !== undefined) childEnv[k] = v;
  // With a launcher (argv), it runs first and gets the plugin's path as its last argument.
  const [program, ...args] = launcher.length > 0 ? [...launcher, binary] : [binary];
  return new Promise((resolve, reject) => {
    const child = spawn(program!, args, { env: childEnv, stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (d: Buffer) => out.push(d));
    child.stderr.on('data', (d: Buffer) => err.push(d));
    child.on('error', reject);
    child.on('close', (status, signal) => resolve({ status, signal, stdout: Buffer.concat(out), stderr: Buffer.concat(err) }));
    // The plugin may exit before reading all of stdin (VERSION, a missing variable): EPIPE is fine.
    child.stdin.on('error', () => {});
    child.stdin.end(Buffer.from(stdin));
  });
}

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/** The bytes as text, throwing when they are not UTF-8. */
export function utf8Text(bytes: Uint8Array): string {
  return strictUtf8.decode(bytes);
}
