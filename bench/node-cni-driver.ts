// A separate "container runtime" process for bench/node.ts's burst: N concurrent chained CNI ADDs
// with the demo's CniRuntime. It must not run in the bench process: the ztunnel stand-in lives
// there and needs the addon's small netns thread pool to bind each pod's listeners before it
// acks, while each in-flight plugin exec holds one of those threads until that ack arrives (a
// deadlock until the 5 s ZDS timeout). Here the plugin execs get their own process and pool,
// with a thread per ADD (ANA_NETNS_THREADS, set by BenchPods.addConcurrently): every plugin is
// posix_spawn'd at once, as a runtime execs them (Go's os/exec: clone(CLONE_VM|CLONE_VFORK)).
// Input (stdin, JSON): { nodeNetns, pluginDirs, conflist, pods: CniPod[], earlierResults? }
// (earlierResults[i]: pod i's prevResult, for a conflist that holds only the istio-cni entry).
// Output (stdout, JSON): { wallMs, results: Array<{ ms: number } | { error: string }> }.
import { NativeNetAddon } from '../src/addon/net-addon.js';
import { CniRuntime, type CniPod, type CniResult } from '../src/demo/cni-runtime.js';

export interface DriverInput {
  nodeNetns: string;
  pluginDirs: string[];
  conflist: object;
  pods: CniPod[];
  earlierResults?: CniResult[];
}

export type DriverResult = { ms: number } | { error: string };

export interface DriverOutput {
  wallMs: number;
  results: DriverResult[];
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

async function main(): Promise<void> {
  const input = JSON.parse(await readStdin()) as DriverInput;
  const addon = new NativeNetAddon();
  const node = addon.openNetns(input.nodeNetns);
  try {
    const runtime = new CniRuntime({ addon, nodeNetns: node, pluginDirs: input.pluginDirs, conflist: input.conflist });
    const start = process.hrtime.bigint();
    const results = await Promise.all(
      input.pods.map(async (pod, i): Promise<DriverResult> => {
        const t = process.hrtime.bigint();
        try {
          await runtime.add(pod, input.earlierResults?.[i]);
          return { ms: Number(process.hrtime.bigint() - t) / 1e6 };
        } catch (err) {
          return { error: (err as Error).message.split('\n')[0] ?? 'error' };
        }
      }),
    );
    const out: DriverOutput = { wallMs: Number(process.hrtime.bigint() - start) / 1e6, results };
    process.stdout.write(`${JSON.stringify(out)}\n`);
  } finally {
    node.close();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exitCode = 1;
});
