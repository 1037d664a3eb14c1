// A separate "container runtime" process for the fault tests: runs chained CNI commands with the
// demo's CniRuntime (compiled, from dist/), many pods at once, and reports each finished command
// as one JSON line on stdout as soon as it is done (so a test can act in the middle of a burst).
// It must not run in the test process: the ztunnel stand-in lives there and needs the addon's
// netns threads to bind each pod's listeners before it acks, while every in-flight plugin exec
// holds one of those threads until its ADD returns (bench/node-cni-driver.ts explains the same).
//
// stdin (JSON): { distDir, nodeNetns, pluginDirs, conflist, jobs: [{ id, pod: CniPod, commands: ['DEL', 'ADD', ...] }] }
//   The jobs run concurrently; the commands of one job run in order (a runtime's teardown, then
//   its retry). A failed command does not stop the job's next command (a runtime retries).
// stdout: one line per finished command:
//   { id, command, ok: true, ms, result } | { id, command, ok: false, ms, code, msg, details, error }
// then { done: true, wallMs }.
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return Buffer.concat(chunks).toString('utf8');
}

const input = JSON.parse(await readStdin());
const { NativeNetAddon } = await import(pathToFileURL(join(input.distDir, 'src', 'addon', 'net-addon.js')).href);
const { CniRuntime } = await import(pathToFileURL(join(input.distDir, 'src', 'demo', 'cni-runtime.js')).href);

const addon = new NativeNetAddon();
const node = addon.openNetns(input.nodeNetns);
const runtime = new CniRuntime({ addon, nodeNetns: node, pluginDirs: input.pluginDirs, conflist: input.conflist });
const emit = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);

const started = process.hrtime.bigint();
const elapsed = (t) => Number(process.hrtime.bigint() - t) / 1e6;
await Promise.all(
  input.jobs.map(async (job) => {
    for (const command of job.commands) {
      const t = process.hrtime.bigint();
      try {
        const result =
          command === 'ADD' ? await runtime.add(job.pod) : command === 'DEL' ? await runtime.del(job.pod) : await runtime.check(job.pod);
        emit({ id: job.id, command, ok: true, ms: elapsed(t), result: result ?? null });
      } catch (err) {
        emit({
          id: job.id,
          command,
          ok: false,
          ms: elapsed(t),
          code: err.code ?? null,
          msg: err.msg ?? null,
          details: err.details ?? null,
          error: String(err.message).split('\n')[0],
        });
      }
    }
  }),
);
emit({ done: true, wallMs: elapsed(started) });
node.close();
