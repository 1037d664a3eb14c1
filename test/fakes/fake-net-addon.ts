// A fake of the native addon behind the same NetAddon interface. It keeps a tiny model of each
// namespace (nft scripts applied, ip rules, routes) so policy code can be tested without root,
// records every call, and lets a test inject failures.
import { closeSync, openSync } from 'node:fs';
import type { RawExecutorStats, RawHeapRelease } from '../../src/addon/binding.js';
import { systemError } from '../../src/addon/errors.js';
import type { NetAddon, NetnsHandle, NetnsInDirectory, NetnsTarget } from '../../src/addon/net-addon.js';
import type { NetnsChanges, NetnsWatch, WatchOptions } from '../../src/addon/netns-watch.js';
import type { FwmarkRuleEntry, ResultsOf, RouteEntry, RoutingResult, RoutingStep, Step } from '../../src/addon/steps.js';

export interface FakeNamespace {
  ino: number;
  /** Every nft script run here, in order. */
  nftScripts: string[];
  /** The kernel's ruleset generation: +1 per committed nft change (tests bump it to fake another writer). */
  nftGeneration: number;
  /** What `list ruleset` returns here. */
  listing: string;
  rules: FwmarkRuleEntry[];
  routes: RouteEntry[];
  /** The pod's lo is up (runtimes race the CNI chain to bring it up). */
  loUp: boolean;
  /** IPv6 enabled on lo (net.ipv6.conf.lo.disable_ipv6 == 0). */
  loIpv6Enabled: boolean;
  /** Interface addresses (for the /proc scan's ownership check). */
  addresses: Array<{ family: 4 | 6; address: string; prefixLen: number; dev: string }>;
  /** Canned results for exec steps, by argv[0]. */
  exec: Map<string, { exitCode: number; stdout: string; stderr: string }>;
  /** Kernel ip sets: name → family and IP → comment. */
  ipsets: Map<string, { family: 4 | 6; entries: Map<string, string> }>;
}

export interface RecordedRun {
  target: string;
  steps: Step[];
}

type Failure = (step: Step, target: string) => Error | undefined;

function newNamespace(ino: number): FakeNamespace {
  return {
    ino,
    nftScripts: [],
    nftGeneration: 1,
    listing: '',
    rules: [],
    routes: [],
    loUp: true,
    loIpv6Enabled: true,
    addresses: [],
    exec: new Map(),
    ipsets: new Map(),
  };
}

export class FakeNetAddon implements NetAddon {
  readonly namespaces = new Map<string, FakeNamespace>();
  readonly notNetns = new Set<string>();
  /** Paths that are symlinks: openNetnsInDirectory fails with ELOOP there, as O_NOFOLLOW does. */
  readonly symlinks = new Set<string>();
  /** Directories that really are elsewhere (a symlinked directory): what openNetnsInDirectory reports. */
  readonly directoryTargets = new Map<string, string>();
  /** Every open, in order: `inDirectory` for openNetnsInDirectory (no link followed). */
  readonly opens: Array<{ path: string; inDirectory: boolean }> = [];
  readonly runs: RecordedRun[] = [];
  /** The namespace used for 'fresh' targets; its listing is what canonicalisation sees. */
  readonly fresh: FakeNamespace = newNamespace(1);
  failOn: Failure = () => undefined;
  /** Each run waits this long before its steps take effect (an addon thread still busy). */
  runDelayMs = 0;
  /** Makes every nftBatch step report a kernel refusal (the step then applies its script). */
  refuseBatches = false;
  /** Commits another writer makes while a refused batch's text runs (the stamp rule's tests). */
  commitsBesideFallback = 0;
  openFds = 0;
  #nextIno = 4026532000;
  #nextFd = 100;

  /**
   * With `realFds`, each handle holds a real fd (of /proc/self/ns/net), so it can travel over a
   * real ZDS socket; the namespace it stands for is still the fake one.
   */
  constructor(private readonly options: { realFds?: boolean } = {}) {}

  addNetns(path: string): FakeNamespace {
    const ns = newNamespace(this.#nextIno++);
    this.namespaces.set(path, ns);
    return ns;
  }

  openNetns(path: string): NetnsHandle {
    this.opens.push({ path, inDirectory: false });
    return this.#open(path);
  }

  openNetnsInDirectory(directory: string, name: string): NetnsInDirectory {
    const path = `${directory}/${name}`;
    this.opens.push({ path, inDirectory: true });
    if (this.symlinks.has(path)) {
      throw systemError('ELOOP', -40, 'openat', `ELOOP: too many symbolic links encountered, openat '${path}'`, path);
    }
    return { handle: this.#open(path), directory: this.directoryTargets.get(directory) ?? directory };
  }

  #open(path: string): NetnsHandle {
    if (this.notNetns.has(path)) throw systemError('EINVAL', -22, 'ioctl', `EINVAL: not a network namespace, ioctl '${path}'`, path);
    const ns = this.namespaces.get(path);
    if (!ns) throw systemError('ENOENT', -2, 'open', `ENOENT: no such file or directory, open '${path}'`, path);
    this.openFds++;
    let closed = false;
    const fd = this.options.realFds ? openSync('/proc/self/ns/net', 'r') : this.#nextFd++;
    const close = (): void => {
      if (closed) return;
      this.openFds--;
      closed = true;
      if (this.options.realFds) closeSync(fd);
    };
    return {
      fd,
      ino: ns.ino,
      dev: 4,
      path,
      close,
      get closed() {
        return closed;
      },
    };
  }

  async run<const S extends readonly Step[]>(target: NetnsTarget, steps: S): Promise<ResultsOf<S>> {
    const name = target === 'fresh' ? 'fresh' : target.path;
    this.runs.push({ target: name, steps: [...steps] });
    if (target !== 'fresh' && target.closed) throw new Error(`netns ${target.path} is already closed`);
    const ns = target === 'fresh' ? { ...this.fresh, nftScripts: [] } : this.namespaces.get(name);
    if (!ns) throw Object.assign(systemError('ENOENT', -2, 'setns', 'ENOENT: netns vanished, setns'), { step: -1 });
    if (this.runDelayMs > 0) await new Promise((resolve) => setTimeout(resolve, this.runDelayMs));
    return steps.map((step, i) => {
      const failure = this.failOn(step, name);
      if (failure) throw Object.assign(failure, { step: i, op: step.op });
      if (step.op === 'routing') return this.#routing(ns, step, name, i);
      return this.#execute(ns, step);
    }) as ResultsOf<S>;
  }

  warmUp(): void {}

  /** What each threadCpuSeconds() call adds to the fake thread clock (the fake takes no time unless told). */
  cpuSecondsPerRead = 0;
  #threadCpu = 0;

  threadCpuSeconds(): number {
    this.#threadCpu += this.cpuSecondsPerRead;
    return this.#threadCpu;
  }

  /** Every releaseFreeHeap() call. */
  heapReleases = 0;

  async releaseFreeHeap(): Promise<RawHeapRelease> {
    this.heapReleases++;
    return { released: true, freeBytes: 1 << 20, arenaBytes: 4 << 20, seconds: 0 };
  }

  /** Open watches by netns path; a test fires them with notify(). */
  readonly watches = new Map<string, Array<{ watch: NetnsWatch; opts: WatchOptions }>>();

  async watchNetns(ns: NetnsHandle, opts: WatchOptions): Promise<NetnsWatch> {
    const failure = this.failOn({ op: 'netlinkWatch', kind: opts.kinds[0] ?? 'nftables' }, ns.path);
    if (failure) throw failure;
    let closed = false;
    const list = this.watches.get(ns.path) ?? [];
    const watch: NetnsWatch = {
      fds: opts.kinds.map(() => this.#nextFd++),
      get closed() {
        return closed;
      },
      close: () => {
        if (closed) return;
        closed = true;
        const i = list.findIndex((w) => w.watch === watch);
        if (i >= 0) list.splice(i, 1);
      },
    };
    list.push({ watch, opts });
    this.watches.set(ns.path, list);
    return watch;
  }

  /** Delivers a change notification to every open watch of `path`. */
  notify(path: string, changes: Partial<NetnsChanges> = { nftables: 1 }): void {
    for (const { opts } of [...(this.watches.get(path) ?? [])]) {
      opts.onChange({ nftables: 0, rules: 0, routes: 0, addresses: 0, overrun: false, ...changes });
    }
  }

  stats(): RawExecutorStats {
    // The fake takes no time: only the counts are real.
    const steps: RawExecutorStats['steps'] = {};
    for (const step of this.runs.flatMap((r) => r.steps)) {
      const total = (steps[step.op] ??= { count: 0, cpuSeconds: 0, wallSeconds: 0 });
      total.count++;
    }
    const lists = this.runs.length;
    return {
      threadsStarted: 1,
      threadsRetired: 0,
      threadsAlive: 1,
      jobsRun: lists,
      pending: 0,
      queueWaitSeconds: 0,
      resultsDelivered: lists,
      resultWaitSeconds: 0,
      steps,
    };
  }

  /** All steps run in `path`, flattened, in order. */
  stepsIn(path: string): Step[] {
    return this.runs.filter((r) => r.target === path).flatMap((r) => r.steps);
  }

  /** Each change runs like the single step of its kind (and failOn sees it as that step). */
  #routing(ns: FakeNamespace, step: RoutingStep, target: string, index: number): RoutingResult {
    const changes = step.changes.map((change) => {
      const { kind, ...spec } = change;
      const single = { op: kind, ...spec } as Step;
      const failure = this.failOn(single, target);
      if (failure) throw Object.assign(failure, { step: index, op: step.op });
      const { changed, skipped } = this.#execute(ns, single) as { changed: boolean; skipped: boolean };
      return { changed, skipped };
    });
    return { op: 'routing', changes };
  }

  #execute(ns: FakeNamespace, step: Step): unknown {
    switch (step.op) {
      case 'nft':
        if (step.script === 'list ruleset') return { op: 'nft', output: ns.listing };
        ns.nftScripts.push(step.script);
        ns.nftGeneration++;
        return { op: 'nft', output: '' };
      case 'nftGeneration':
        return { op: step.op, generation: ns.nftGeneration };
      case 'nftCompile':
        // The fake's "compiled batch" is the text that built the tables, so an nftBatch step
        // records the same history of nft scripts as the text path.
        return { op: step.op, batch: new TextEncoder().encode(ns.nftScripts.at(-1) ?? '') };
      case 'nftBatch': {
        const before = ns.nftGeneration;
        ns.nftScripts.push(this.refuseBatches ? step.script : new TextDecoder().decode(step.batch));
        ns.nftGeneration += 1 + (this.refuseBatches ? this.commitsBesideFallback : 0);
        const refused = this.refuseBatches ? { fallbackReason: 'Invalid argument (NFT_MSG_NEWRULE)', generationBefore: before } : {};
        return { op: step.op, generation: ns.nftGeneration, fallback: this.refuseBatches, ...refused };
      }
      case 'deleteNftTables':
        // Recorded as the nft text with the same effect, so tests read one history of nft changes.
        ns.nftScripts.push(step.tables.map((t) => `delete table ${step.family} ${t}`).join('\n'));
        ns.nftGeneration++;
        return { op: step.op, changed: true, skipped: false };
      case 'addFwmarkRule': {
        const { op: _op, ...rule } = step;
        const exists = ns.rules.some((r) => JSON.stringify(r) === JSON.stringify(rule));
        if (!exists) ns.rules.push(rule);
        return { op: step.op, changed: !exists, skipped: false };
      }
      case 'deleteFwmarkRule': {
        const before = ns.rules.length;
        const { op: _op, ...rule } = step;
        ns.rules = ns.rules.filter((r) => JSON.stringify(r) !== JSON.stringify(rule));
        return { op: step.op, changed: ns.rules.length !== before, skipped: false };
      }
      case 'replaceLocalRoute': {
        if (step.skipWithoutIpv6 && !ns.loIpv6Enabled) return { op: step.op, changed: false, skipped: true };
        // As the kernel: an IPv6 route needs its device up (IPv4 host-scope routes do not).
        if (step.family === 6 && !ns.loUp) throw systemError('ENETDOWN', -100, 'RTM_NEWROUTE', 'ENETDOWN: network is down, RTM_NEWROUTE');
        ns.routes = ns.routes.filter((r) => r.family !== step.family || r.table !== step.table);
        ns.routes.push({
          family: step.family,
          dst: step.family === 6 ? '::' : '0.0.0.0',
          dstLen: 0,
          type: 2,
          dev: step.dev,
          table: step.table,
        });
        return { op: step.op, changed: true, skipped: false };
      }
      case 'deleteLocalRoute': {
        const before = ns.routes.length;
        ns.routes = ns.routes.filter((r) => r.family !== step.family || r.table !== step.table);
        return { op: step.op, changed: ns.routes.length !== before, skipped: false };
      }
      case 'listFwmarkRules':
        return { op: step.op, rules: ns.rules.filter((r) => r.family === step.family) };
      case 'listRoutes':
        return { op: step.op, routes: ns.routes.filter((r) => r.family === step.family && r.table === step.table) };
      case 'deviceHasIpv6':
        return { op: step.op, hasIpv6: ns.loIpv6Enabled };
      case 'setLinkUp': {
        const changed = !ns.loUp;
        ns.loUp = true;
        return { op: step.op, changed, skipped: false };
      }
      case 'listAddresses':
        return { op: step.op, addresses: ns.addresses };
      case 'socket':
        this.openFds++;
        return { op: step.op, fd: this.#nextFd++ };
      case 'exec': {
        const canned = ns.exec.get(step.argv[0] ?? '') ?? { exitCode: 0, stdout: '', stderr: '' };
        return { op: step.op, signal: 0, ...canned };
      }
      case 'netnsId':
        return { op: step.op, ino: ns.ino, dev: 4 };
      case 'ipsetCreate':
        if (!ns.ipsets.has(step.name)) ns.ipsets.set(step.name, { family: step.family, entries: new Map() });
        return { op: step.op, changed: true, skipped: ns.ipsets.get(step.name)!.family !== step.family };
      case 'ipsetDestroy':
        ns.ipsets.delete(step.name);
        return { op: step.op, changed: true, skipped: false };
      case 'ipsetList': {
        const set = ns.ipsets.get(step.name);
        const entries = [...(set?.entries ?? new Map<string, string>())].map(([ip, comment]) => ({ ip, comment }));
        return {
          op: step.op,
          exists: Boolean(set),
          typeName: set ? 'hash:ip' : '',
          family: set?.family ?? 4,
          revision: set ? 2 : 0,
          comments: Boolean(set),
          entries,
        };
      }
      case 'ipsetFlush':
      case 'ipsetAdd':
      case 'ipsetDel': {
        const set = ns.ipsets.get(step.name);
        if (!set) throw systemError('ENOENT', -2, 'nfnetlink', `ENOENT: No such file or directory, nfnetlink '${step.name}'`, step.name);
        if (step.op === 'ipsetFlush') set.entries.clear();
        if (step.op === 'ipsetAdd') set.entries.set(step.ip, step.comment ?? '');
        const changed = step.op === 'ipsetDel' ? set.entries.delete(step.ip) : true;
        return { op: step.op, changed, skipped: false };
      }
    }
  }
}
