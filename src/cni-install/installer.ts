// The installer half of the node agent (Istio: cni/pkg/install): puts the istio-cni plugin
// binary into the host's CNI bin dir and chains the `istio-cni` entry into the primary CNI
// config, keeps both in place while the agent runs, and removes them on a real uninstall.

import { type FSWatcher, statSync, watch as fsWatch } from 'node:fs';
import { chmod, mkdir, readdir, readFile, stat, unlink } from 'node:fs/promises';
import { basename, join } from 'node:path';

import { type Logger, silentLogger } from '../ops/log.js';
import { atomicCopyFile, atomicWriteFile } from '../util/atomic-file.js';
import { abortError, DirWaiter } from './dir-waiter.js';
import {
  chain,
  hasIstioEntry,
  isCandidateName,
  pickPrimary,
  pluginDirNetwork,
  sameConfig,
  unchain,
  type ConfFileEntry,
  type PluginDirContents,
} from './conflist.js';
import { compareGoStrings, isJsonObject, parseGoJson } from '../util/go-json.js';
import { PLUGIN_TYPE, pluginEntry, standaloneConfigText, type PluginConfigSettings } from './plugin-config.js';

export const PLUGIN_BINARY_NAME = 'istio-cni';
/** Istio's DefaultIstioOwnedCNIConfigFilename. */
export const DEFAULT_ISTIO_OWNED_CONFIG = '02-istio-cni.conflist';
/** Istio's default name for the standalone (non-chained) config. */
export const DEFAULT_STANDALONE_CONFIG = 'YYY-istio-cni.conf';
const BINARY_MODE = 0o755;
/** Istio's CNIConfModeDefault (0640 with CNI_CONF_GROUP_READ) for files it owns. */
const DEFAULT_OWNED_FILE_MODE = 0o600;
/** Temp files of atomicWriteFile for a config: never end in .conf/.conflist. */
const CONFIG_TEMP_LEFTOVER = /\.(conf|conflist)\.tmp\.[0-9a-f]{12}$/;

export interface CniInstallerOptions {
  /** Host CNI bin dir as mounted (Istio: /host/opt/cni/bin). */
  binDir: string;
  /** Host CNI conf dir as mounted (MOUNTED_CNI_NET_DIR, /host/etc/cni/net.d). */
  confDir: string;
  /** CNI_CONF_NAME: chain into this file instead of the first valid one. */
  confName?: string;
  /** The built plugin (build/Release/istio-cni). */
  pluginSource: string;
  settings: PluginConfigSettings;
  log?: Logger;
  /**
   * ISTIO_OWNED_CNI_CONFIG: leave the primary config untouched and write a copy with our entry
   * to this file (true → 02-istio-cni.conflist), which must sort before the primary.
   */
  istioOwnedConfig?: boolean | string;
  /** CHAINED_CNI_PLUGIN (default true). false → a standalone config, confName or YYY-istio-cni.conf. */
  chained?: boolean;
  /** Mode of the config files we own (Istio-owned or standalone); 0600 unless CNI_CONF_GROUP_READ (0640). */
  ownedConfigMode?: number;
  /** Safety-net re-check period while waiting for a config and while watching (fs.watch can miss events). */
  recheckIntervalMs?: number;
  /** Coalescing delay after a file event before re-checking. */
  debounceMs?: number;
}

export interface ChainResult {
  /** Absolute path of the config holding our entry. */
  file: string;
  changed: boolean;
}

export interface InstallResult extends ChainResult {
  binaryChanged: boolean;
}

export interface UninstallResult {
  /** Configs rewritten without our entry. */
  rewritten: string[];
  /** Files deleted (our own config, the binary). */
  removed: string[];
}

interface Plan {
  /** The file the plan was computed from (null for the standalone config). */
  source: string | null;
  sourceText: string | null;
  /** File name (in confDir) to hold the result. */
  target: string;
  desired: string;
  mode: number;
  uid?: number;
  gid?: number;
  /** The old `.conf`, deleted once its `.conflist` replacement is in place. */
  removeAfter: string | null;
  /** Istio-owned config: the runtime only uses it if it sorts before the primary. */
  priorityOk: boolean;
}

interface StatKey {
  ino: number;
  size: number;
  mtimeMs: number;
  ctimeMs: number;
}

/** The file a plan was computed from changed before the plan was written. */
class StalePlan extends Error {
  constructor(file: string) {
    super(`${file} changed while the CNI config was being updated`);
  }
}

const errCode = (e: unknown): string | undefined => (e as NodeJS.ErrnoException | null)?.code;

async function readOrNull(path: string): Promise<string | null> {
  try {
    return await readFile(path, 'utf8');
  } catch {
    return null;
  }
}

export class CniInstaller {
  readonly #opts: CniInstallerOptions;
  readonly #log: Logger;
  readonly #ownedName: string | null;
  readonly #chained: boolean;
  readonly #recheckMs: number;
  readonly #debounceMs: number;
  #ready = false;
  readonly #listeners = new Set<(ready: boolean) => void>();
  #queue: Promise<unknown> = Promise.resolve();
  #binStat: StatKey | null = null;
  #target: string | null = null;
  /** Every config we chained into (uninstall cleans each). */
  readonly #written = new Set<string>();
  /** For a list we chained into that had no entry of ours: its bytes before and after, to restore exactly. */
  readonly #originals = new Map<string, { before: string; after: string }>();
  #uninstalled = false;
  #waitingLogged = false;
  #priorityWarned = false;
  #rewrites: number[] = [];
  #loopWarnedAt = 0;

  constructor(opts: CniInstallerOptions) {
    this.#opts = opts;
    this.#log = (opts.log ?? silentLogger).child({ component: 'cni-install' });
    this.#chained = opts.chained ?? true;
    const owned = opts.istioOwnedConfig;
    this.#ownedName = this.#chained && owned ? (owned === true ? DEFAULT_ISTIO_OWNED_CONFIG : owned) : null;
    if (this.#ownedName !== null && (!this.#ownedName.endsWith('.conflist') || this.#ownedName.includes('/'))) {
      // The runtime reads a .conf as a single plugin: a list there would be skipped and pods would bypass the mesh.
      throw new TypeError(`Istio-owned CNI config name must be a file name ending in .conflist, got ${JSON.stringify(this.#ownedName)}`);
    }
    this.#recheckMs = opts.recheckIntervalMs ?? 3000;
    this.#debounceMs = opts.debounceMs ?? 100;
  }

  /** True after a successful install and while our entry (and binary) are in place. */
  get ready(): boolean {
    return this.#ready;
  }

  /** The config file holding our entry, once known. */
  get configFile(): string | null {
    return this.#target === null ? null : join(this.#opts.confDir, this.#target);
  }

  get binaryPath(): string {
    return join(this.#opts.binDir, PLUGIN_BINARY_NAME);
  }

  /** Subscribe to readiness changes; returns the unsubscribe function. */
  onReadyChange(listener: (ready: boolean) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  #setReady(ready: boolean): void {
    if (ready === this.#ready) return;
    this.#ready = ready;
    this.#log.info({ ready }, ready ? 'CNI install ready' : 'CNI install not ready');
    for (const l of this.#listeners) {
      try {
        l(ready);
      } catch (e) {
        this.#log.error({ err: e }, 'readiness listener failed');
      }
    }
  }

  /** One operation at a time: a re-check never interleaves with a write or an uninstall. */
  #serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#queue.then(fn, fn);
    this.#queue = run.catch(() => undefined);
    return run;
  }

  // -------------------------------------------------------------------------------------------
  // Binary

  /**
   * Copy the plugin to `<binDir>/istio-cni` (temp file + fsync + rename, mode 0755) unless the
   * content is already the same. Removes `istio-cni.tmp.*` leftovers first. Returns whether
   * anything changed (content written, or mode corrected).
   */
  installBinary(): Promise<boolean> {
    return this.#serial(() => this.#installBinary());
  }

  async #installBinary(): Promise<boolean> {
    const target = this.binaryPath;
    const current = await stat(target).catch((e: unknown) => {
      if (errCode(e) === 'ENOENT') return null;
      throw e;
    });
    const key = this.#binStat;
    if (
      current &&
      key &&
      current.ino === key.ino &&
      current.size === key.size &&
      current.mtimeMs === key.mtimeMs &&
      current.ctimeMs === key.ctimeMs
    ) {
      return false; // verified (or written) by us and untouched since
    }
    const stale = await this.#removeBinaryLeftovers();
    if (stale.length > 0) this.#log.info({ files: stale }, 'removed stale temporary plugin binaries');
    const src = await readFile(this.#opts.pluginSource);
    let changed = false;
    const same = current !== null && current.isFile() && current.size === src.length && src.equals(await readFile(target));
    if (same) {
      if ((current.mode & 0o7777) !== BINARY_MODE) {
        await chmod(target, BINARY_MODE);
        changed = true;
        this.#log.info({ path: target }, 'fixed plugin binary mode');
      }
    } else {
      await mkdir(this.#opts.binDir, { recursive: true, mode: 0o755 }); // a fresh node may not have it yet
      await atomicCopyFile(this.#opts.pluginSource, target, { mode: BINARY_MODE });
      changed = true;
      this.#log.info({ path: target, bytes: src.length }, 'installed plugin binary');
    }
    // Remember the file as ours only from a stat taken before a read that matched: a change made
    // between our write and here (another writer, a chmod) must not be taken for our own, else
    // every later check would skip it ("untouched since"). Its event triggers the next check.
    const after = await stat(target).catch(() => null);
    const verified =
      after !== null &&
      (after.mode & 0o7777) === BINARY_MODE &&
      after.size === src.length &&
      src.equals(await readFile(target).catch(() => Buffer.alloc(0)));
    this.#binStat = verified ? { ino: after.ino, size: after.size, mtimeMs: after.mtimeMs, ctimeMs: after.ctimeMs } : null;
    return changed;
  }

  async #removeBinaryLeftovers(): Promise<string[]> {
    const prefix = `${PLUGIN_BINARY_NAME}.tmp.`;
    let names: string[];
    try {
      names = await readdir(this.#opts.binDir);
    } catch {
      return [];
    }
    const removed: string[] = [];
    for (const n of names.filter((x) => x.startsWith(prefix))) {
      try {
        await unlink(join(this.#opts.binDir, n));
        removed.push(n);
      } catch (e) {
        this.#log.warn({ err: e, file: n }, 'could not remove a stale temporary plugin binary');
      }
    }
    return removed;
  }

  // -------------------------------------------------------------------------------------------
  // Config

  async #readConfDir(): Promise<ConfFileEntry[] | null> {
    const dir = this.#opts.confDir;
    let dirents;
    try {
      dirents = await readdir(dir, { withFileTypes: true });
    } catch (e) {
      if (errCode(e) === 'ENOENT' || errCode(e) === 'ENOTDIR') return null;
      throw e;
    }
    const wanted = new Set<string>();
    const confName = this.#opts.confName;
    if (confName) for (const n of [confName, confName + 'list', confName.replace(/\.conflist$/, '.conf')]) wanted.add(n);
    const out: ConfFileEntry[] = [];
    for (const d of dirents) {
      if (d.isDirectory()) continue; // libcni.ConfFiles skips directories
      if (!isCandidateName(d.name) && !wanted.has(d.name)) continue;
      const text = await readOrNull(join(dir, d.name));
      const entry: ConfFileEntry = { name: d.name, text };
      if (text !== null) {
        const network = pluginDirNetwork(d.name, text);
        if (network !== null) {
          const pd = await this.#readPluginDir(join(dir, network));
          if (pd !== undefined) entry.pluginDir = pd;
        }
      }
      out.push(entry);
    }
    return out;
  }

  /** libcni loads `<conf dir>/<network>/*.conf` as more plugins of a list (none when absent). */
  async #readPluginDir(path: string): Promise<PluginDirContents | undefined> {
    let dirents;
    try {
      dirents = await readdir(path, { withFileTypes: true });
    } catch (e) {
      if (errCode(e) === 'ENOENT') return undefined;
      return { error: (e as Error).message };
    }
    const names = dirents.filter((d) => !d.isDirectory() && d.name.endsWith('.conf') && d.name.lastIndexOf('.') === d.name.length - 5);
    const texts: string[] = [];
    for (const n of names.map((d) => d.name).sort(compareGoStrings)) {
      try {
        texts.push(await readFile(join(path, n), 'utf8'));
      } catch (e) {
        return { error: (e as Error).message };
      }
    }
    return { texts };
  }

  /** What the config should look like now; null when there is no (valid) primary config yet. */
  async #plan(): Promise<Plan | null> {
    const dir = this.#opts.confDir;
    const ownedMode = this.#opts.ownedConfigMode ?? DEFAULT_OWNED_FILE_MODE;
    if (!this.#chained) {
      return {
        source: null,
        sourceText: null,
        target: this.#opts.confName || DEFAULT_STANDALONE_CONFIG,
        desired: standaloneConfigText(this.#opts.settings),
        mode: ownedMode,
        removeAfter: null,
        priorityOk: true,
      };
    }
    const files = await this.#readConfDir();
    if (files === null) return null;
    const exclude = this.#ownedName === null ? [] : [this.#ownedName];
    const choice = pickPrimary(files, this.#opts.confName, exclude);
    if (choice === null) {
      if (!this.#waitingLogged) {
        const skipped = files.filter((f) => f.text !== null).map((f) => f.name);
        this.#log.warn({ dir, confName: this.#opts.confName, present: skipped }, 'no valid CNI config to chain into yet; waiting for one');
        this.#waitingLogged = true;
      }
      return null;
    }
    this.#waitingLogged = false;
    for (const s of choice.skipped) this.#log.debug({ file: s.name, reason: s.reason }, 'skipped invalid CNI config');
    const sourceText = files.find((f) => f.name === choice.name)?.text ?? null;
    if (sourceText === null) return null;
    const out = chain(sourceText, choice.name, pluginEntry(this.#opts.settings));
    if (this.#ownedName !== null) {
      const priorityOk = compareGoStrings(this.#ownedName, choice.name) < 0;
      if (!priorityOk && !this.#priorityWarned) {
        this.#log.warn(
          { owned: this.#ownedName, primary: choice.name },
          'Istio-owned CNI config sorts after the primary config, so the runtime will not use it (pods would bypass the mesh)',
        );
        this.#priorityWarned = true;
      }
      return {
        source: choice.name,
        sourceText,
        target: this.#ownedName,
        desired: out.text,
        mode: ownedMode,
        removeAfter: null,
        priorityOk,
      };
    }
    let st;
    try {
      st = await stat(join(dir, choice.name));
    } catch {
      return null; // removed under us; the next event re-plans
    }
    return {
      source: choice.name,
      sourceText,
      target: out.fileName,
      desired: out.text,
      mode: st.mode & 0o7777,
      uid: st.uid,
      gid: st.gid,
      removeAfter: out.fileName === choice.name ? null : choice.name,
      priorityOk: true,
    };
  }

  async #inPlace(plan: Plan): Promise<boolean> {
    const current = await readOrNull(join(this.#opts.confDir, plan.target));
    if (current === null || !sameConfig(current, plan.desired)) return false;
    if (plan.removeAfter !== null) return false; // the old .conf still takes precedence
    return true;
  }

  /** Write the plan's target if it differs; returns whether it wrote. */
  async #apply(plan: Plan): Promise<boolean> {
    const dir = this.#opts.confDir;
    let changed = false;
    const current = await readOrNull(join(dir, plan.target));
    if (current === null || !sameConfig(current, plan.desired)) {
      // The source may have been rewritten by its owner since it was planned from: writing the
      // plan now would put the old content back (plus our entry) over the new. Re-plan instead.
      const sourceNow = plan.source === null ? null : plan.source === plan.target ? current : await readOrNull(join(dir, plan.source));
      if (plan.source !== null && sourceNow !== plan.sourceText) throw new StalePlan(plan.source);
      const opts =
        plan.uid !== undefined && plan.gid !== undefined ? { mode: plan.mode, uid: plan.uid, gid: plan.gid } : { mode: plan.mode };
      await atomicWriteFile(join(dir, plan.target), plan.desired, opts);
      changed = true;
      if (
        this.#ownedName === null &&
        this.#chained &&
        plan.source === plan.target &&
        plan.sourceText !== null &&
        !hasIstioEntry(plan.sourceText, plan.source)
      ) {
        this.#originals.set(plan.target, { before: plan.sourceText, after: plan.desired });
      } else if (this.#originals.get(plan.target)?.after !== plan.desired) {
        this.#originals.delete(plan.target);
      }
    }
    if (plan.removeAfter !== null) {
      // Only if it still holds what we converted: a newer write by its owner is re-chained next round.
      const old = join(dir, plan.removeAfter);
      if ((await readOrNull(old)) === plan.sourceText) {
        await unlink(old).catch((e: unknown) => {
          if (errCode(e) !== 'ENOENT') throw e;
        });
        this.#log.info({ from: plan.removeAfter, to: plan.target }, 'converted single-plugin .conf into a .conflist');
        changed = true;
      }
    }
    this.#target = plan.target;
    if (this.#chained && this.#ownedName === null) this.#written.add(plan.target);
    return changed;
  }

  async #removeConfigLeftovers(): Promise<void> {
    let names: string[];
    try {
      names = await readdir(this.#opts.confDir);
    } catch {
      return;
    }
    for (const n of names.filter((x) => CONFIG_TEMP_LEFTOVER.test(x))) {
      await unlink(join(this.#opts.confDir, n)).catch(() => undefined);
      this.#log.info({ file: n }, 'removed a stale temporary CNI config');
    }
  }

  /**
   * Chain our entry into the primary config (or write the Istio-owned / standalone file), only
   * when the result differs from what is there. Waits, watching the conf dir plus a periodic
   * re-check, while there is no valid config; rejects with the signal's reason when aborted.
   */
  async chainConfig(signal?: AbortSignal): Promise<ChainResult> {
    const waiter = new DirWaiter(this.#opts.confDir, this.#recheckMs);
    try {
      for (;;) {
        if (signal?.aborted) throw abortError(signal);
        waiter.arm(); // events from here on wake the wait below
        const r = await this.#serial(async () => {
          const plan = await this.#plan();
          if (plan === null) return null;
          const changed = await this.#apply(plan).catch((e: unknown) => {
            if (e instanceof StalePlan) return null; // changed under us: its event wakes the wait at once
            throw e;
          });
          if (changed === null) return null;
          if (changed) this.#log.info({ file: join(this.#opts.confDir, plan.target) }, 'chained istio-cni into the CNI config');
          return { file: join(this.#opts.confDir, plan.target), changed, priorityOk: plan.priorityOk };
        });
        if (r !== null) return { file: r.file, changed: r.changed };
        await waiter.wait(signal);
      }
    } finally {
      waiter.close();
    }
  }

  /** installBinary() then chainConfig(); ready once both are in place. */
  async install(signal?: AbortSignal): Promise<InstallResult> {
    this.#uninstalled = false;
    await this.#serial(() => this.#removeConfigLeftovers());
    const binaryChanged = await this.installBinary();
    const r = await this.chainConfig(signal);
    const ok = await this.#serial(async () => {
      const plan = await this.#plan();
      return plan !== null && plan.priorityOk && (await this.#inPlace(plan));
    });
    this.#setReady(ok);
    return { ...r, binaryChanged };
  }

  /** Is everything in place right now (binary content and mode, our entry, priority)? Writes nothing. */
  check(): Promise<boolean> {
    return this.#serial(async () => {
      const plan = await this.#plan();
      if (plan === null || !plan.priorityOk || !(await this.#inPlace(plan))) return false;
      try {
        const [src, dst, st] = await Promise.all([readFile(this.#opts.pluginSource), readFile(this.binaryPath), stat(this.binaryPath)]);
        return src.equals(dst) && (st.mode & 0o7777) === BINARY_MODE;
      } catch {
        return false;
      }
    });
  }

  // -------------------------------------------------------------------------------------------
  // Watching

  async #reconcile(reason: string, replans = 0): Promise<void> {
    if (this.#uninstalled) return;
    try {
      if (await this.#installBinary()) this.#log.info({ reason }, 're-installed the plugin binary');
      const plan = await this.#plan();
      if (plan === null) {
        this.#setReady(false);
        return;
      }
      if (await this.#inPlace(plan)) {
        this.#target = plan.target;
        this.#setReady(plan.priorityOk);
        return;
      }
      this.#setReady(false);
      if (await this.#apply(plan)) {
        this.#log.info({ file: join(this.#opts.confDir, plan.target), reason }, 're-chained istio-cni into the CNI config');
        this.#noteRewrite(plan.source ?? plan.target);
      }
      const after = await this.#plan();
      this.#setReady(after !== null && after.priorityOk && (await this.#inPlace(after)));
    } catch (e) {
      if (e instanceof StalePlan && replans < 3) return this.#reconcile(`${reason},changed-meanwhile`, replans + 1);
      this.#log.error({ err: e, reason }, 'CNI install check failed; retrying on the next change');
      this.#setReady(false);
    }
  }

  /** Istio's installationThrottle hint: another component keeps reverting our work. */
  #noteRewrite(file: string): void {
    const now = Date.now();
    this.#rewrites = [...this.#rewrites.filter((t) => now - t < 30_000), now];
    if (this.#rewrites.length > 5 && now - this.#loopWarnedAt > 30_000) {
      this.#loopWarnedAt = now;
      const hint = file.includes('cilium')
        ? " Hint: Cilium CNI was detected; ensure 'cni.exclusive=false' in the Cilium configuration."
        : '';
      this.#log.warn(
        { file, rewrites: this.#rewrites.length },
        `Configuration has been reconciled multiple times in a short period of time. This may be due to a conflicting component constantly reverting our work.${hint}`,
      );
    }
  }

  /**
   * Keep the install in place until `signal` aborts: watch the conf dir and the bin dir (our
   * binary), re-check ~debounceMs after a change and every recheckIntervalMs, and re-install /
   * re-chain whatever another writer changed or removed. `onChange` gets the current readiness
   * at once and then every change. Call after install(); stop it before uninstall().
   */
  async watch(signal: AbortSignal, onChange?: (ready: boolean) => void): Promise<void> {
    if (signal.aborted) return;
    const unsubscribe = onChange ? this.onReadyChange(onChange) : () => false;
    onChange?.(this.#ready);
    let timer: NodeJS.Timeout | null = null;
    let stopped = false;
    const pending = new Set<string>();
    const schedule = (reason: string): void => {
      if (stopped) return;
      pending.add(reason);
      if (timer !== null) return;
      timer = setTimeout(() => {
        timer = null;
        const why = [...pending].join(',');
        pending.clear();
        void this.#serial(() => this.#reconcile(why)).then(() => {
          if (!stopped) ensureAll();
        });
      }, this.#debounceMs);
    };
    // A watch follows a directory inode: when the directory is deleted (and re-created, by us for
    // the bin dir or by another CNI for the conf dir) the old watch sees nothing any more, so each
    // check ends by re-validating the watches, and a renewed one is followed by one more check.
    // Identity is the inode and its birth time (ext4 hands a re-created directory the freed inode
    // number at once); the directory's own deletion also marks its watch as dead.
    const watchers = new Map<string, { watcher?: FSWatcher; id: string; dead: boolean }>();
    const identity = (dir: string): string | undefined => {
      try {
        const st = statSync(dir);
        return `${st.ino}:${st.birthtimeMs}`;
      } catch {
        return undefined;
      }
    };
    const ensureWatch = (dir: string, accept: (name: string | null) => boolean, reason: string): void => {
      const id = identity(dir);
      const current = watchers.get(dir);
      if (current && !current.dead && current.id === id) return;
      if (current) {
        current.watcher?.close();
        watchers.delete(dir);
      }
      if (id === undefined) return; // Directory missing for now: the periodic check retries (and waits for a config meanwhile).
      try {
        const entry: { watcher?: FSWatcher; id: string; dead: boolean } = { id, dead: false };
        const w = fsWatch(dir, { persistent: false }, (_event, name) => {
          const n = name === null ? null : String(name);
          if (n === basename(dir) && identity(dir) !== id) entry.dead = true; // the directory itself went
          if (entry.dead || accept(n)) schedule(reason);
        });
        entry.watcher = w;
        w.on('error', () => {
          w.close();
          if (watchers.get(dir) === entry) watchers.delete(dir);
          schedule(`${reason}-watch-error`);
        });
        watchers.set(dir, entry);
        if (current) schedule(`${reason}-rewatch`); // changes before the new watch started
      } catch {
        // gone again meanwhile: the periodic check retries
      }
    };
    const ensureAll = (): void => {
      ensureWatch(this.#opts.confDir, () => true, 'conf-dir');
      ensureWatch(this.#opts.binDir, (n) => n === null || n === PLUGIN_BINARY_NAME, 'binary');
    };
    ensureAll();
    schedule('start'); // catch changes between install() and the watches starting
    const interval = setInterval(() => {
      ensureAll();
      schedule('periodic');
    }, this.#recheckMs);
    try {
      await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
    } finally {
      stopped = true;
      clearInterval(interval);
      if (timer !== null) clearTimeout(timer);
      for (const w of watchers.values()) w.watcher?.close();
      unsubscribe();
      await this.#queue;
    }
  }

  // -------------------------------------------------------------------------------------------
  // Uninstall

  /**
   * Remove exactly what install added: our entry from every config we chained into and from the
   * current primary config (a list we chained into is restored byte for byte when nobody touched
   * it since; a converted `.conf` stays a `.conflist` without our entry, as Istio does), the
   * Istio-owned or standalone file, and `<binDir>/istio-cni`. Idempotent. Stops later re-checks
   * until the next install().
   */
  uninstall(): Promise<UninstallResult> {
    return this.#serial(async () => {
      this.#uninstalled = true;
      this.#setReady(false);
      const dir = this.#opts.confDir;
      const rewritten: string[] = [];
      const removed: string[] = [];
      if (!this.#chained || this.#ownedName !== null) {
        const name = this.#ownedName ?? (this.#opts.confName || DEFAULT_STANDALONE_CONFIG);
        const text = await readOrNull(join(dir, name));
        if (text !== null && (this.#ownedName !== null || isStandaloneOurs(text))) {
          await unlink(join(dir, name)).catch((e: unknown) => {
            if (errCode(e) !== 'ENOENT') throw e;
          });
          removed.push(join(dir, name));
        } else if (text !== null) {
          this.#log.warn({ file: name }, 'standalone CNI config is not ours any more; leaving it');
        }
      } else {
        const targets = new Set(this.#written);
        const files = await this.#readConfDir();
        const primary = files === null ? null : pickPrimary(files, this.#opts.confName);
        if (primary !== null) targets.add(primary.name);
        for (const name of [...targets].sort(compareGoStrings)) {
          const path = join(dir, name);
          const text = await readOrNull(path);
          if (text === null || !hasIstioEntry(text, name)) continue;
          const orig = this.#originals.get(name);
          const next = orig !== undefined && orig.after === text ? orig.before : unchain(text);
          const st = await stat(path);
          await atomicWriteFile(path, next, { mode: st.mode & 0o7777, uid: st.uid, gid: st.gid });
          rewritten.push(path);
          this.#log.info({ file: path }, 'removed istio-cni from the CNI config');
        }
        this.#written.clear();
        this.#originals.clear();
      }
      try {
        await unlink(this.binaryPath);
        removed.push(this.binaryPath);
        this.#log.info({ path: this.binaryPath }, 'removed plugin binary');
      } catch (e) {
        if (errCode(e) !== 'ENOENT') throw e;
      }
      await this.#removeBinaryLeftovers();
      this.#binStat = null;
      this.#target = null;
      return { rewritten, removed };
    });
  }
}

function isStandaloneOurs(text: string): boolean {
  try {
    const doc = parseGoJson(text);
    return isJsonObject(doc) && doc['type'] === PLUGIN_TYPE;
  } catch {
    return false;
  }
}
