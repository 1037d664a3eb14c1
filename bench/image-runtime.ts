// The Node.js that runs the agent in the node benchmark: the one the image runs (Dockerfile: the
// node:24 base, the LTS) with the variables the image's final stage sets for Node and glibc
// (NODE_OPTIONS, the MALLOC_* variables, NODE_COMPILE_CACHE, whose cache is warmed here as the
// image's build warms its own), read from the Dockerfile itself so the two cannot drift. The
// binary is the pinned official release scripts/node-lts.mjs fetches once (the one
// `npm run test:node-lts` runs on).
// BENCH_AGENT_NODE=<path to node> runs the agent on another binary (e.g. this machine's Node 20,
// to compare); the image's variables are kept.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { projectRoot } from '../src/project-root.js';

export interface AgentRuntime {
  node: string;
  version: string;
  /** The image's variables for Node and glibc, NODE_COMPILE_CACHE pointing at this run's cache. */
  env: Record<string, string>;
  /** Where the binary came from, for the bench's notes. */
  source: string;
  /** Removes what was made for this run (the compile cache). */
  dispose(): void;
}

/** The variables for Node and glibc the image's final stage sets (`ENV NODE_...=`, `ENV MALLOC_...=`). */
export function imageNodeEnv(dockerfile: string): Record<string, string> {
  const stages = dockerfile.split(/^FROM\s/m);
  const final = stages[stages.length - 1] ?? '';
  const env: Record<string, string> = {};
  for (const line of final.split('\n')) {
    const m = /^ENV\s+((?:NODE|MALLOC)_\w+)=("[^"]*"|\S+)\s*$/.exec(line);
    if (m) env[m[1]!] = m[2]!.replace(/^"|"$/g, '');
  }
  return env;
}

function versionOf(node: string): string {
  return execFileSync(node, ['--version'], { encoding: 'utf8' }).trim();
}

/** The image's binary: the pinned LTS, or BENCH_AGENT_NODE, or (no registry to fetch it from) this machine's. */
function imageNode(root: string): Pick<AgentRuntime, 'node' | 'version' | 'source'> {
  const override = process.env['BENCH_AGENT_NODE'];
  if (override) return { node: override, version: versionOf(override), source: 'BENCH_AGENT_NODE' };
  try {
    const bin = execFileSync(process.execPath, [join(root, 'scripts', 'node-lts.mjs')], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'inherit'],
    }).trim();
    const node = join(bin, 'node');
    return { node, version: versionOf(node), source: "the image's Node (scripts/node-lts.mjs)" };
  } catch (err) {
    const why = err instanceof Error ? err.message.split('\n')[0] : String(err);
    return { node: process.execPath, version: process.version, source: `this machine's Node (the image's could not be fetched: ${why})` };
  }
}

/**
 * The image fills its compile cache at build time (Dockerfile: scripts/warm-compile-cache.mjs);
 * the bench does the same for its agent, in a directory of its own, with the agent's Node and
 * variables. A Node without a compile cache (20) runs without one, as it would in an image.
 */
function warmCompileCache(root: string, node: string, env: Record<string, string>): { dir?: string; note: string } {
  const dir = mkdtempSync(join(tmpdir(), 'ana-bench-compile-cache-'));
  try {
    const out = execFileSync(node, [join(root, 'scripts', 'warm-compile-cache.mjs'), root], {
      encoding: 'utf8',
      env: { ...env, NODE_COMPILE_CACHE: dir, PATH: process.env['PATH'] ?? '/usr/bin:/bin' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    return { dir, note: out.trim() };
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    const stderr = (err as { stderr?: string }).stderr?.trim();
    return { note: `no compile cache: ${stderr || (err as Error).message.split('\n')[0]}` };
  }
}

export function imageAgentRuntime(): AgentRuntime {
  const root = projectRoot();
  const env = imageNodeEnv(readFileSync(join(root, 'Dockerfile'), 'utf8'));
  const binary = imageNode(root);
  if (env['NODE_COMPILE_CACHE'] === undefined) return { ...binary, env, dispose: () => undefined };
  const { NODE_COMPILE_CACHE: _imagePath, ...rest } = env;
  const cache = warmCompileCache(root, binary.node, rest);
  const runEnv = cache.dir ? { ...rest, NODE_COMPILE_CACHE: cache.dir } : rest;
  return {
    ...binary,
    env: runEnv,
    source: `${binary.source}; ${cache.note}`,
    dispose: () => cache.dir && rmSync(cache.dir, { recursive: true, force: true }),
  };
}
