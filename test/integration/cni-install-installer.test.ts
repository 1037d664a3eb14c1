// The installer against real temp directories (no root needed): atomic binary copy, chaining
// with Istio's exact output, waiting for a config, re-chaining after other writers, uninstall.

import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { afterEach, beforeEach, describe, expect, it } from 'vitest';

import { CniInstaller, type CniInstallerOptions } from '../../src/cni-install/installer.js';
import { istioGoldenUrl } from '../fixtures/istio-golden.js';
import { ISTIO_INTEGRATION_SETTINGS, ISTIO_UNIT_SETTINGS } from '../helpers/istio-install-settings.js';

const GOLDEN = istioGoldenUrl('install/');
if (!existsSync(GOLDEN)) {
  throw new Error(`Istio installer golden files not found at ${fileURLToPath(GOLDEN)}`);
}
const golden = (name: string): string => readFileSync(new URL(name, GOLDEN), 'utf8');

/** cni/test/install_cni.go settings: the pre/ → expected/ goldens. */
const SETTINGS = ISTIO_INTEGRATION_SETTINGS;
/** cni/pkg/install unit-test settings (ambient on for the Istio-owned goldens). */
const UNIT_SETTINGS = ISTIO_UNIT_SETTINGS;

async function waitFor(cond: () => boolean, timeoutMs: number, what: string): Promise<number> {
  const start = Date.now();
  for (;;) {
    if (cond()) return Date.now() - start;
    if (Date.now() - start > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const readOr = (p: string): string | null => (existsSync(p) ? readFileSync(p, 'utf8') : null);

function snapshot(dir: string): Record<string, { text: string; mode: number }> {
  return Object.fromEntries(
    readdirSync(dir)
      .sort()
      .map((n) => {
        const p = join(dir, n);
        return [n, { text: statSync(p).isDirectory() ? '<dir>' : readFileSync(p, 'utf8'), mode: statSync(p).mode & 0o7777 }];
      }),
  );
}

describe('CniInstaller', () => {
  let root: string;
  let binDir: string;
  let confDir: string;
  let pluginSource: string;
  const controllers: AbortController[] = [];
  const watches: Promise<void>[] = [];

  const make = (extra: Partial<CniInstallerOptions> = {}): CniInstaller =>
    new CniInstaller({ binDir, confDir, pluginSource, settings: SETTINGS, ...extra });

  const startWatch = (inst: CniInstaller, onChange?: (r: boolean) => void): AbortController => {
    const ac = new AbortController();
    controllers.push(ac);
    watches.push(inst.watch(ac.signal, onChange));
    return ac;
  };

  beforeEach(() => {
    root = mkdtempSync(join(tmpdir(), 'cni-install-'));
    binDir = join(root, 'bin');
    confDir = join(root, 'net.d');
    mkdirSync(binDir);
    mkdirSync(confDir);
    pluginSource = join(root, 'istio-cni-built');
    writeFileSync(pluginSource, Buffer.from('\x7fELF fake plugin v1\n'), { mode: 0o644 });
  });

  afterEach(async () => {
    for (const ac of controllers.splice(0)) ac.abort();
    await Promise.all(watches.splice(0));
    rmSync(root, { recursive: true, force: true });
  });

  describe('binary', () => {
    it('copies atomically with mode 0755, only when the content differs, after removing stale temp files', async () => {
      writeFileSync(join(binDir, 'istio-cni.tmp.123456'), 'partial');
      writeFileSync(join(binDir, 'istio-cni.tmp.abcdef'), 'partial');
      writeFileSync(join(binDir, 'other-plugin.tmp.1'), 'not ours');
      const inst = make();
      expect(await inst.installBinary()).toBe(true);
      const target = join(binDir, 'istio-cni');
      expect(readFileSync(target)).toEqual(readFileSync(pluginSource));
      expect(statSync(target).mode & 0o7777).toBe(0o755);
      expect(readdirSync(binDir).sort()).toEqual(['istio-cni', 'other-plugin.tmp.1']);

      const before = statSync(target);
      expect(await inst.installBinary()).toBe(false);
      // A fresh installer (agent restart) compares the content and still does not write.
      expect(await make().installBinary()).toBe(false);
      const after = statSync(target);
      expect([after.ino, after.mtimeMs]).toEqual([before.ino, before.mtimeMs]);

      writeFileSync(pluginSource, 'new build');
      expect(await make().installBinary()).toBe(true);
      expect(readFileSync(target, 'utf8')).toBe('new build');
      expect(statSync(target).ino).not.toBe(before.ino); // replaced by rename, not rewritten in place
    });

    it('fixes the mode of an identical binary without rewriting it', async () => {
      const target = join(binDir, 'istio-cni');
      writeFileSync(target, readFileSync(pluginSource));
      chmodSync(target, 0o600);
      const ino = statSync(target).ino;
      expect(await make().installBinary()).toBe(true);
      expect(statSync(target).mode & 0o7777).toBe(0o755);
      expect(statSync(target).ino).toBe(ino);
    });
  });

  describe('config', () => {
    it('chains into a conflist, byte-identical to Istio, keeping the file mode', async () => {
      writeFileSync(join(confDir, '10-calico.conflist'), golden('pre/calico.conflist'));
      chmodSync(join(confDir, '10-calico.conflist'), 0o640);
      const inst = make();
      const r = await inst.install();
      expect(r).toEqual({ file: join(confDir, '10-calico.conflist'), changed: true, binaryChanged: true });
      expect(readFileSync(r.file, 'utf8')).toBe(golden('expected/10-calico.conflist-istioconfig'));
      expect(statSync(r.file).mode & 0o7777).toBe(0o640);
      expect(inst.ready).toBe(true);
      expect(await inst.check()).toBe(true);
      expect(readdirSync(confDir)).toEqual(['10-calico.conflist']); // no temp files left
    });

    it('turns a .conf into a .conflist (mode kept, old .conf removed)', async () => {
      writeFileSync(join(confDir, '00-minikube_cni.conf'), golden('pre/minikube_cni.conf'));
      chmodSync(join(confDir, '00-minikube_cni.conf'), 0o644);
      const r = await make().install();
      expect(r.file).toBe(join(confDir, '00-minikube_cni.conflist'));
      expect(readdirSync(confDir)).toEqual(['00-minikube_cni.conflist']);
      expect(readFileSync(r.file, 'utf8')).toBe(golden('expected/minikube_cni.conflist.expected'));
      expect(statSync(r.file).mode & 0o7777).toBe(0o644);
    });

    it('skips malformed and invalid files when choosing the primary', async () => {
      writeFileSync(join(confDir, '00-non_json.conf'), golden('pre/non_json.conf'));
      writeFileSync(join(confDir, '01-bad_minikube_cni.conf'), golden('pre/bad_minikube_cni.conf'));
      writeFileSync(join(confDir, '02-noname_calico.conflist'), golden('pre/noname_calico.conflist'));
      writeFileSync(join(confDir, '03-calico.conflist'), golden('pre/calico.conflist'));
      writeFileSync(join(confDir, '04-minikube_cni.conf'), golden('pre/minikube_cni.conf'));
      mkdirSync(join(confDir, '00-a-directory.conf'));
      const before = snapshot(confDir);
      const r = await make().install();
      expect(r.file).toBe(join(confDir, '03-calico.conflist'));
      expect(readFileSync(r.file, 'utf8')).toBe(golden('expected/10-calico.conflist-istioconfig'));
      const after = snapshot(confDir);
      expect({ ...after, '03-calico.conflist': null }).toEqual({ ...before, '03-calico.conflist': null });
    });

    it('honours CNI_CONF_NAME, following a .conf that became .conflist', async () => {
      writeFileSync(join(confDir, '00-calico.conflist'), golden('pre/calico.conflist'));
      writeFileSync(join(confDir, '05-minikube.conf'), golden('pre/minikube_cni.conf'));
      const r = await make({ confName: '05-minikube.conf' }).install();
      expect(r.file).toBe(join(confDir, '05-minikube.conflist'));
      expect(readFileSync(join(confDir, '00-calico.conflist'), 'utf8')).toBe(golden('pre/calico.conflist'));
      const again = await make({ confName: '05-minikube.conf' }).install();
      expect(again).toMatchObject({ file: join(confDir, '05-minikube.conflist'), changed: false });
    });

    it('is idempotent: a second install changes nothing', async () => {
      writeFileSync(join(confDir, '10-calico.conflist'), golden('pre/calico.conflist'));
      await make().install();
      const conf = statSync(join(confDir, '10-calico.conflist'));
      const bin = statSync(join(binDir, 'istio-cni'));
      const before = snapshot(confDir);
      const r = await make().install();
      expect(r).toMatchObject({ changed: false, binaryChanged: false });
      expect(snapshot(confDir)).toEqual(before);
      expect(statSync(join(confDir, '10-calico.conflist'))).toMatchObject({ ino: conf.ino, mtimeMs: conf.mtimeMs });
      expect(statSync(join(binDir, 'istio-cni'))).toMatchObject({ ino: bin.ino, mtimeMs: bin.mtimeMs });
    });

    it('does not rewrite a file that already has our entry but other formatting', async () => {
      const compact = JSON.stringify(JSON.parse(golden('expected/10-calico.conflist-istioconfig')));
      writeFileSync(join(confDir, '10-calico.conflist'), compact);
      expect((await make().install()).changed).toBe(false);
      expect(readFileSync(join(confDir, '10-calico.conflist'), 'utf8')).toBe(compact);
    });

    it('waits for a config that appears later', async () => {
      const inst = make({ recheckIntervalMs: 5000 });
      let done = false;
      const p = inst.install().then((r) => {
        done = true;
        return r;
      });
      await new Promise((r) => setTimeout(r, 300));
      expect(done).toBe(false);
      expect(inst.ready).toBe(false);
      writeFileSync(join(confDir, 'not-a-config.txt'), 'x');
      writeFileSync(join(confDir, '00-broken.conflist'), '{"name": "x"}');
      await new Promise((r) => setTimeout(r, 200));
      expect(done).toBe(false);
      const t0 = Date.now();
      writeFileSync(join(confDir, 'calico.conflist'), golden('pre/calico.conflist'));
      const r = await p;
      expect(Date.now() - t0).toBeLessThan(1000); // woken by fs.watch, not the 5 s re-check
      expect(r.file).toBe(join(confDir, 'calico.conflist'));
      expect(readFileSync(r.file, 'utf8')).toBe(golden('expected/10-calico.conflist-istioconfig'));
      expect(inst.ready).toBe(true);
    });

    it('waits for the conf dir itself to appear (periodic re-check)', async () => {
      rmSync(confDir, { recursive: true });
      const p = make({ recheckIntervalMs: 100 }).chainConfig();
      await new Promise((r) => setTimeout(r, 250));
      mkdirSync(confDir);
      writeFileSync(join(confDir, '10-calico.conflist'), golden('pre/calico.conflist'));
      expect((await p).file).toBe(join(confDir, '10-calico.conflist'));
    });

    it('stops waiting when aborted', async () => {
      const ac = new AbortController();
      const p = make().chainConfig(ac.signal);
      setTimeout(() => ac.abort(new Error('shutting down')), 100);
      await expect(p).rejects.toThrow('shutting down');
    });
  });

  describe('watch', () => {
    it('re-chains within a second after another writer rewrites the file without our entry', async () => {
      const file = join(confDir, '10-calico.conflist');
      writeFileSync(file, golden('pre/calico.conflist'));
      const inst = make();
      await inst.install();
      const changes: boolean[] = [];
      startWatch(inst, (r) => changes.push(r));
      await new Promise((r) => setTimeout(r, 200));
      expect(changes).toEqual([true]);

      // In place (truncate + write), as a naive CNI agent does.
      writeFileSync(file, golden('pre/calico.conflist'));
      const took = await waitFor(() => readOr(file) === golden('expected/10-calico.conflist-istioconfig'), 1000, 're-chain after rewrite');
      expect(took).toBeLessThan(1000);

      // Atomic replacement (temp + rename), as a careful one does.
      writeFileSync(join(confDir, 'tmpfile'), golden('pre/calico.conflist'));
      renameSync(join(confDir, 'tmpfile'), file);
      await waitFor(() => readOr(file) === golden('expected/10-calico.conflist-istioconfig'), 1000, 're-chain after rename');
      await waitFor(() => changes.at(-1) === true, 1000, 'ready again');
      expect(changes.filter((c) => !c).length).toBeGreaterThanOrEqual(1); // readiness followed the drift
      expect(inst.ready).toBe(true);
    });

    it('re-chains after the file is deleted and recreated, not ready in between', async () => {
      const file = join(confDir, '10-calico.conflist');
      writeFileSync(file, golden('pre/calico.conflist'));
      const inst = make();
      await inst.install();
      const changes: boolean[] = [];
      startWatch(inst, (r) => changes.push(r));
      unlinkSync(file);
      await waitFor(() => !inst.ready, 1000, 'not ready after deletion');
      await new Promise((r) => setTimeout(r, 200));
      expect(existsSync(file)).toBe(false); // nothing to chain into: nothing is written
      writeFileSync(file, golden('pre/calico.conflist'));
      await waitFor(() => readOr(file) === golden('expected/10-calico.conflist-istioconfig'), 1000, 're-chain after recreation');
      await waitFor(() => inst.ready, 1000, 'ready after recreation');
      expect(changes).toEqual([true, false, true]);
    });

    it('moves to a new higher-priority config and puts back a removed binary', async () => {
      writeFileSync(join(confDir, '20-calico.conflist'), golden('pre/calico.conflist'));
      const inst = make();
      await inst.install();
      startWatch(inst);
      writeFileSync(join(confDir, '05-minikube.conf'), golden('pre/minikube_cni.conf'));
      await waitFor(
        () => readOr(join(confDir, '05-minikube.conflist')) === golden('expected/minikube_cni.conflist.expected'),
        1000,
        'chain into the new primary',
      );
      await waitFor(() => !existsSync(join(confDir, '05-minikube.conf')), 1000, 'old .conf removed');
      unlinkSync(join(binDir, 'istio-cni'));
      await waitFor(() => existsSync(join(binDir, 'istio-cni')), 1000, 'binary re-installed');
      expect(statSync(join(binDir, 'istio-cni')).mode & 0o7777).toBe(0o755);

      // Uninstall cleans both configs it chained into.
      controllers.splice(0).forEach((c) => c.abort());
      await Promise.all(watches.splice(0));
      await inst.uninstall();
      expect(readFileSync(join(confDir, '20-calico.conflist'), 'utf8')).toBe(golden('pre/calico.conflist'));
      expect(readFileSync(join(confDir, '05-minikube.conflist'), 'utf8')).toBe(golden('expected/minikube_cni.conflist.clean'));
    });

    it('does not fight over formatting: its own writes settle', async () => {
      const file = join(confDir, '10-calico.conflist');
      writeFileSync(file, golden('pre/calico.conflist'));
      const inst = make({ recheckIntervalMs: 100 });
      await inst.install();
      startWatch(inst);
      const m = statSync(file).mtimeMs;
      await new Promise((r) => setTimeout(r, 500));
      expect(statSync(file).mtimeMs).toBe(m);
      expect(inst.ready).toBe(true);
    });
  });

  describe('uninstall', () => {
    it('leaves the conf dir byte-identical for a conflist and removes the binary; idempotent', async () => {
      writeFileSync(join(confDir, '10-calico.conflist'), golden('pre/calico.conflist'));
      writeFileSync(join(confDir, '20-other.conflist'), golden('list.conflist')); // not Go-formatted, never touched
      writeFileSync(join(binDir, 'bridge'), 'another plugin');
      const before = snapshot(confDir);
      const inst = make();
      await inst.install();
      expect(await inst.uninstall()).toEqual({ rewritten: [join(confDir, '10-calico.conflist')], removed: [join(binDir, 'istio-cni')] });
      expect(snapshot(confDir)).toEqual(before);
      expect(readdirSync(binDir)).toEqual(['bridge']);
      expect(inst.ready).toBe(false);
      expect(await inst.uninstall()).toEqual({ rewritten: [], removed: [] });
      expect(await make().uninstall()).toEqual({ rewritten: [], removed: [] });
      expect(snapshot(confDir)).toEqual(before);
    });

    it('restores a non-Go-formatted conflist byte for byte when it is unchanged since install', async () => {
      writeFileSync(join(confDir, '10-list.conflist'), golden('list.conflist'));
      const before = snapshot(confDir);
      const inst = make({ settings: UNIT_SETTINGS });
      await inst.install();
      expect(readFileSync(join(confDir, '10-list.conflist'), 'utf8')).toBe(golden('list.conflist.golden'));
      await inst.uninstall();
      expect(snapshot(confDir)).toEqual(before);
    });

    it('from another process (the uninstall command): removes our entry, Go-formatted like Istio', async () => {
      writeFileSync(join(confDir, '10-list.conflist'), golden('list-with-istio.conflist'));
      chmodSync(join(confDir, '10-list.conflist'), 0o600);
      await make({ settings: UNIT_SETTINGS }).install();
      const r = await make({ settings: UNIT_SETTINGS }).uninstall();
      expect(r.rewritten).toEqual([join(confDir, '10-list.conflist')]);
      expect(readFileSync(join(confDir, '10-list.conflist'), 'utf8')).toBe(golden('list-no-istio.conflist'));
      expect(statSync(join(confDir, '10-list.conflist')).mode & 0o7777).toBe(0o600);
    });

    it("a converted .conf stays a .conflist without our entry (Istio's minikube_cni.conflist.clean)", async () => {
      writeFileSync(join(confDir, '00-minikube_cni.conf'), golden('pre/minikube_cni.conf'));
      const inst = make();
      await inst.install();
      await inst.uninstall();
      expect(readdirSync(confDir)).toEqual(['00-minikube_cni.conflist']);
      expect(readFileSync(join(confDir, '00-minikube_cni.conflist'), 'utf8')).toBe(golden('expected/minikube_cni.conflist.clean'));
    });

    it('after uninstall a running watch no longer re-adds the entry', async () => {
      writeFileSync(join(confDir, '10-calico.conflist'), golden('pre/calico.conflist'));
      const inst = make({ recheckIntervalMs: 100 });
      await inst.install();
      startWatch(inst);
      await inst.uninstall();
      await new Promise((r) => setTimeout(r, 400));
      expect(readFileSync(join(confDir, '10-calico.conflist'), 'utf8')).toBe(golden('pre/calico.conflist'));
      expect(existsSync(join(binDir, 'istio-cni'))).toBe(false);
    });
  });

  describe('Istio-owned and standalone configs', () => {
    it('Istio-owned: writes 02-istio-cni.conflist from the primary and leaves the primary untouched', async () => {
      writeFileSync(join(confDir, 'bridge.conf'), golden('bridge.conf'));
      writeFileSync(join(confDir, 'list.conflist'), golden('list.conflist'));
      const before = snapshot(confDir);
      const settings = { ...UNIT_SETTINGS, ambientEnabled: true };
      const inst = make({ settings, istioOwnedConfig: true, confName: 'list.conflist' });
      const r = await inst.install();
      expect(r.file).toBe(join(confDir, '02-istio-cni.conflist'));
      expect(readFileSync(r.file, 'utf8')).toBe(golden('istio-owned.conflist.golden'));
      expect(statSync(r.file).mode & 0o7777).toBe(0o600);
      expect({ ...snapshot(confDir), '02-istio-cni.conflist': undefined }).toEqual({ ...before, '02-istio-cni.conflist': undefined });
      expect(inst.ready).toBe(true);

      // The copy follows the primary.
      startWatch(inst);
      writeFileSync(join(confDir, 'list.conflist'), golden('bridge.conf').replace('"type": "bridge"', '"plugins": [{"type": "bridge"}]'));
      await waitFor(
        () => (readOr(r.file) ?? '').includes('"plugins"') && !(readOr(r.file) ?? '').includes('tuning'),
        1000,
        'owned copy updated',
      );

      controllers.splice(0).forEach((c) => c.abort());
      await Promise.all(watches.splice(0));
      await inst.uninstall();
      expect(existsSync(r.file)).toBe(false);
    });

    it('Istio-owned from a .conf primary: istio-owned-bridge.conflist.golden', async () => {
      writeFileSync(join(confDir, 'bridge.conf'), golden('bridge.conf'));
      const inst = make({ settings: { ...UNIT_SETTINGS, ambientEnabled: true }, istioOwnedConfig: true });
      const r = await inst.install();
      expect(readFileSync(r.file, 'utf8')).toBe(golden('istio-owned-bridge.conflist.golden'));
      expect(readFileSync(join(confDir, 'bridge.conf'), 'utf8')).toBe(golden('bridge.conf'));
    });

    it('Istio-owned but sorting after the primary: written, yet not ready', async () => {
      writeFileSync(join(confDir, '01-bridge.conf'), golden('bridge.conf'));
      const inst = make({ settings: UNIT_SETTINGS, istioOwnedConfig: '99-istio.conflist' });
      await inst.install();
      expect(existsSync(join(confDir, '99-istio.conflist'))).toBe(true);
      expect(inst.ready).toBe(false);
    });

    it('refuses an Istio-owned name the runtime would not read as a list', () => {
      expect(() => make({ istioOwnedConfig: '02-istio.conf' })).toThrow(TypeError);
      expect(() => make({ istioOwnedConfig: '../02-istio.conflist' })).toThrow(TypeError);
    });

    it('standalone: YYY-istio-cni.conf byte-identical to Istio, removed on uninstall', async () => {
      const inst = make({ chained: false });
      const r = await inst.install();
      expect(r.file).toBe(join(confDir, 'YYY-istio-cni.conf'));
      expect(readFileSync(r.file, 'utf8')).toBe(golden('expected/YYY-istio-cni.conf'));
      await inst.uninstall();
      expect(readdirSync(confDir)).toEqual([]);
    });
  });
});
