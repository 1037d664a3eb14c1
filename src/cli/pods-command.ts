// `ambient-node-agent pods`: the agent's /debug/pods as a table, for troubleshooting on a node.
// It asks the agent over <run dir>/debug.sock (root only), where the agent serves it.
import { parseArgs } from 'node:util';
import { debugSocketPath, getDebug, ROUTE_DEBUG_PODS } from '../agent/debug-server.js';
import { UsageError } from '../util/usage-error.js';

export const PODS_USAGE = `usage: ambient-node-agent pods [--run-dir /var/run/istio-cni] [--json]

Prints every pod the running agent tracks: its netns inode, whether its in-pod rules are as
expected right now (verified on request), when live reconciliation last verified them and how
often it repaired them, and what each ztunnel connection said about it.
Asks the agent on <run dir>/debug.sock (root only); --run-dir defaults to CNI_AGENT_RUN_DIR,
then /var/run/istio-cni, as for \`run\`.
`;

interface DebugPods {
  mode: string;
  ready: boolean;
  connections: Array<{ id: number; state: string; connectedAt: string }>;
  pods: Array<{
    uid: string;
    namespace: string;
    name: string;
    netnsInode: number | null;
    rules: string;
    lastVerified?: string | null;
    repairs?: number;
    ztunnel: Record<string, string>;
  }>;
}

export function podsTable(body: DebugPods): string {
  const header = ['NAMESPACE', 'NAME', 'UID', 'NETNS', 'RULES', 'LAST VERIFIED', 'REPAIRS', 'ZTUNNEL'];
  const rows = body.pods.map((p) => [
    p.namespace,
    p.name,
    p.uid,
    p.netnsInode === null ? '-' : String(p.netnsInode),
    p.rules,
    p.lastVerified ?? '-',
    String(p.repairs ?? 0),
    Object.entries(p.ztunnel)
      .map(([conn, state]) => `#${conn}:${state}`)
      .join(' ') || 'no ztunnel',
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]): string => cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] ?? 0))).join('  ');
  const conns = body.connections.map((c) => `#${c.id} ${c.state} since ${c.connectedAt}`).join(', ') || 'none';
  return [`mode: ${body.mode}, ready: ${body.ready}, ztunnel connections: ${conns}`, line(header), ...rows.map(line)].join('\n') + '\n';
}

export async function runPodsCommand(args: string[], out: (s: string) => void): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({
      args,
      options: {
        'run-dir': { type: 'string', default: process.env['CNI_AGENT_RUN_DIR'] || '/var/run/istio-cni' },
        json: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
    }));
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  if (values.help) {
    out(PODS_USAGE);
    return 0;
  }
  const socket = debugSocketPath(values['run-dir']);
  let res: { status: number; body: string };
  try {
    res = await getDebug(socket, ROUTE_DEBUG_PODS);
  } catch (err) {
    throw new Error(`cannot reach the agent at ${socket}: ${(err as Error).message}`, { cause: err });
  }
  if (res.status !== 200) throw new Error(`${socket} ${ROUTE_DEBUG_PODS} answered ${res.status}: ${res.body.trim()}`);
  const body = JSON.parse(res.body) as DebugPods;
  out(values.json ? `${JSON.stringify(body, null, 2)}\n` : podsTable(body));
  return 0;
}
