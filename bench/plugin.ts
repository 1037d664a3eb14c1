// istio-cni plugin ADD exec time against an agent that answers at once, side by side with exec of
// /bin/true in the same run (target: plugin p50 within 1.5x of /bin/true). The agent is an
// in-process HTTP server on <tmp>/pluginevent.sock. Both programs are exec'd the way a container
// runtime execs a CNI plugin: containerd's libcni runs it with Go's os/exec, which on Linux
// clones with CLONE_VM|CLONE_VFORK (no copy of the runtime's page tables); here glibc's
// posix_spawn (the same clone flags) from one of the addon's threads, timed on that thread from
// before its pipes are made to after waitpid (the addon's clock of the exec step). For
// comparison, the same two programs spawned with Node's child_process.spawn (libuv forks the
// whole bench process first), timed from spawn() to 'exit' on the event loop. All four are
// interleaved, with the order rotated every iteration.
// Usage: [BENCH_EXECS=300] node dist/bench/plugin.js   (root: the addon enters the bench's own netns)
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { cpus, release, tmpdir } from 'node:os';
import { join } from 'node:path';

import { NativeNetAddon, type NetnsHandle } from '../src/addon/net-addon.js';
import { PLUGIN_EVENT_SOCKET, ROUTE_ADD } from '../src/cni/protocol.js';
import { pluginEntry } from '../src/cni-install/plugin-config.js';
import { projectRoot } from '../src/project-root.js';
import { elapsedMs, formatTable, summarize, summaryRow, useAddonSpawner, writeResult, type Summary } from './support.js';

const TARGET_RATIO = 1.5;
const WARMUP = 10;
const EXEC_TIMEOUT_MS = 10_000;
const TRUE_BINARY = '/bin/true';
const PLUGIN_BINARY = join(projectRoot(import.meta.url), 'build', 'Release', 'istio-cni');

interface Exec {
  ms: number;
  status: number | null;
  stdout: string;
  stderr: string;
}

/** How a program is started: as a runtime starts a CNI plugin, or with Node's child_process. */
type Launch = (file: string, env: Record<string, string>, input: string) => Promise<Exec>;

interface Program {
  label: string;
  file: string;
  launch: 'runtime' | 'node';
  samples: number[];
}

/** Node's child_process.spawn: spawn() to 'exit' is the timed part. */
function nodeSpawn(file: string, env: Record<string, string>, input: string): Promise<Exec> {
  return new Promise((resolve, reject) => {
    let ms = NaN;
    let status: number | null = null;
    let stdout = '';
    let stderr = '';
    const start = process.hrtime.bigint();
    const child = spawn(file, [], { env, stdio: ['pipe', 'pipe', 'pipe'] });
    child.on('exit', (code) => {
      ms = elapsedMs(start);
      status = code;
    });
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.on('error', reject);
    child.on('close', () => resolve({ ms, status, stdout, stderr }));
    child.stdin.on('error', () => {}); // /bin/true exits without reading stdin
    child.stdin.end(input);
  });
}

/**
 * posix_spawn from an addon thread (the exec step), timed by the addon's own clock of that step:
 * execs run one at a time, so the step's wall-time total grows by exactly this one (a step is
 * added to the totals before its result is posted).
 */
function runtimeSpawn(addon: NativeNetAddon, self: NetnsHandle): Launch {
  const execWallMs = (): number => (addon.stats().steps['exec']?.wallSeconds ?? 0) * 1e3;
  return async (file, env, input) => {
    const before = execWallMs();
    const [r] = await addon.run(self, [{ op: 'exec', argv: [file], input, env, timeoutMs: EXEC_TIMEOUT_MS }] as const);
    return { ms: execWallMs() - before, status: r.signal === 0 ? r.exitCode : null, stdout: r.stdout, stderr: r.stderr };
  };
}

/** The fake agent: 200 with an empty body as soon as the request body has arrived. */
function startAgent(socketPath: string, counts: Map<string, number>): Promise<Server> {
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      counts.set(req.url ?? '', (counts.get(req.url ?? '') ?? 0) + 1);
      res.writeHead(200).end();
    });
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(socketPath, () => resolve(server));
  });
}

function execCount(): number {
  const raw = process.env.BENCH_EXECS;
  const n = raw === undefined ? 300 : Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new Error(`BENCH_EXECS must be a positive integer, got ${raw}`);
  return n;
}

async function main(): Promise<void> {
  if (!existsSync(PLUGIN_BINARY)) throw new Error(`${PLUGIN_BINARY} is missing: run \`npm run build\` first`);
  const n = execCount();
  const runDir = mkdtempSync(join(tmpdir(), 'bench-plugin-'));
  const counts = new Map<string, number>();
  let server: Server | undefined;
  try {
    server = await startAgent(join(runDir, PLUGIN_EVENT_SOCKET), counts);

    // A realistic chained ADD: what our installer writes (Istio's config), one pod IP from the primary CNI.
    const entry = pluginEntry({
      runDir,
      excludeNamespaces: ['kube-system'],
      ambientEnabled: true,
      podNamespace: 'istio-system',
      logLevel: 'info',
      enablementSelectors: [{ podSelector: { matchLabels: { 'istio.io/dataplane-mode': 'ambient' } } }],
      nativeNftables: true,
      enableAmbientDetectionRetry: false,
    });
    const input = JSON.stringify({
      cniVersion: '1.0.0',
      ...entry,
      prevResult: {
        cniVersion: '1.0.0',
        interfaces: [{ name: 'eth0', mac: '0a:58:0a:f4:01:05', sandbox: '/var/run/netns/bench' }],
        ips: [{ interface: 0, address: '10.244.1.5/24', gateway: '10.244.1.1' }],
        routes: [{ dst: '0.0.0.0/0', gw: '10.244.1.1' }],
        dns: {},
      },
    });
    // Only what a runtime passes (plus PATH); the same env for both programs.
    const env: Record<string, string> = {
      PATH: '/usr/sbin:/usr/bin:/sbin:/bin',
      CNI_COMMAND: 'ADD',
      CNI_CONTAINERID: 'bench0123456789',
      CNI_NETNS: '/var/run/netns/bench',
      CNI_IFNAME: 'eth0',
      CNI_PATH: '/opt/cni/bin',
      CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=pod-0;K8S_POD_INFRA_CONTAINER_ID=bench0123456789;K8S_POD_UID=uid-0',
    };

    const addon = new NativeNetAddon();
    const self = useAddonSpawner(addon); // the bench's own netns, as every bench spawns
    const launchers: Record<'runtime' | 'node', Launch> = { runtime: runtimeSpawn(addon, self), node: nodeSpawn };
    const programs: Program[] = [
      { label: "istio-cni ADD, exec'd as a runtime does (posix_spawn)", file: PLUGIN_BINARY, launch: 'runtime', samples: [] },
      { label: `${TRUE_BINARY}, exec'd the same way`, file: TRUE_BINARY, launch: 'runtime', samples: [] },
      { label: 'istio-cni ADD, Node child_process.spawn (information)', file: PLUGIN_BINARY, launch: 'node', samples: [] },
      { label: `${TRUE_BINARY}, Node child_process.spawn (information)`, file: TRUE_BINARY, launch: 'node', samples: [] },
    ];
    let failures = 0;
    let firstFailure = '';
    const run = async (program: Program, record: boolean): Promise<void> => {
      const r = await launchers[program.launch](program.file, env, input);
      if (program.file === PLUGIN_BINARY && (r.status !== 0 || !r.stdout.includes('"10.244.1.5/24"') || r.stderr !== '')) {
        failures++;
        firstFailure ||= `exit ${r.status}, stdout ${r.stdout.trim()}, stderr ${r.stderr.trim()}`;
      }
      if (program.file === TRUE_BINARY && r.status !== 0) throw new Error(`${TRUE_BINARY} exited with ${r.status}`);
      if (record) program.samples.push(r.ms);
    };

    try {
      for (let i = 0; i < WARMUP; i++) for (const program of programs) await run(program, false);
      // Interleaved, the order rotated every iteration, so drift (CPU frequency, page cache,
      // other tenants) hits all four alike.
      for (let i = 0; i < n; i++) {
        for (let k = 0; k < programs.length; k++) await run(programs[(i + k) % programs.length]!, true);
        if ((i + 1) % 100 === 0 || i + 1 === n) process.stderr.write(`  ${i + 1}/${n} iterations\n`);
      }
    } finally {
      self.close();
    }

    const summaries = programs.map((p) => summarize(p.samples));
    const [plugin, trueRun, pluginForked, trueForked] = summaries as [Summary, Summary, Summary, Summary];
    const ratio = plugin.p50 / trueRun.p50;
    const agentAdds = counts.get(ROUTE_ADD) ?? 0;
    const expectedAdds = 2 * (n + WARMUP);
    const lines = [
      `istio-cni plugin ADD exec vs ${TRUE_BINARY} (ms, spawn to exit)`,
      formatTable(
        ['program', 'n', 'p50', 'p90', 'p99', 'mean'],
        programs.map((p, i) => summaryRow(p.label, summaries[i]!)),
      ),
      '',
      'notes:',
      `- node ${process.version}, kernel ${release()}, ${cpus().length} CPU(s) (${cpus()[0]?.model ?? '?'})`,
      `- plugin binary ${PLUGIN_BINARY} (${statSync(PLUGIN_BINARY).size} bytes, static)`,
      `- ${n} execs of each, interleaved (order rotated every iteration) after ${WARMUP} untimed warm-up execs of each; argv only, no shell; the same env (CNI_* for ADD) and the same ${input.length}-byte stdin for all`,
      `- "as a runtime does": containerd execs CNI plugins through libcni with Go's os/exec, which clones with CLONE_VM|CLONE_VFORK on Linux; here glibc posix_spawn (the same flags) from an addon thread, timed by the addon's clock of the exec step (pipes, spawn, stdin/stdout, waitpid)`,
      `- "Node child_process.spawn": libuv forks the bench process (its page tables are copied), timed from spawn() to 'exit'; what a Node runtime would pay, not containerd or CRI-O`,
      `- the agent is an in-process node:http server on ${PLUGIN_EVENT_SOCKET}; its reply latency is inside the plugin's time`,
      `- agent received ${agentAdds} ${ROUTE_ADD} requests (expected ${expectedAdds}); plugin failures: ${failures}${firstFailure ? ` (first: ${firstFailure})` : ''}`,
      `- p50 plugin - p50 true = ${(plugin.p50 - trueRun.p50).toFixed(3)} ms as a runtime execs them, ${(pluginForked.p50 - trueForked.p50).toFixed(3)} ms with Node's spawn`,
      ...(failures > 0 || agentAdds !== expectedAdds ? ['WARNING: some plugin execs did not complete the ADD as expected'] : []),
      ...(ratio > TARGET_RATIO ? [`WARNING: plugin p50 is ${ratio.toFixed(2)}x /bin/true (target ${TARGET_RATIO}x)`] : []),
      `ratio_vs_true=${ratio.toFixed(2)}`,
      `plugin_add_p50_ms=${plugin.p50.toFixed(3)}`, // must stay the last line
    ];
    console.log(lines.join('\n'));
    writeLatest([`plugin_add_p50_ms=${plugin.p50.toFixed(3)}`]);
  } finally {
    if (server) {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server?.close(() => resolve()));
    }
    rmSync(runDir, { recursive: true, force: true });
  }
}

/** Kept for bench:node, which repeats every target line at the very end of `npm run bench`. */
function writeLatest(lines: string[]): void {
  writeResult('plugin-latest.json', `${JSON.stringify({ at: new Date().toISOString(), lines }, null, 2)}\n`);
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? (err.stack ?? err.message) : String(err));
  process.exitCode = 1;
});
