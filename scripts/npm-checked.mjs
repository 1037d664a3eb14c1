#!/usr/bin/env node
// Runs npm (argv only, no shell) and fails unless it really did its job. An npm that printed an
// error and still exited 0 was seen building the image, so the exit status alone is not trusted:
//   - a non-zero exit or a signal fails;
//   - a line npm prints for an error (`npm error ...`, `npm ERR! ...`) fails;
//   - after `ci` / `install` / `prune`, node_modules must hold every package package-lock.json
//     requires (right version), and `ci` must have written node_modules/.package-lock.json (npm
//     writes it last, once the tree is complete).
// Usage: node scripts/npm-checked.mjs ci --no-audit --no-fund
//        node scripts/npm-checked.mjs prune --omit=dev --no-audit --no-fund
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const args = process.argv.slice(2);
const NPM_ERROR_LINE = /^npm (error|ERR!)/m;

function runNpm(argv) {
  return new Promise((resolve) => {
    const child = spawn('npm', argv, { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (c) => {
      process.stdout.write(c);
      output += c;
    });
    child.stderr.on('data', (c) => {
      process.stderr.write(c);
      output += c;
    });
    child.on('error', (err) => resolve({ code: null, signal: null, output, spawnError: err.message }));
    child.on('close', (code, signal) => resolve({ code, signal, output }));
  });
}

/** What package-lock.json says must be in node_modules, given the --omit flags. */
function missingPackages(root, omitDev) {
  const lock = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8'));
  const problems = [];
  for (const [path, meta] of Object.entries(lock.packages ?? {})) {
    if (path === '' || !path.includes('node_modules/') || meta.link) continue;
    if (meta.optional) continue; // platform-specific packages npm may skip
    if (omitDev && (meta.dev || meta.devOptional)) continue;
    const manifest = join(root, path, 'package.json');
    if (!existsSync(manifest)) {
      problems.push(`${path} is missing`);
      continue;
    }
    const { version } = JSON.parse(readFileSync(manifest, 'utf8'));
    if (meta.version && version !== meta.version) problems.push(`${path} is ${version}, the lockfile says ${meta.version}`);
  }
  return problems;
}

const result = await runNpm(args);
const problems = [];
if (result.spawnError) problems.push(`could not start npm: ${result.spawnError}`);
if (result.signal) problems.push(`npm was killed by ${result.signal}`);
else if (result.code !== 0 && result.code !== null) problems.push(`npm exited with status ${result.code}`);
const errorLine = NPM_ERROR_LINE.exec(result.output);
if (errorLine) problems.push(`npm printed an error: ${result.output.slice(errorLine.index).split('\n')[0]}`);
const command = args.find((a) => !a.startsWith('-'));
if (problems.length === 0 && ['ci', 'install', 'i', 'prune'].includes(command)) {
  const root = process.cwd();
  const omitDev = args.includes('--omit=dev') || args.includes('--production');
  if (command === 'ci' && !existsSync(join(root, 'node_modules', '.package-lock.json')))
    problems.push('node_modules/.package-lock.json was not written: the install did not finish');
  const missing = missingPackages(root, omitDev);
  if (missing.length > 0)
    problems.push(
      `node_modules does not match package-lock.json: ${missing.slice(0, 10).join('; ')}${missing.length > 10 ? ` (and ${missing.length - 10} more)` : ''}`,
    );
}
if (problems.length > 0) {
  for (const p of problems) process.stderr.write(`npm-checked: npm ${args.join(' ')}: ${p}\n`);
  process.exit(1);
}
