// Network namespaces for privileged tests: created with `ip netns add` (argv, no shell), named
// with a per-process prefix, and always deleted, even when a test fails.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';

export const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;

/** Why privileged tests cannot run here, or undefined when they can. */
export function privilegedSkipReason(): string | undefined {
  if (!isRoot) return 'needs root (CAP_SYS_ADMIN + CAP_NET_ADMIN) to create network namespaces';
  try {
    execFileSync('ip', ['-V'], { stdio: 'ignore' });
  } catch {
    return 'needs iproute2 (`ip`); run scripts/bootstrap.sh';
  }
  return undefined;
}

/** In CI privileged tests must run: a skip there would hide a broken machine. */
export function requirePrivilegedInCi(): void {
  const reason = privilegedSkipReason();
  if (reason && process.env['CI']) throw new Error(`privileged tests cannot run in CI: ${reason}`);
}

let counter = 0;
const created = new Set<string>();

export function ip(args: string[]): string {
  return execFileSync('ip', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

export function ipIn(ns: string, args: string[]): string {
  return ip(['-n', ns, ...args]);
}

/** Runs a program inside the namespace with `ip netns exec` (argv only). */
export function execIn(ns: string, argv: string[], input?: string): string {
  return execFileSync('ip', ['netns', 'exec', ns, ...argv], {
    encoding: 'utf8',
    input,
    stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
  });
}

export interface TestNetns {
  name: string;
  path: string;
}

/** A new namespace with `lo` up (as every pod has). */
export function createNetns(tag = 't'): TestNetns {
  const name = `ana${process.pid}-${tag}${counter++}`;
  ip(['netns', 'add', name]);
  created.add(name);
  ipIn(name, ['link', 'set', 'lo', 'up']);
  return { name, path: `/var/run/netns/${name}` };
}

export function deleteNetns(ns: TestNetns | string): void {
  const name = typeof ns === 'string' ? ns : ns.name;
  if (existsSync(`/var/run/netns/${name}`)) {
    try {
      ip(['netns', 'del', name]);
    } catch {
      // already gone
    }
  }
  created.delete(name);
}

/** Deletes every namespace this process created and has not deleted yet. */
export function deleteAllNetns(): void {
  for (const name of [...created]) deleteNetns(name);
}

process.on('exit', deleteAllNetns);

/** `nft list ruleset` inside the namespace, through the nft binary (an independent witness). */
export function nftRuleset(ns: TestNetns): string {
  return execIn(ns.name, ['nft', 'list', 'ruleset']);
}
