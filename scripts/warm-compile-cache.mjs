#!/usr/bin/env node
// Fills Node's on-disk compile cache (NODE_COMPILE_CACHE, Node >= 22.1) with every module the
// agent can load: dist/src and, through it, the production node_modules it imports. The agent
// started later with the same Node, the same NODE_OPTIONS and the same NODE_COMPILE_CACHE reads
// V8's code for its modules from there instead of compiling them: ~20 ms of a restarted
// standalone agent's start on Node 24, ~60-70 ms more where it loads the Kubernetes client
// (README, "The image").
// The image runs it at build time (Dockerfile); the node benchmark runs it for the agent it starts.
// Nothing runs: modules are imported only (cli/main.js starts a command only as the entry point).
// Usage: NODE_COMPILE_CACHE=<dir> node scripts/warm-compile-cache.mjs [app root, default: this repo]
import { readdirSync } from 'node:fs';
import module from 'node:module';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = resolve(process.argv[2] ?? join(dirname(fileURLToPath(import.meta.url)), '..'));
if (!process.env['NODE_COMPILE_CACHE'] || typeof module.flushCompileCache !== 'function') {
  process.stderr.write(`warm-compile-cache: needs NODE_COMPILE_CACHE and Node >= 22.1 (this is ${process.version})\n`);
  process.exit(1);
}
const status = module.getCompileCacheDir?.();
if (!status) {
  process.stderr.write(`warm-compile-cache: Node did not enable its compile cache in ${process.env['NODE_COMPILE_CACHE']}\n`);
  process.exit(1);
}

function modules(dir) {
  return readdirSync(dir, { withFileTypes: true })
    .sort((a, b) => a.name.localeCompare(b.name))
    .flatMap((e) => (e.isDirectory() ? modules(join(dir, e.name)) : e.name.endsWith('.js') ? [join(dir, e.name)] : []));
}

// A module that imports a dev-only package (the demo's CRI client, @grpc/grpc-js) cannot load
// where only the production node_modules are (the image): it is named and left out. Any other
// failure is an error.
const files = modules(join(root, 'dist', 'src'));
const skipped = [];
for (const file of files) {
  try {
    await import(pathToFileURL(file).href);
  } catch (err) {
    const missing = err?.code === 'ERR_MODULE_NOT_FOUND' && /Cannot find package '([^']+)'/.exec(err.message)?.[1];
    if (!missing) throw err;
    skipped.push(`${relative(root, file)} (needs ${missing})`);
  }
}
module.flushCompileCache();
process.stdout.write(
  `warm-compile-cache: ${files.length - skipped.length} modules of ${root} (and what they import) cached in ${status}` +
    (skipped.length ? `; left out: ${skipped.join(', ')}` : '') +
    '\n',
);
