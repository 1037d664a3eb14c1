// A minimal container runtime's CNI driver (CNI spec 1.0): runs the plugins of one network
// configuration list in order (ADD, CHECK) or in reverse (DEL), the way containerd/CRI-O do
// through libcni, for the demo and its tests.
//
// Every plugin is exec'd through the addon's `exec` step targeted at the *node* namespace, so
// what a plugin builds "on the host" (the bridge, the host end of each veth, ip_forward) lands
// in the demo's node namespace and never in the machine's own. No shell anywhere; the plugin
// gets exactly the CNI_* variables (and PATH), as from a runtime, not this process's environment.
import { statSync } from 'node:fs';
import { isAbsolute, join } from 'node:path';

import type { NetAddon, NetnsHandle } from '../addon/net-addon.js';
import { KeyedQueue } from '../util/keyed-queue.js';

export type CniCommand = 'ADD' | 'DEL' | 'CHECK';

/** A CNI result (spec 1.0 "Success" object), as the last plugin printed it. */
export interface CniResult {
  cniVersion?: string;
  interfaces?: Array<{ name: string; mac?: string; sandbox?: string; mtu?: number }>;
  ips?: Array<{ address: string; gateway?: string; interface?: number }>;
  routes?: Array<{ dst: string; gw?: string }>;
  dns?: { nameservers?: string[]; domain?: string; search?: string[]; options?: string[] };
  [key: string]: unknown;
}

export interface CniPod {
  /** The sandbox (infra container) ID: CNI_CONTAINERID. */
  containerId: string;
  /** The pod's network namespace file: CNI_NETNS. */
  netnsPath: string;
  /** CNI_IFNAME; default `eth0`. */
  ifName?: string;
  /** CNI_ARGS (K8S_POD_NAME, K8S_POD_NAMESPACE, K8S_POD_INFRA_CONTAINER_ID, K8S_POD_UID). */
  args: Record<string, string>;
}

export interface CniRuntimeOptions {
  addon: NetAddon;
  /** Where the plugins run (the demo's "host"). */
  nodeNetns: NetnsHandle;
  /** Searched in order for each plugin `type` (CNI_PATH gets the same list). */
  pluginDirs: string[];
  /** The parsed .conflist. */
  conflist: object;
  log?: (line: string) => void;
  /** Deadline of one plugin run; the plugin is killed (SIGKILL) when it expires. Default 20 s. */
  pluginTimeoutMs?: number;
}

/** A plugin failed: its CNI error object (`code`, `msg`, `details`) and which plugin it was. */
export class CniPluginError extends Error {
  override readonly name = 'CniPluginError';
  constructor(
    message: string,
    readonly command: CniCommand,
    readonly plugin: string,
    readonly pluginPath: string,
    /** The CNI error code (the CNI specification, SPEC.md "Error"), when the plugin printed one. */
    readonly code: number | undefined,
    readonly msg: string,
    readonly details: string | undefined,
    readonly exitCode: number | undefined,
    readonly stderr: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

interface PluginConf {
  type: string;
  [key: string]: unknown;
}

interface NetworkList {
  cniVersion: string;
  name: string;
  disableCheck: boolean;
  plugins: PluginConf[];
}

/** What a plugin may need to find its helpers (iptables, ...); the rest of our environment stays out. */
const PLUGIN_PATH_ENV = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
const DEFAULT_TIMEOUT_MS = 20_000;
/** Plugin types are file names: no separators, nothing relative. */
const PLUGIN_TYPE = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;
/** Spec 1.0: container ID "must only contain alphanumeric characters, underscores, periods and hyphens". */
const CONTAINER_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;
/** CNI_ARGS keys and values cannot carry the separators `;` and `=` (nor NUL). */
const ARG_KEY = /^[A-Za-z0-9_.-]+$/;
const ARG_VALUE = /^[^;=\0]*$/;

function parseConflist(raw: object): NetworkList {
  const list = raw as Record<string, unknown>;
  const fail = (why: string): never => {
    throw new TypeError(`invalid CNI network configuration list: ${why}`);
  };
  if (typeof list['name'] !== 'string' || list['name'] === '') fail('"name" must be a non-empty string');
  if (typeof list['cniVersion'] !== 'string' || list['cniVersion'] === '') fail('"cniVersion" must be a non-empty string');
  const plugins = list['plugins'];
  if (!Array.isArray(plugins) || plugins.length === 0) fail('"plugins" must be a non-empty array');
  for (const [i, p] of (plugins as unknown[]).entries()) {
    if (typeof p !== 'object' || p === null || Array.isArray(p)) fail(`plugins[${i}] must be an object`);
    const type = (p as Record<string, unknown>)['type'];
    if (typeof type !== 'string' || !PLUGIN_TYPE.test(type))
      fail(`plugins[${i}].type must be a plugin file name, got ${JSON.stringify(type)}`);
  }
  return {
    name: list['name'] as string,
    cniVersion: list['cniVersion'] as string,
    disableCheck: list['disableCheck'] === true,
    plugins: plugins as PluginConf[],
  };
}

function validatePod(pod: CniPod): { ifName: string; cniArgs: string } {
  const ifName = pod.ifName ?? 'eth0';
  if (!CONTAINER_ID.test(pod.containerId)) throw new TypeError(`invalid container ID ${JSON.stringify(pod.containerId)}`);
  if (!isAbsolute(pod.netnsPath) || pod.netnsPath.includes('\0'))
    throw new TypeError(`netns path must be absolute: ${JSON.stringify(pod.netnsPath)}`);
  // Spec 1.0: at most 15 bytes, not "." or "..", no "/", ":" or whitespace.
  if (ifName === '' || Buffer.byteLength(ifName) > 15 || ifName === '.' || ifName === '..' || /[/:\s\0]/.test(ifName)) {
    throw new TypeError(`invalid interface name ${JSON.stringify(ifName)}`);
  }
  const args: Array<[string, string]> = [];
  // Runtimes (libcni users: containerd, CRI-O) always pass IgnoreUnknown=1 first: without it a
  // plugin that decodes CNI_ARGS into a struct (host-local) rejects the K8S_* keys it lacks.
  if (!('IgnoreUnknown' in pod.args)) args.push(['IgnoreUnknown', '1']);
  for (const [k, v] of Object.entries(pod.args)) {
    if (!ARG_KEY.test(k) || !ARG_VALUE.test(v))
      throw new TypeError(`CNI_ARGS cannot carry ${JSON.stringify(`${k}=${v}`)} (no ';' or '=' allowed)`);
    args.push([k, v]);
  }
  return { ifName, cniArgs: args.map(([k, v]) => `${k}=${v}`).join(';') };
}

function tryParseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

function firstLine(text: string): string {
  return text.trim().split('\n')[0] ?? '';
}

export class CniRuntime {
  readonly #addon: NetAddon;
  readonly #nodeNetns: NetnsHandle;
  readonly #dirs: string[];
  readonly #list: NetworkList;
  readonly #log: (line: string) => void;
  readonly #timeoutMs: number;
  /** Cached ADD results (what libcni keeps under /var/lib/cni/results), keyed by attachment. */
  readonly #cache = new Map<string, CniResult>();
  /** One operation at a time per attachment (the spec forbids concurrent ADD/DEL for it). */
  readonly #queue = new KeyedQueue();

  constructor(opts: CniRuntimeOptions) {
    this.#addon = opts.addon;
    this.#nodeNetns = opts.nodeNetns;
    if (opts.pluginDirs.length === 0) throw new TypeError('pluginDirs must not be empty');
    for (const dir of opts.pluginDirs) {
      if (!isAbsolute(dir) || dir.includes(':') || dir.includes('\0'))
        throw new TypeError(`plugin directory must be absolute and without ':': ${dir}`);
    }
    this.#dirs = [...opts.pluginDirs];
    this.#list = parseConflist(opts.conflist);
    this.#log = opts.log ?? (() => {});
    this.#timeoutMs = opts.pluginTimeoutMs ?? DEFAULT_TIMEOUT_MS;
    for (const p of this.#list.plugins) this.pluginPath(p.type); // fail early on a missing plugin
  }

  get networkName(): string {
    return this.#list.name;
  }

  /** The absolute path of plugin `type`: the first match in pluginDirs (no PATH lookup). */
  pluginPath(type: string): string {
    if (!PLUGIN_TYPE.test(type)) throw new TypeError(`invalid plugin type ${JSON.stringify(type)}`);
    for (const dir of this.#dirs) {
      const candidate = join(dir, type);
      try {
        const st = statSync(candidate);
        if (st.isFile() && (st.mode & 0o111) !== 0) return candidate;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      }
    }
    throw new Error(`CNI plugin "${type}" not found in ${this.#dirs.join(', ')}`);
  }

  /** The cached result of the last successful ADD of this attachment. */
  cachedResult(pod: Pick<CniPod, 'containerId' | 'ifName'>): CniResult | undefined {
    return this.#cache.get(this.#key(pod));
  }

  /**
   * Runs every plugin in order with CNI_COMMAND=ADD; returns the last plugin's result. With
   * `earlierResult` the list runs as if plugins before it had returned that (the node benchmark
   * times the istio-cni entry alone this way).
   */
  add(pod: CniPod, earlierResult?: CniResult): Promise<CniResult> {
    return this.#serial(pod, async () => {
      const { ifName, cniArgs } = validatePod(pod);
      let prevResult: CniResult | undefined = earlierResult;
      for (const plugin of this.#list.plugins) {
        const out = await this.#invoke('ADD', plugin, pod, ifName, cniArgs, prevResult);
        const parsed = tryParseJson(out.stdout);
        if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
          throw this.#error('ADD', plugin, out, `printed no result (stdout: ${JSON.stringify(firstLine(out.stdout))})`);
        }
        prevResult = parsed as CniResult;
      }
      const result = prevResult as CniResult;
      this.#cache.set(this.#key(pod), result);
      return result;
    });
  }

  /**
   * Runs every plugin in reverse order with CNI_COMMAND=DEL and the cached ADD result as
   * prevResult. Every plugin runs even when an earlier one failed; the first error is rethrown
   * afterwards (and the cache is kept, so a retried DEL gets the same prevResult).
   */
  del(pod: CniPod): Promise<void> {
    return this.#serial(pod, async () => {
      const { ifName, cniArgs } = validatePod(pod);
      const prevResult = this.#cache.get(this.#key(pod));
      const errors: Error[] = [];
      for (const plugin of [...this.#list.plugins].reverse()) {
        try {
          await this.#invoke('DEL', plugin, pod, ifName, cniArgs, prevResult);
        } catch (err) {
          errors.push(err as Error);
        }
      }
      if (errors.length > 0) throw errors[0];
      this.#cache.delete(this.#key(pod));
    });
  }

  /** Runs every plugin in order with CNI_COMMAND=CHECK and the cached ADD result. */
  check(pod: CniPod): Promise<void> {
    return this.#serial(pod, async () => {
      const { ifName, cniArgs } = validatePod(pod);
      if (this.#list.disableCheck) return;
      if (/^0\.[0-3]\./.test(this.#list.cniVersion))
        throw new Error(`CNI CHECK needs cniVersion 0.4.0 or later (the list says ${this.#list.cniVersion})`);
      const prevResult = this.#cache.get(this.#key(pod));
      if (!prevResult) throw new Error(`CNI CHECK: no cached ADD result for ${pod.containerId}/${ifName}`);
      for (const plugin of this.#list.plugins) await this.#invoke('CHECK', plugin, pod, ifName, cniArgs, prevResult);
    });
  }

  #key(pod: Pick<CniPod, 'containerId' | 'ifName'>): string {
    return `${this.#list.name}/${pod.containerId}/${pod.ifName ?? 'eth0'}`;
  }

  #serial<T>(pod: CniPod, op: () => Promise<T>): Promise<T> {
    return this.#queue.run(this.#key(pod), op);
  }

  async #invoke(
    command: CniCommand,
    plugin: PluginConf,
    pod: CniPod,
    ifName: string,
    cniArgs: string,
    prevResult: CniResult | undefined,
  ): Promise<{ stdout: string; stderr: string; exitCode: number; path: string }> {
    const path = this.pluginPath(plugin.type);
    // Spec: the plugin's own object, with cniVersion and name from the list, plus prevResult.
    const conf: Record<string, unknown> = { ...plugin, cniVersion: this.#list.cniVersion, name: this.#list.name };
    delete conf['prevResult'];
    if (prevResult !== undefined) conf['prevResult'] = prevResult;
    const env = {
      CNI_COMMAND: command,
      CNI_CONTAINERID: pod.containerId,
      CNI_NETNS: pod.netnsPath,
      CNI_IFNAME: ifName,
      CNI_ARGS: cniArgs,
      CNI_PATH: this.#dirs.join(':'),
      PATH: PLUGIN_PATH_ENV,
    };
    const started = Date.now();
    let result;
    try {
      [result] = await this.#addon.run(this.#nodeNetns, [
        { op: 'exec', argv: [path], env, input: JSON.stringify(conf), timeoutMs: this.#timeoutMs },
      ] as const);
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      const why = e.code === 'ETIMEDOUT' ? `did not finish within ${this.#timeoutMs} ms (killed)` : `could not run: ${e.message}`;
      this.#log(`cni ${command} ${plugin.type} (${pod.containerId}) failed: ${why}`);
      throw new CniPluginError(
        `CNI ${command} failed in plugin "${plugin.type}": ${why}`,
        command,
        plugin.type,
        path,
        undefined,
        why,
        undefined,
        undefined,
        '',
        { cause: err },
      );
    }
    const out = { stdout: result.stdout, stderr: result.stderr, exitCode: result.exitCode, path };
    const ms = Date.now() - started;
    if (result.stderr.trim() !== '') this.#log(`cni ${command} ${plugin.type} stderr: ${firstLine(result.stderr)}`);
    if (result.signal !== 0 || result.exitCode !== 0) {
      const how = result.signal !== 0 ? `killed by signal ${result.signal}` : `exit status ${result.exitCode}`;
      this.#log(`cni ${command} ${plugin.type} (${pod.containerId}) failed in ${ms} ms: ${how}`);
      throw this.#error(command, plugin, out, how);
    }
    this.#log(`cni ${command} ${plugin.type} (${pod.containerId}, ${ifName}) ok in ${ms} ms`);
    return out;
  }

  /** Builds the error from the plugin's JSON error object (stdout per spec 1.0; stderr as a fallback). */
  #error(
    command: CniCommand,
    plugin: PluginConf,
    out: { stdout: string; stderr: string; exitCode: number; path: string },
    how: string,
  ): CniPluginError {
    const parsed = (tryParseJson(out.stdout.trim()) ?? tryParseJson(out.stderr.trim())) as Record<string, unknown> | undefined;
    const cniError = typeof parsed === 'object' && parsed !== null && ('msg' in parsed || 'code' in parsed) ? parsed : undefined;
    const code = typeof cniError?.['code'] === 'number' ? cniError['code'] : undefined;
    const msg = typeof cniError?.['msg'] === 'string' ? cniError['msg'] : firstLine(out.stderr) || firstLine(out.stdout) || how;
    const details = typeof cniError?.['details'] === 'string' && cniError['details'] !== '' ? cniError['details'] : undefined;
    const text = `CNI ${command} failed in plugin "${plugin.type}" (${how})${code !== undefined ? `, code ${code}` : ''}: ${msg}${details ? ` (${details})` : ''}`;
    return new CniPluginError(text, command, plugin.type, out.path, code, msg, details, out.exitCode, out.stderr);
  }
}
