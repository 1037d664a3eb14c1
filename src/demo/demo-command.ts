// `ambient-node-agent demo`: the whole CNI path on this machine, narrated, then cleaned up.
import { parseArgs } from 'node:util';
import { UsageError } from '../util/usage-error.js';
import { CLUSTER_DNS, DemoEnvironment, type ConnectionRow, type DemoRuntime, type DnsRow } from './environment.js';

const OK = '✔';
const NO = '✘';

function pad(cells: string[], widths: number[]): string {
  return cells.map((c, i) => c.padEnd(widths[i] ?? 0)).join('  ');
}

function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  return [
    pad(header, widths),
    pad(
      widths.map((w) => '-'.repeat(w)),
      widths,
    ),
    ...rows.map((r) => pad(r, widths)),
  ].join('\n');
}

export function connectionTable(rows: ConnectionRow[], ipOf: (pod: string) => string): string {
  return table(
    ['from → to', 'outbound 15001 (original dst)', 'inbound 15006 (original dst)', 'client IP at app', 'ok'],
    rows.map((r) => {
      const clientIp = ipOf(r.from);
      const good = Boolean(r.outbound && r.inbound && r.peerSeenByApp === clientIp && r.echoed);
      return [
        `${r.from} → ${r.to}`,
        r.outbound ? `${OK} ${r.outbound.originalDst}` : `${NO} not captured`,
        r.inbound ? `${OK} ${r.inbound.originalDst}` : `${NO} not captured`,
        `${r.peerSeenByApp}${r.peerSeenByApp === clientIp ? ` ${OK} preserved` : ` ${NO} expected ${clientIp}`}`,
        good ? OK : NO,
      ];
    }),
  );
}

export function dnsTable(rows: DnsRow[]): string {
  return table(
    ['pod', `query (to ${CLUSTER_DNS}:53)`, 'answer', 'answered by 15053'],
    rows.map((r) => [r.pod, r.name, r.answer, r.event ? `${OK} (${r.event.transport})` : NO]),
  );
}

/** `demo [--runtime cni|containerd]`: who creates the pods (the demo itself, or a real containerd over CRI). */
export function parseDemoArgs(args: string[]): { runtime: DemoRuntime } {
  let runtime: string | undefined;
  try {
    ({
      values: { runtime },
    } = parseArgs({ args, options: { runtime: { type: 'string' } }, strict: true }));
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  if (runtime === undefined || runtime === 'cni' || runtime === 'containerd') return { runtime: runtime ?? 'cni' };
  throw new UsageError(`--runtime: expected cni or containerd, got ${JSON.stringify(runtime)}`);
}

export async function runDemo(out: (s: string) => void, interrupted: Promise<void>, args: string[] = []): Promise<number> {
  const say = (s: string): void => out(`${s}\n`);
  const { runtime } = parseDemoArgs(args);
  const env = new DemoEnvironment({ runtime, log: (l) => (process.env['DEMO_VERBOSE'] ? say(`    ${l}`) : undefined) });
  const byContainerd = runtime === 'containerd';
  let aborted = false;
  void interrupted.then(() => {
    aborted = true;
    say('\ninterrupted: cleaning up…');
  });
  const step = (n: number, text: string): void => {
    if (aborted) throw new Error('interrupted');
    say(`[${n}/6] ${text}`);
  };
  try {
    step(
      1,
      `node namespace, bridge network config, agent (standalone), ztunnel stand-in${byContainerd ? ', containerd (CRI) in the node namespace' : ''}`,
    );
    await env.setUp();
    say(
      `      CNI chain: ${env
        .chainedConfig()
        .plugins.map((p) => p.type)
        .join(' → ')}`,
    );
    step(
      2,
      `creating pods (${byContainerd ? 'containerd RunPodSandbox: ' : ''}bridge + host-local + istio-cni; ADD returns once ztunnel has the pod)`,
    );
    await env.createPods((p) => say(`      pod ${p.name.padEnd(4)} ${p.ip.padEnd(14)} enrolled, app on :8080`));
    step(3, 'pod-to-pod traffic');
    const rows = await env.connectAll((r) => say(`      ${r.from} → ${r.to}: ${r.echoed ? 'echo ok' : 'no echo'}`));
    say(`\n${connectionTable(rows, (name) => env.pods.find((p) => p.name === name)?.ip ?? '')}\n`);
    step(4, `DNS queries to ${CLUSTER_DNS}`);
    const dns = await env.resolveAll();
    say(`\n${dnsTable(dns)}\n`);
    step(5, `deleting pods (${byContainerd ? 'StopPodSandbox + RemovePodSandbox → ' : ''}CNI DEL → agent → ztunnel del)`);
    for (const pod of [...env.pods]) await env.deletePod(pod);
    step(6, 'stopping the agent and the stand-in, removing namespaces');
    const good = rows.every((r) => r.outbound && r.inbound && r.echoed) && dns.every((d) => d.event);
    say(
      good
        ? `${OK} every connection and DNS query went through the ztunnel listeners`
        : `${NO} some traffic was not captured (agent log: ${env.agentLog})`,
    );
    return good ? 0 : 1;
  } catch (err) {
    if (aborted) return 130; // the conventional status after Ctrl-C
    say(`${NO} demo failed: ${(err as Error).message}`);
    return 1;
  } finally {
    await env.tearDown();
    say('cleaned up');
  }
}
