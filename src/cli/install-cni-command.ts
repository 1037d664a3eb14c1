// `install-cni`: the command line of Istio's own image (cni/pkg/cmd/root.go), as Istio's Helm
// chart runs it: `install-cni [--log_output_level=<scope>:<level>,...] [--log_as_json]`, every
// setting from the environment. It is `run` with Istio's logging flags and formats:
//   --log_output_level  Istio's per-scope levels (src/ops/log-levels.ts);
//   --log_as_json       Istio's JSON lines; without it, Istio's console lines (the chart's default,
//                       global.logAsJson=false).
// `run`'s flags are accepted too. The image links /usr/local/bin/install-cni to the CLI, which
// dispatches here when started under that name.
import { optionsHelp } from '../agent/config.js';
import { parseGoBool } from '../rules/settings.js';
import { runAgent } from './run-command.js';
import { UsageError } from '../util/usage-error.js';

export const INSTALL_CNI_USAGE = `usage: install-cni [--log_output_level=<scope>:<level>,...] [--log_as_json] [run's flags]

The node agent, started the way Istio's chart starts Istio's install-cni (same name, flags and
environment variables); equivalent to \`ambient-node-agent run\` with Istio's log formats.

Istio's flags:
  --log_output_level   comma-separated <scope>:<level> (a bare <level> is the default scope; all
                       sets every scope). Scopes: cni-agent (the agent), cni-plugin (the plugin's
                       lines and the plugin_log_level written into the CNI config), default
                       (start and stop), all. Levels: debug, info, warn, error, fatal, none.
                       Default: every scope at LOG_LEVEL (info). Unknown scopes are ignored.
  --log_as_json        Istio's JSON lines ({"level","time","scope","msg",...}); without it,
                       Istio's console lines (time, level, scope, message, key=value labels).

`;

export interface InstallCniArgs {
  /** run's argv (Istio's flags translated). */
  runArgs: string[];
  json: boolean;
  help: boolean;
}

/** Istio's flags in pflag's forms (--name=value, --name value; a bool alone or =true|false). */
export function parseInstallCniArgs(args: readonly string[]): InstallCniArgs {
  const out: InstallCniArgs = { runArgs: [], json: false, help: false };
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string;
    const [name, inline] =
      arg.startsWith('--') && arg.includes('=') ? [arg.slice(0, arg.indexOf('=')), arg.slice(arg.indexOf('=') + 1)] : [arg, undefined];
    if (name === '--log_output_level') {
      const value = inline ?? args[++i];
      if (value === undefined) throw new UsageError('--log_output_level: a value is needed (<scope>:<level>,...)');
      out.runArgs.push('--log-output-level', value);
    } else if (name === '--log_as_json') {
      const value = inline === undefined ? true : parseGoBool(inline);
      if (value === undefined) throw new UsageError(`--log_as_json: expected true or false, got ${JSON.stringify(inline)}`);
      out.json = value;
    } else if (name === '--help' || name === '-h') {
      out.help = true;
    } else {
      out.runArgs.push(arg);
    }
  }
  return out;
}

export async function runInstallCni(args: string[], out: (s: string) => void, stop: Promise<void>): Promise<number> {
  const parsed = parseInstallCniArgs(args);
  if (parsed.help) {
    out(`${INSTALL_CNI_USAGE}${optionsHelp()}`);
    return 0;
  }
  return runAgent(parsed.runArgs, out, stop, { logFormat: parsed.json ? 'istio-json' : 'istio-console' });
}
