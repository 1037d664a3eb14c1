// "No shell anywhere": nothing the project ships or runs builds a command line for a shell.
// Checked on the source itself, so a new `exec("...")` or `shell: true` fails the suite.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { projectRoot } from '../../src/project-root.js';

const ROOT = projectRoot(import.meta.url);
const SCANNED = ['src', 'native', 'bench', 'scripts', 'test'];
const EXTENSIONS = /\.(ts|mjs|cc|h|sh)$/;
/** This file spells the patterns out. */
const SELF = 'test/unit/no-shell.test.ts';

const FORBIDDEN: Array<[RegExp, string]> = [
  [/\bshell\s*:\s*true\b/, 'child_process option shell: true'],
  [/\b(execSync|exec)\s*\(\s*[`'"]/, 'child_process exec with a command string'],
  [/import\s*\{[^}]*\bexec\b(?!File|Sync)[^}]*\}\s*from\s*['"](node:)?child_process['"]/, 'importing child_process.exec'],
  [/\bspawn(Sync)?\(\s*['"`](ba|da|z)?sh['"`]/, 'spawning a shell'],
  [/\[\s*['"`](\/bin\/)?(ba|da)?sh['"`]\s*,\s*['"`]-c['"`]/, 'an argv that runs `sh -c`'],
  [/\b(system|popen)\s*\(/, 'C library system()/popen()'],
  [/\bbash\s+-c\b|\bsh\s+-c\b|\beval\s+"/, 'a shell -c / eval in a script'],
];

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? files(path) : EXTENSIONS.test(name) ? [path] : [];
  });
}

describe('no shell anywhere', () => {
  const all = SCANNED.flatMap((d) => files(join(ROOT, d))).filter((p) => relative(ROOT, p) !== SELF);

  it('scans the shipped and test-support sources', () => {
    expect(all.length).toBeGreaterThan(50);
  });

  it.each(FORBIDDEN.map(([re, what]) => [what, re] as const))('has no %s', (_what, re) => {
    const hits = all.flatMap((path) =>
      readFileSync(path, 'utf8')
        .split('\n')
        .flatMap((line, i) => (re.test(line) && !/^\s*(\/\/|#|\*)/.test(line) ? [`${relative(ROOT, path)}:${i + 1}: ${line.trim()}`] : [])),
    );
    expect(hits).toEqual([]);
  });
});
