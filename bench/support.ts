// Helpers for the benchmarks: throw-away network namespaces, exec'ing a tool with stdin,
// percentile tables and the results folder. Every external command is an argv array (no shell
// anywhere).
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { NetAddon, NetnsHandle } from '../src/addon/net-addon.js';
import { projectRoot } from '../src/project-root.js';

/** A file of bench/results/, where every bench keeps its latest run. */
export function resultPath(name: string): string {
  return join(projectRoot(), 'bench', 'results', name);
}

/** Writes (replaces) a file of bench/results/, creating the folder if needed. */
export function writeResult(name: string, text: string): void {
  const path = resultPath(name);
  mkdirSync(join(path, '..'), { recursive: true });
  writeFileSync(path, text);
}

export interface BenchNetns {
  name: string;
  path: string;
}

export function ip(args: string[]): string {
  return execFileSync('ip', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

/** Runs a tool inside the namespace with `ip netns exec` (only for untimed checks). */
export function execIn(ns: BenchNetns, argv: string[]): string {
  return ip(['netns', 'exec', ns.name, ...argv]);
}

/**
 * Fresh namespaces named `<prefix><n>`, the prefix carrying our pid so that parallel runs and
 * other users' namespaces (tests, the host) are never touched. Every name is remembered before
 * it is created, so a half-created namespace is still cleaned up by destroyAll().
 */
export class NetnsPool {
  readonly prefix = `anabench${process.pid}-`;
  #next = 0;
  readonly #live = new Set<string>();

  async create(): Promise<BenchNetns> {
    const name = `${this.prefix}${this.#next++}`;
    this.#live.add(name);
    await execTool(['ip', 'netns', 'add', name]);
    // Pods always have lo up, and the local route in table 100 needs it.
    await execTool(['ip', '-n', name, 'link', 'set', 'lo', 'up']);
    return { name, path: `/run/netns/${name}` };
  }

  async destroy(ns: BenchNetns): Promise<void> {
    this.#live.delete(ns.name);
    await execTool(['ip', 'netns', 'del', ns.name]);
  }

  /** Best effort and synchronous: runs from exit/signal handlers, where throwing would only hide the rest. */
  destroyAll(): void {
    for (const name of [...this.#live]) {
      this.#live.delete(name);
      try {
        ip(['netns', 'del', name]);
      } catch {
        // never created, or already gone
      }
    }
  }

  /** Namespaces with our prefix that still exist (should be none at the end). */
  leftovers(): string[] {
    return ip(['netns', 'list'])
      .split('\n')
      .map((line) => line.split(' ')[0] ?? '')
      .filter((name) => name.startsWith(this.prefix));
  }
}

/**
 * One fresh namespace per sample of a round, all created before the round's first timed sample
 * and deleted after its last. Created and deleted around each sample, every timed mechanism ran
 * right after two `ip` processes and right after the previous sample's `ip netns del`, whose
 * teardown the kernel finishes asynchronously (cleanup_net on a kworker, on the same two CPUs):
 * harness work next to each sample that no agent does per pod. Every mechanism gets the same
 * treatment, so the rows stay side by side.
 */
export async function inRoundOfNamespaces<T>(pool: NetnsPool, count: number, work: (namespaces: BenchNetns[]) => Promise<T>): Promise<T> {
  const namespaces: BenchNetns[] = [];
  try {
    for (let i = 0; i < count; i++) namespaces.push(await pool.create());
    return await work(namespaces);
  } finally {
    for (const ns of namespaces) await pool.destroy(ns);
  }
}

/**
 * Where the benchmark's child processes come from. Node's child_process forks, and a fork leaves
 * every page of this process copy-on-write until touched again, so whatever runs next in-process
 * pays page faults that no agent pays. Go (Istio) spawns with clone(CLONE_VM|CLONE_VFORK), and so
 * does glibc's posix_spawn, which is what the addon's exec step uses. Running every spawn through
 * it, from an addon thread in the host namespace, models Istio's exec faithfully and keeps the
 * in-process rows free of that artefact.
 */
let spawner: { addon: NetAddon; host: NetnsHandle } | undefined;

export function useAddonSpawner(addon: NetAddon): NetnsHandle {
  const host = addon.openNetns('/proc/self/ns/net');
  spawner = { addon, host };
  return host;
}

/** Spawns argv (no shell), feeds `input` on stdin, resolves on exit 0, rejects with stderr otherwise. */
export async function execTool(argv: readonly string[], input?: string): Promise<void> {
  if (!spawner) throw new Error('execTool: call useAddonSpawner() first');
  const [result] = await spawner.addon.run(spawner.host, [
    { op: 'exec', argv: [...argv], ...(input !== undefined ? { input } : {}), timeoutMs: 30_000 },
  ] as const);
  if (result.exitCode !== 0) {
    throw new Error(`${argv.join(' ')} exited with ${result.exitCode} (signal ${result.signal}): ${result.stderr.trim()}`);
  }
}

export function elapsedMs(start: bigint): number {
  return Number(process.hrtime.bigint() - start) / 1e6;
}

export async function timeMs(work: () => Promise<unknown> | unknown): Promise<number> {
  const start = process.hrtime.bigint();
  await work();
  return elapsedMs(start);
}

export interface Summary {
  n: number;
  p50: number;
  p90: number;
  p99: number;
  mean: number;
  max: number;
}

/** Percentile with linear interpolation between the two nearest ranks. */
function percentile(sorted: readonly number[], p: number): number {
  const pos = (sorted.length - 1) * p;
  const lo = Math.floor(pos);
  const hi = Math.min(lo + 1, sorted.length - 1);
  const a = sorted[lo] ?? NaN;
  const b = sorted[hi] ?? NaN;
  return a + (b - a) * (pos - lo);
}

export function summarize(samples: readonly number[]): Summary {
  const sorted = [...samples].sort((a, b) => a - b);
  const mean = sorted.reduce((sum, x) => sum + x, 0) / sorted.length;
  return {
    n: sorted.length,
    p50: percentile(sorted, 0.5),
    p90: percentile(sorted, 0.9),
    p99: percentile(sorted, 0.99),
    mean,
    max: sorted[sorted.length - 1] ?? NaN,
  };
}

/** Plain-text table: first column left-aligned, the rest right-aligned. */
export function formatTable(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]): string =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i] ?? 0) : c.padStart(widths[i] ?? 0))).join('  ');
  const rule = widths.map((w) => '-'.repeat(w)).join('  ');
  return [line(header), rule, ...rows.map(line)].join('\n');
}

export function summaryRow(label: string, s: Summary, digits = 3): string[] {
  return [label, String(s.n), ...[s.p50, s.p90, s.p99, s.mean].map((x) => x.toFixed(digits))];
}
