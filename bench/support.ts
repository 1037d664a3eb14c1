// Helpers for the rule-install benchmark: throw-away network namespaces, exec'ing a tool with
// stdin, and percentile tables. Every external command is an argv array (no shell anywhere).
import { execFileSync, spawn } from 'node:child_process';

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

/** Runs `ip` with an argv array and fails loudly on a non-zero exit. */
export type IpRunner = (args: string[]) => Promise<void>;

export const ipViaExecFile: IpRunner = async (args) => {
  ip(args);
};

/**
 * Fresh namespaces named `<prefix><n>`, the prefix carrying our pid so that parallel runs and
 * other users' namespaces (tests, the host) are never touched. Every name is remembered before
 * it is created, so a half-created namespace is still cleaned up by destroyAll().
 */
export class NetnsPool {
  readonly prefix = `anabench${process.pid}-`;
  #next = 0;
  readonly #live = new Set<string>();

  constructor(private readonly runIp: IpRunner = ipViaExecFile) {}

  async create(): Promise<BenchNetns> {
    const name = `${this.prefix}${this.#next++}`;
    this.#live.add(name);
    await this.runIp(['netns', 'add', name]);
    // Pods always have lo up, and the local route in table 100 needs it.
    await this.runIp(['-n', name, 'link', 'set', 'lo', 'up']);
    return { name, path: `/run/netns/${name}` };
  }

  async destroy(ns: BenchNetns): Promise<void> {
    this.#live.delete(ns.name);
    await this.runIp(['netns', 'del', ns.name]);
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

/** Spawns argv (no shell), feeds `input` on stdin, resolves on exit 0, rejects with stderr otherwise. */
export function execTool(argv: readonly string[], input?: string): Promise<void> {
  const [file, ...args] = argv;
  if (file === undefined) return Promise.reject(new Error('execTool: empty argv'));
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { stdio: [input === undefined ? 'ignore' : 'pipe', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    child.on('error', reject);
    child.on('close', (code, signal) => {
      if (code === 0) return resolve();
      reject(new Error(`${argv.join(' ')} exited with ${code ?? signal}: ${stderr.trim()}`));
    });
    // A child that dies before reading stdin gives EPIPE here; its exit status says why.
    child.stdin?.on('error', () => undefined);
    child.stdin?.end(input);
  });
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
