// Log levels per scope, with Istio's command-line syntax (`--log_output_level`, pkg/log/options.go):
// `<scope>:<level>,<scope>:<level>,...`; a bare `<level>` is the `default` scope; `all` sets every
// scope; a scope nobody registered is ignored, as Istio ignores it. The scopes Istio's agent
// registers (cni/pkg/scopes) and what carries each one here:
//   - cni-agent:  every component of the agent (its root logger);
//   - cni-plugin: the plugin's lines re-emitted from log.sock, and the plugin's own level
//                 (`plugin_log_level` in the CNI config entry, as Istio's installer writes it);
//   - default:    the process-level lines of the command (start, signals, stop).
// Istio starts every scope at info (default output levels "default:info,grpc:none"); here every
// scope starts at LOG_LEVEL / --log-level (default info), and the flag refines that.

/** pino's levels (what the loggers take). */
export type PinoLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal' | 'silent';
export const PINO_LEVELS: readonly PinoLevel[] = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'];

/** Istio's level names (pkg/log stringToLevel). */
export type IstioLevel = 'debug' | 'info' | 'warn' | 'error' | 'fatal' | 'none';
const ISTIO_TO_PINO: Readonly<Record<IstioLevel, PinoLevel>> = {
  debug: 'debug',
  info: 'info',
  warn: 'warn',
  error: 'error',
  fatal: 'fatal',
  none: 'silent',
};

export const AGENT_SCOPE = 'cni-agent';
export const PLUGIN_SCOPE = 'cni-plugin';
export const DEFAULT_SCOPE = 'default';
/** Istio's OverrideScopeName. */
const ALL_SCOPES = 'all';
export const SCOPES = [DEFAULT_SCOPE, AGENT_SCOPE, PLUGIN_SCOPE] as const;
export type Scope = (typeof SCOPES)[number];
export type ScopeLevels = Record<Scope, PinoLevel>;

export function isPinoLevel(s: string): s is PinoLevel {
  return (PINO_LEVELS as readonly string[]).includes(s);
}

export function uniformLevels(level: PinoLevel): ScopeLevels {
  return { default: level, 'cni-agent': level, 'cni-plugin': level };
}

/**
 * Applies a `--log_output_level` value on top of `base`, entry by entry in order, as Istio's
 * processLevels does: the first malformed entry ends the processing (the entries before it stay
 * applied) and is returned as `error` with Istio's message. Istio's install-cni then logs the error
 * and runs on (its PreRunE ignores it); the caller does the same.
 */
export function applyOutputLevels(spec: string, base: ScopeLevels): { levels: ScopeLevels; error?: string } {
  const levels = { ...base };
  if (spec === '') return { levels };
  for (const entry of spec.split(',')) {
    const pieces = entry.split(':');
    if (pieces.length > 2) return { levels, error: `invalid output level format '${entry}'` };
    const [scope, name] = pieces.length === 1 ? [DEFAULT_SCOPE, pieces[0] as string] : [pieces[0] as string, pieces[1] as string];
    if (!Object.prototype.hasOwnProperty.call(ISTIO_TO_PINO, name)) return { levels, error: `invalid output level '${name}'` };
    const level = ISTIO_TO_PINO[name as IstioLevel];
    if (scope === ALL_SCOPES) for (const s of SCOPES) levels[s] = level;
    else if ((SCOPES as readonly string[]).includes(scope)) levels[scope as Scope] = level;
  }
  return { levels };
}

/** Istio's LevelToString for a level held as pino's: trace has no Istio name and is debug. */
export function istioLevelName(level: PinoLevel): IstioLevel {
  if (level === 'trace') return 'debug';
  if (level === 'silent') return 'none';
  return level;
}
