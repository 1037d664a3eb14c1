#!/usr/bin/env node
// The ambient-node-agent command line: dispatches to one subcommand per concern.
import type { NetAddon } from '../addon/net-addon.js';
import { parseRulesArgs, runRulesCommand } from './rules-command.js';
import { UsageError } from './usage-error.js';

const USAGE = `usage: ambient-node-agent <command> [options]

commands:
  rules    print, apply, delete or verify Istio's in-pod / host redirection rules

Run "ambient-node-agent <command> --help" for a command's options.
`;

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
    switch (command) {
      case 'rules':
        return await runRulesCommand(parseRulesArgs(rest), io, addon);
      case undefined:
      case '-h':
      case '--help':
      case 'help':
        io.out(USAGE);
        return command === undefined ? 2 : 0;
      default:
        throw new UsageError(`unknown command ${JSON.stringify(command)} (commands: rules)`);
    }
  } catch (err) {
    if (err instanceof UsageError || err instanceof RangeError) {
      io.err(`ambient-node-agent: ${err.message}\n`);
      return 2;
    }
    io.err(`ambient-node-agent: ${err instanceof Error ? err.message : String(err)}\n`);
    return 1;
  }
}

const isEntryPoint = process.argv[1] !== undefined && import.meta.url === new URL(`file://${process.argv[1]}`).href;
if (isEntryPoint) {
  main(process.argv.slice(2)).then((code) => {
    process.exitCode = code;
  });
}
