// Structured logs with pino: one line per event, with child loggers per component/pod, in one of
// three formats:
//   json           pino's JSON lines (`run`'s format: numeric level, ISO time, bindings, msg);
//   istio-json     Istio's `--log_as_json` lines: {"level":"info","time":...,"scope":...,"msg":...,fields};
//   istio-console  Istio's default console lines: time<TAB>level<TAB>scope<TAB>msg<TAB>k=v k=v.
// The Istio formats re-render pino's line, so every logger and child works the same in all three.
import { pino, type DestinationStream, type Logger } from 'pino';
import { AGENT_SCOPE, DEFAULT_SCOPE, type Scope, type ScopeLevels } from './log-levels.js';

export type { Logger };
export type LogFormat = 'json' | 'istio-json' | 'istio-console';
export const LOG_FORMATS: readonly LogFormat[] = ['json', 'istio-json', 'istio-console'];

export interface LoggerOptions {
  /** One level for everything (when `levels` is not given); default LOG_LEVEL, then info. */
  level?: string;
  /** Per scope; the returned logger is the cni-agent scope. */
  levels?: ScopeLevels;
  name?: string;
  format?: LogFormat;
  /** Where the lines go (default stdout). */
  destination?: { write(line: string): void };
}

/** The agent's (cni-agent scope) logger. */
export function createLogger(options: LoggerOptions = {}): Logger {
  const format = options.format ?? 'json';
  const out = options.destination ?? { write: (s: string): void => void process.stdout.write(s) };
  const level = options.levels?.[AGENT_SCOPE] ?? options.level ?? process.env['LOG_LEVEL'] ?? 'info';
  const settings = {
    name: options.name ?? 'ambient-node-agent',
    level,
    base: undefined, // no pid/hostname noise; the DaemonSet pod already identifies the node
    timestamp: pino.stdTimeFunctions.isoTime,
  };
  if (format === 'json') return options.destination ? pino(settings, options.destination as DestinationStream) : pino(settings);
  const render = format === 'istio-json' ? istioJsonLine : istioConsoleLine;
  return pino(settings, { write: (line: string) => out.write(render(line)) } as DestinationStream);
}

/** A logger for one of Istio's other scopes (cni-plugin, default) at that scope's level. */
export function scopeLogger(agentLog: Logger, scope: Exclude<Scope, typeof AGENT_SCOPE>, levels: ScopeLevels | undefined): Logger {
  const child = agentLog.child({ scope });
  // A silenced agent log (tests, library use) stays silent.
  if (levels && agentLog.level !== 'silent') child.level = levels[scope];
  return child;
}

/** The process-level logger of a command (Istio's default scope). */
export function processLogger(agentLog: Logger, levels?: ScopeLevels): Logger {
  return scopeLogger(agentLog, DEFAULT_SCOPE, levels);
}

// ---------------------------------------------------------------------------------------------
// Istio's formats (pkg/log: zap with level/time/scope/msg keys, lowercase levels, time
// 2006-01-02T15:04:05.000000Z; console labels appended as key=value after a tab).

const LEVEL_NAMES: ReadonlyArray<[number, string]> = [
  [60, 'fatal'],
  [50, 'error'],
  [40, 'warn'],
  [30, 'info'],
  [0, 'debug'], // pino's trace and debug: Istio has no trace
];
const OWN_KEYS = new Set(['level', 'time', 'scope', 'msg', 'name']);

interface Parsed {
  level: string;
  time: string;
  scope: string;
  msg: string;
  fields: Array<[string, unknown]>;
}

function parse(line: string): Parsed {
  const rec = JSON.parse(line) as Record<string, unknown>;
  const n = typeof rec['level'] === 'number' ? rec['level'] : 30;
  const level = LEVEL_NAMES.find(([min]) => n >= min)?.[1] ?? 'info';
  const iso = typeof rec['time'] === 'string' ? rec['time'] : new Date().toISOString();
  return {
    level,
    time: iso.replace(/\.(\d{3})Z$/, '.$1000Z'), // pino gives milliseconds; Istio prints microseconds
    scope: typeof rec['scope'] === 'string' ? rec['scope'] : AGENT_SCOPE,
    msg: typeof rec['msg'] === 'string' ? rec['msg'] : '',
    fields: Object.entries(rec).filter(([k]) => !OWN_KEYS.has(k)),
  };
}

export function istioJsonLine(line: string): string {
  const p = parse(line);
  return `${JSON.stringify({ level: p.level, time: p.time, scope: p.scope, msg: p.msg, ...Object.fromEntries(p.fields) })}\n`;
}

export function istioConsoleLine(line: string): string {
  const p = parse(line);
  const labels = p.fields.map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`).join(' ');
  return `${p.time}\t${p.level}\t${p.scope}\t${p.msg}${labels ? `\t${labels}` : ''}\n`;
}

/** For tests and library use: drops everything. */
export const silentLogger: Logger = pino({ level: 'silent' });
