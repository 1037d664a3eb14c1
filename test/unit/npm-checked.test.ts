// scripts/npm-checked.mjs: npm's exit status alone is not trusted (an npm that printed an error
// and exited 0 was seen building the image). Driven with a stand-in `npm` first on PATH.
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { projectRoot } from '../../src/project-root.js';

const SCRIPT = join(projectRoot(import.meta.url), 'scripts', 'npm-checked.mjs');
const LOCK = {
  name: 'x',
  version: '1.0.0',
  lockfileVersion: 3,
  packages: {
    '': { name: 'x', version: '1.0.0' },
    'node_modules/a': { version: '1.2.3' },
    'node_modules/b': { version: '2.0.0', dev: true },
    'node_modules/fsevents': { version: '2.3.3', optional: true },
  },
};

describe('npm-checked', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'npm-checked-'));
    mkdirSync(join(dir, 'bin'));
    writeFileSync(join(dir, 'package-lock.json'), JSON.stringify(LOCK));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  /** A fake npm: prints `stderr`, installs `tree` (name -> version) and exits with `code`. */
  function fakeNpm(opts: { stderr?: string; code?: number; tree?: Record<string, string>; hiddenLock?: boolean }): void {
    const body = `#!/usr/bin/env node
const fs = require('fs'), path = require('path');
for (const [name, version] of Object.entries(${JSON.stringify(opts.tree ?? {})})) {
  fs.mkdirSync(path.join('node_modules', name), { recursive: true });
  fs.writeFileSync(path.join('node_modules', name, 'package.json'), JSON.stringify({ name, version }));
}
if (${opts.hiddenLock ?? true}) { fs.mkdirSync('node_modules', { recursive: true }); fs.writeFileSync('node_modules/.package-lock.json', '{}'); }
process.stderr.write(${JSON.stringify(opts.stderr ?? '')});
process.exit(${opts.code ?? 0});
`;
    writeFileSync(join(dir, 'bin', 'npm'), body);
    chmodSync(join(dir, 'bin', 'npm'), 0o755);
  }
  const check = (...args: string[]) =>
    spawnSync(process.execPath, [SCRIPT, ...args], {
      cwd: dir,
      encoding: 'utf8',
      env: { ...process.env, PATH: `${join(dir, 'bin')}:${process.env['PATH'] ?? ''}` },
    });

  it('passes when npm exits 0 quietly and node_modules matches the lockfile', () => {
    fakeNpm({ tree: { a: '1.2.3', b: '2.0.0' } });
    expect(check('ci', '--no-audit')).toMatchObject({ status: 0 });
  });

  it('fails on an npm error line even when npm exits 0', () => {
    fakeNpm({ tree: { a: '1.2.3', b: '2.0.0' }, stderr: 'npm error code ECONNRESET\nnpm error network aborted\n' });
    const r = check('ci');
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('npm-checked: npm ci: npm printed an error: npm error code ECONNRESET');
  });

  it('fails on a non-zero exit', () => {
    fakeNpm({ tree: { a: '1.2.3', b: '2.0.0' }, code: 3 });
    expect(check('ci').stderr).toContain('npm exited with status 3');
  });

  it('fails when packages are missing or at another version, and when ci did not finish', () => {
    fakeNpm({ tree: { a: '1.0.0' }, hiddenLock: false });
    const r = check('ci');
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('node_modules/.package-lock.json was not written');
    expect(r.stderr).toContain('node_modules/a is 1.0.0, the lockfile says 1.2.3');
    expect(r.stderr).toContain('node_modules/b is missing');
    expect(r.stderr).not.toContain('fsevents'); // optional: npm may skip it
  });

  it('prune --omit=dev needs only the production packages', () => {
    fakeNpm({ tree: { a: '1.2.3' } });
    expect(check('prune', '--omit=dev')).toMatchObject({ status: 0 });
  });
});
