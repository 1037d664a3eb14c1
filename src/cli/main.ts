#!/usr/bin/env node
// The ambient-node-agent command line: dispatches to one subcommand per concern.
import { realpathSync } from 'node:fs';
import { basename } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { NetAddon } from '../addon/net-addon.js';
import { UsageError } from '../util/usage-error.js';

const USAGE = `usage: ambient-node-agent <command> [options]

commands:
  run      the node agent (DaemonSet entrypoint); run --help lists every flag and env var
  install-cni  the same, with Istio's command line (--log_output_level, --log_as_json) and log
           formats; also what runs when this program is started as \`install-cni\` (Istio's chart)
  pods     the pods the running agent tracks (netns, rule state, ztunnel state), from /debug/pods
  demo     the whole CNI path on this machine (root, no Kubernetes), narrated, then cleaned up
           [--runtime cni|containerd]: pods made by the demo itself (default) or by a real containerd over CRI
  uninstall  remove the CNI config entry and the plugin binary this agent installed
  rules    print, apply, delete or verify Istio's in-pod / host redirection rules
  zds      serve pods to ztunnel over ZDS (zds serve --pod ns/name/sa/uid=/var/run/netns/x)

Run "ambient-node-agent <command> --help" for a command's options.
`;

/** Istio's entrypoint name (the chart's `command: ["install-cni"]`). */
export const INSTALL_CNI = 'install-cni';

/** argv after the script: started as install-cni (the image's link), it is that command. */
export function commandLine(script: string, args: string[]): string[] {
  return basename(script) === INSTALL_CNI ? [INSTALL_CNI, ...args] : args;
}

export interface MainIO {
  out(text: string): void;
  err(text: string): void;
}

const processIO: MainIO = {
  out: (s) => void process.stdout.write(s),
  err: (s) => void process.stderr.write(s),
};

/** Runs one command and returns its exit status: 0 ok, 1 failed or drift, 2 bad input. */
export async function main(argv: string[], io: MainIO = processIO, addon?: NetAddon): Promise<number> {
  const [command, ...rest] = argv;
  try {
    // Each command's modules load on demand: `run` starts without the demo, the rules CLI
    // without the agent, and a standalone agent without the Kubernetes client.
    switch (command) {
      case 'rules': {
        const { parseRulesArgs, runRulesCommand } = await import('./rules-command.js');
        return await runRulesCommand(parseRulesArgs(rest), io, addon);
      }
      case 'run':
        return await (await import('./run-command.js')).runAgent(rest, io.out, untilSignal());
      case INSTALL_CNI:
        return await (await import('./install-cni-command.js')).runInstallCni(rest, io.out, untilSignal());
      case 'demo':
        return await (await import('../demo/demo-command.js')).runDemo(io.out, untilSignal(), rest);
      case 'pods':
        return await (await import('./pods-command.js')).runPodsCommand(rest, io.out);
      case 'uninstall':
        return await (await import('./run-command.js')).uninstall(rest, io.out);
      case 'zds': {
        const { parseZdsArgs, runZdsServe, ZDS_USAGE } = await import('./zds-command.js');
        const cmd = parseZdsArgs(rest);
        if (cmd === 'help') {
          io.out(ZDS_USAGE);
          return 0;
        }
        return await runZdsServe(cmd, io.out, untilSignal());
      }
      case undefined:
      case '-h':
      case '--help':
      case 'help':
        io.out(`${USAGE}\n${(await import('../agent/config.js')).usage()}`);
        return command === undefined ? 2 : 0;
      default:
        throw new UsageError(`unknown command ${JSON.stringify(command)} (commands: run, install-cni, pods, demo, uninstall, rules, zds)`);
    }
  } catch (err) {
    if (err instanceof UsageError || err instanceof RangeError) {
      for (const line of err.message.split('\n')) io.err(`ambient-node-agent: ${line}\n`); // one line per problem
      return 2;
    }
    io.err(`ambient-node-agent: ${err instanceof Error ? err.message : String(err)}\n`);
    return 1;
  }
}

function untilSignal(): Promise<void> {
  return new Promise((resolve) => {
    process.once('SIGINT', () => resolve());
    process.once('SIGTERM', () => resolve());
  });
}

/** Run as a program (also through npm's `bin` symlink), not when imported by tests. */
function isEntryPoint(): boolean {
  const script = process.argv[1];
  if (script === undefined) return false;
  try {
    return realpathSync(script) === fileURLToPath(import.meta.url);
  } catch {
    return false;
  }
}

if (isEntryPoint()) {
  main(commandLine(process.argv[1] ?? '', process.argv.slice(2))).then((code) => {
    process.exitCode = code;
  });
}
