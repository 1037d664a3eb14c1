// The addon's releaseFreeHeap (native/heap.cc) against the real C library: memory a process
// allocated and freed in small pieces stays in its RSS until the release hands it back. Run in a
// child process with --expose-gc, so the test owns the whole heap it measures.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { addonCandidates } from '../../src/addon/binding.js';
import { NativeNetAddon } from '../../src/addon/net-addon.js';

const dir = mkdtempSync(join(tmpdir(), 'heap-release-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('releaseFreeHeap (malloc_trim off the JS thread)', () => {
  it('hands the pages of freed small allocations back to the kernel', () => {
    const script = join(dir, 'fragment.mjs');
    writeFileSync(
      script,
      [
        `import { createRequire } from 'node:module';`,
        `const addon = createRequire(import.meta.url)(${JSON.stringify(addonCandidates().find((p) => existsSync(p)))});`,
        // 80 MB in 4 KB pieces (malloc's heap, below the mmap threshold), every 50th kept: the
        // arena cannot shrink from its top, so only a trim gives the rest back.
        `let keep = [], drop = [];`,
        `for (let i = 0; i < 20000; i++) (i % 50 === 0 ? keep : drop).push(new Uint8Array(4000).fill(1));`,
        `drop = null; globalThis.gc(); globalThis.gc();`,
        `await new Promise((resolve) => setTimeout(resolve, 100));`,
        `const before = process.memoryUsage().rss;`,
        `const result = await addon.releaseFreeHeap();`,
        `const after = process.memoryUsage().rss;`,
        `process.stdout.write(JSON.stringify({ ...result, before, after, kept: keep.length }));`,
      ].join('\n'),
    );
    // The image's glibc settings (Dockerfile): the release must work with them.
    const env = { ...process.env, MALLOC_ARENA_MAX: '2', MALLOC_TRIM_THRESHOLD_: '131072', MALLOC_MMAP_THRESHOLD_: '131072' };
    const out = spawnSync(process.execPath, ['--expose-gc', script], { encoding: 'utf8', env });
    expect(out.stderr).toBe('');
    const r = JSON.parse(out.stdout) as {
      released: boolean;
      freeBytes: number;
      arenaBytes: number;
      seconds: number;
      before: number;
      after: number;
    };
    expect(r.released).toBe(true);
    expect(r.freeBytes).toBeGreaterThan(60 << 20); // the dropped 78 MB were free in the arenas
    expect(r.freeBytes).toBeLessThanOrEqual(r.arenaBytes);
    expect(r.before - r.after).toBeGreaterThan(40 << 20); // and most of it left the RSS
    expect(r.seconds).toBeGreaterThan(0);
  });

  it('through the facade: a promise, settled with what the arenas held', async () => {
    const pending = new NativeNetAddon().releaseFreeHeap();
    expect(pending).toBeInstanceOf(Promise); // the trim runs on a libuv pool thread
    const result = await pending;
    expect(typeof result.released).toBe('boolean');
    expect(result.arenaBytes).toBeGreaterThan(0); // this process has a heap
    expect(result.freeBytes).toBeLessThanOrEqual(result.arenaBytes);
  });
});
