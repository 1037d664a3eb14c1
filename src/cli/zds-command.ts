// `ambient-node-agent zds serve`: a ZDS server holding the pods given on the command line, for
// trying the agent against a real ztunnel (or zds_client.py) without Kubernetes.
import { parseArgs } from 'node:util';
import { NativeNetAddon } from '../addon/net-addon.js';
import { createLogger } from '../ops/log.js';
import { isRetryable } from '../zds/errors.js';
import { PodRegistry, type PodIdentity } from '../zds/registry.js';
import { ZdsServer } from '../zds/server.js';
import { UsageError } from '../util/usage-error.js';

export const ZDS_USAGE = `usage: ambient-node-agent zds serve [--socket PATH] [--mode OCTAL] --pod SPEC [--pod SPEC ...]

Serves ZDS on PATH (default /var/run/ztunnel/ztunnel.sock) and hands each pod to every ztunnel
that connects: a snapshot of all pods, then snapshot_sent. Runs until SIGINT/SIGTERM.

  --pod NAMESPACE/NAME/SERVICE_ACCOUNT/UID=NETNS   a pod and its network namespace file
  --pod NAMESPACE/NAME/SERVICE_ACCOUNT/UID          a pod without a netns (sent as keep)
`;

export interface ZdsServeCommand {
  socket: string;
  mode: number;
  pods: Array<{ pod: PodIdentity; netns?: string }>;
}

function parsePod(spec: string): { pod: PodIdentity; netns?: string } {
  const [identity = '', netns] = spec.split('=', 2);
  const parts = identity.split('/');
  if (parts.length !== 4 || parts.some((p) => p === '')) {
    throw new UsageError(`--pod: expected NAMESPACE/NAME/SERVICE_ACCOUNT/UID[=NETNS], got ${JSON.stringify(spec)}`);
  }
  const [namespace = '', name = '', serviceAccount = '', uid = ''] = parts;
  return { pod: { uid, name, namespace, serviceAccount }, ...(netns ? { netns } : {}) };
}

export function parseZdsArgs(args: string[]): ZdsServeCommand | 'help' {
  const [verb, ...rest] = args;
  if (verb === undefined || verb === '--help' || verb === '-h') return 'help';
  if (verb !== 'serve') throw new UsageError(`zds: unknown subcommand ${JSON.stringify(verb)} (subcommands: serve)`);
  let values;
  try {
    ({ values } = parseArgs({
      args: rest,
      options: {
        socket: { type: 'string', default: '/var/run/ztunnel/ztunnel.sock' },
        mode: { type: 'string', default: '600' },
        pod: { type: 'string', multiple: true, default: [] },
      },
      strict: true,
    }));
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  if (!/^[0-7]{3,4}$/.test(values.mode))
    throw new UsageError(`--mode: expected an octal mode such as 600, got ${JSON.stringify(values.mode)}`);
  return { socket: values.socket, mode: parseInt(values.mode, 8), pods: values.pod.map(parsePod) };
}

/** Runs until the returned promise's signal arrives; resolves with the exit status. */
export async function runZdsServe(cmd: ZdsServeCommand, out: (s: string) => void, stop: Promise<void>): Promise<number> {
  const log = createLogger({ name: 'zds-serve' });
  const addon = new NativeNetAddon();
  const server: ZdsServer = new ZdsServer({ socketPath: cmd.socket, mode: cmd.mode, snapshot: () => registry.snapshot(), log });
  const registry: PodRegistry = new PodRegistry(server);
  try {
    for (const { pod, netns } of cmd.pods) {
      // Nobody is connected yet, so this only registers: the pods go out with the snapshot.
      await registry.add(pod, netns ? addon.openNetns(netns) : undefined).catch((err: unknown) => {
        if (!isRetryable(err)) throw err;
      });
    }
    server.start();
    out(`serving ZDS on ${cmd.socket} with ${registry.size} pod(s); Ctrl-C to stop\n`);
    await stop;
    return 0;
  } finally {
    server.close();
    registry.close();
  }
}
