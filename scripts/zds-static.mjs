#!/usr/bin/env node
// Generates src/zds/zds-static.js (+ .d.ts) from src/zds/zds.proto with protobufjs's own code
// generator (protobufjs-cli: pbjs, then pbts for the types). The agent loads that static code on
// protobufjs/minimal at start instead of parsing the .proto and generating its codecs at run time
// (~35-50 ms of a restarted agent's start on Node 24, before it can serve ztunnel). The output is
// committed; test/unit/zds-static.test.ts regenerates it and fails when it differs.
//
// Usage: node scripts/zds-static.mjs [out-dir]      (default: src/zds)
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const outDir = process.argv[2] ?? join(root, 'src', 'zds');
const bin = (name) => join(root, 'node_modules', '.bin', name);
const js = join(outDir, 'zds-static.js');

execFileSync(
  bin('pbjs'),
  [
    '--target',
    'static-module',
    '--wrap',
    'es6',
    // Node's ES loader needs the file name: protobufjs has no exports map.
    '--dependency',
    'protobufjs/minimal.js',
    // Only what codec.ts uses: encode and decode (strictness is codec.ts's own, as prost's).
    '--no-create',
    '--no-verify',
    '--no-convert',
    '--no-delimited',
    '--no-typeurl',
    '--no-service',
    '--out',
    js,
    join(root, 'src', 'zds', 'zds.proto'),
  ],
  { stdio: 'inherit' },
);
execFileSync(bin('pbts'), ['--no-comments', '--out', join(outDir, 'zds-static.d.ts'), js], { stdio: 'inherit' });
