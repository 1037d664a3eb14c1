// The host probe address sets: every enrolled pod IP sits in `istio-inpod-probes-v4` or `-v6`
// in the node's namespace with the pod UID as the element comment, so the host SNAT rule can
// rewrite the kubelet's probes to those pods. Where the sets live depends on the backend, as in
// Istio: nft sets in table `inet istio-ambient-nat` (this file's NftProbeSetStore), or kernel ip
// sets for the iptables backend (ipset-probe-sets.ts). ProbeSets holds the policy (validation,
// UID-checked removal, IP reuse, startup sync) over either store.
//
// Element changes are rendered as nft text, so every address is validated (and written in its
// canonical form) and every UID checked against a strict character set before any text exists.
import { isIP } from 'node:net';
import type { NetAddon, NetnsHandle } from '../addon/net-addon.js';
import type { NftStep } from '../addon/steps.js';
import { silentLogger, type Logger } from '../ops/log.js';
import type { DriftItem } from '../rules/drift.js';
import { NFT_FAMILY, NFT_TABLE_NAT, PROBE_SET_V4, PROBE_SET_V6 } from '../rules/constants.js';
import { renderProbeSetsNftables } from '../rules/host-manager.js';

export type ProbeFamily = 4 | 6;

/** An address in the form the set holds it, and the family (hence the set) it belongs to. */
export interface ProbeAddress {
  family: ProbeFamily;
  ip: string;
}

export interface ProbeSetsOptions {
  /** AMBIENT_IPV6: manage `istio-inpod-probes-v6` too. IPv6 addresses are rejected without it. */
  ipv6: boolean;
  log?: Logger;
  /** Most element changes written in one libnftables transaction (a replacement counts once). */
  maxChangesPerTransaction?: number;
  /** Where the sets live; default the nft sets of table `inet istio-ambient-nat`. */
  store?: ProbeSetStore;
}

/** The kernel side of the probe sets, per backend. Every call is about the given families' sets. */
export interface ProbeSetStore {
  /** Creates the sets when missing; existing sets keep their elements. */
  ensure(families: readonly ProbeFamily[]): Promise<void>;
  flush(families: readonly ProbeFamily[]): Promise<void>;
  /** Canonical IP → UID ('' for an element without comment); a missing set lists as empty. */
  list(families: readonly ProbeFamily[]): Promise<ProbeEntries>;
  /** Writes one batch (the nft store: one transaction; a replacement never leaves a gap). */
  apply(changes: readonly ProbeChange[]): Promise<void>;
  /** Removes the sets (full uninstall). */
  destroy(families: readonly ProbeFamily[]): Promise<void>;
  /** Sets that are missing or not the kind Istio creates. */
  drift(families: readonly ProbeFamily[]): Promise<DriftItem[]>;
}

export type UpsertOutcome = 'added' | 'replaced' | 'unchanged';

export interface ProbeSyncResult {
  added: number;
  /** Entries whose IP was held under another UID (an IP reused by a new pod). */
  replaced: number;
  unchanged: number;
  /** Entries deleted because no expected pod holds the IP (only with prune). */
  pruned: number;
  /** libnftables transactions run to apply the changes (0 when nothing changed). */
  transactions: number;
}

/** What the set holds per IP; an element without a comment has the UID ''. */
export type ProbeEntries = Map<string, string>;

const DEFAULT_MAX_CHANGES = 1000;
/** nft refuses comments longer than this. */
const MAX_UID_LENGTH = 128;
/**
 * Kubernetes UIDs are UUIDs; anything outside this set could end the quoted comment in the
 * transaction text (`"`, newline, `;`), so it is refused rather than escaped.
 */
const UID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]*$/;

export const PROBE_TABLE = `${NFT_FAMILY} ${NFT_TABLE_NAT}`;

export function probeSetName(family: ProbeFamily): string {
  return family === 4 ? PROBE_SET_V4 : PROBE_SET_V6;
}

/** Throws a RangeError unless `uid` is safe to put in an element comment. */
export function assertValidPodUid(uid: string): void {
  if (typeof uid !== 'string' || uid.length === 0 || uid.length > MAX_UID_LENGTH || !UID_PATTERN.test(uid)) {
    throw new RangeError(`invalid pod UID ${JSON.stringify(uid)}: expected 1 to ${MAX_UID_LENGTH} characters of [A-Za-z0-9._:-]`);
  }
}

/**
 * Validates a pod IP and returns it in canonical form (the form nft lists it in). IPv4-mapped
 * IPv6 addresses (`::ffff:10.0.0.1`) are unmapped to IPv4: the kubelet probes the IPv4 address,
 * so that is what belongs in the set. Zone indexes (`fe80::1%eth0`) are refused.
 */
export function parseProbeIp(ip: string): ProbeAddress {
  const family = typeof ip === 'string' && !ip.includes('%') ? isIP(ip) : 0;
  if (family === 4) return { family: 4, ip };
  if (family !== 6) throw new RangeError(`invalid pod IP ${JSON.stringify(ip)}: not an IPv4 or IPv6 address`);
  const words = ipv6Words(ip);
  if (words.slice(0, 5).every((w) => w === 0) && words[5] === 0xffff) {
    return { family: 4, ip: dottedQuad(words[6] ?? 0, words[7] ?? 0) };
  }
  return { family: 6, ip: formatIpv6(words) };
}

/** Canonical form of an address as it was listed from a set (no unmapping: it stays in its set). */
function canonicalListed(value: string): string | undefined {
  const family = isIP(value);
  if (family === 4) return value;
  if (family === 6 && !value.includes('%')) return formatIpv6(ipv6Words(value));
  return undefined;
}

function dottedQuad(hi: number, lo: number): string {
  return `${hi >> 8}.${hi & 0xff}.${lo >> 8}.${lo & 0xff}`;
}

/** The eight 16-bit words of an address that net.isIP already accepted as IPv6. */
function ipv6Words(ip: string): number[] {
  let text = ip.toLowerCase();
  const lastColon = text.lastIndexOf(':');
  const tail = text.slice(lastColon + 1);
  if (tail.includes('.')) {
    const [a = 0, b = 0, c = 0, d = 0] = tail.split('.').map(Number);
    text = `${text.slice(0, lastColon + 1)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const parse = (part: string): number[] => (part === '' ? [] : part.split(':').map((w) => parseInt(w, 16)));
  const gap = text.indexOf('::');
  if (gap < 0) return parse(text);
  const head = parse(text.slice(0, gap));
  const rest = parse(text.slice(gap + 2));
  return [...head, ...new Array<number>(8 - head.length - rest.length).fill(0), ...rest];
}

/** RFC 5952 text, with glibc inet_ntop's embedded-IPv4 forms (what nft prints). */
function formatIpv6(words: number[]): string {
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8;) {
    if (words[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && words[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  if (bestLen < 2) bestStart = -1;
  if (bestStart === 0 && (bestLen === 6 || (bestLen === 5 && words[5] === 0xffff))) {
    return `::${bestLen === 5 ? 'ffff:' : ''}${dottedQuad(words[6] ?? 0, words[7] ?? 0)}`;
  }
  const hex = (from: number, to: number): string =>
    words
      .slice(from, to)
      .map((w) => w.toString(16))
      .join(':');
  if (bestStart < 0) return hex(0, 8);
  return `${hex(0, bestStart)}::${hex(bestStart + bestLen, 8)}`;
}

interface JsonElem {
  val?: unknown;
  comment?: unknown;
}

/**
 * Reads the elements of one set out of `nft -j list set ...` output: a bare string for an
 * element without a comment, `{"elem": {"val", "comment"}}` with one. Anything else (ranges,
 * prefixes: never written by us) is skipped and reported through `onSkip`.
 */
export function parseProbeSetJson(json: string, setName: string, onSkip: (what: string) => void = () => {}): ProbeEntries {
  let doc: unknown;
  try {
    doc = JSON.parse(json);
  } catch (err) {
    throw new Error(`unreadable JSON listing of set ${setName}: ${(err as Error).message}`, { cause: err });
  }
  const items = (doc as { nftables?: unknown } | null)?.nftables;
  if (!Array.isArray(items)) throw new Error(`JSON listing of set ${setName} has no "nftables" array`);
  const entries: ProbeEntries = new Map();
  for (const item of items as unknown[]) {
    const set = (item as { set?: { name?: unknown; elem?: unknown } } | null)?.set;
    if (!set || set.name !== setName) continue;
    if (set.elem === undefined) continue; // an empty set has no "elem" at all
    if (!Array.isArray(set.elem)) {
      onSkip(`"elem" of set ${setName} is not an array`);
      continue;
    }
    for (const raw of set.elem as unknown[]) {
      const elem: JsonElem | undefined = typeof raw === 'string' ? { val: raw } : ((raw as { elem?: JsonElem } | null)?.elem ?? undefined);
      const ip = typeof elem?.val === 'string' ? canonicalListed(elem.val) : undefined;
      if (ip === undefined) {
        onSkip(`element ${JSON.stringify(raw)} of set ${setName}`);
        continue;
      }
      entries.set(ip, typeof elem?.comment === 'string' ? elem.comment : '');
    }
  }
  return entries;
}

export type ProbeChange =
  | { kind: 'add'; address: ProbeAddress; uid: string }
  | { kind: 'replace'; address: ProbeAddress; uid: string }
  | { kind: 'delete'; address: ProbeAddress };

/**
 * One transaction for a batch of changes: per set, one `delete element` with every address to
 * remove or replace, then one `add element` with every address to (re)add and its UID. A
 * replacement is delete + add of the same address in the same transaction, so the new UID wins
 * and the address is never missing from the set in between.
 */
export function renderElementChanges(changes: readonly ProbeChange[]): string {
  const lines: string[] = [];
  for (const family of [4, 6] as const) {
    const set = `${PROBE_TABLE} ${probeSetName(family)}`;
    const mine = changes.filter((c) => c.address.family === family);
    const deletes = mine.filter((c) => c.kind !== 'add').map((c) => c.address.ip);
    const adds = mine.flatMap((c) => (c.kind === 'delete' ? [] : [`${c.address.ip} comment "${c.uid}"`]));
    if (deletes.length > 0) lines.push(`delete element ${set} { ${deletes.join(', ')} }`);
    if (adds.length > 0) lines.push(`add element ${set} { ${adds.join(', ')} }`);
  }
  return lines.map((l) => `${l}\n`).join('');
}

export class ProbeSets {
  readonly #log: Logger;
  readonly #families: readonly ProbeFamily[];
  readonly #maxChanges: number;
  /** Every operation reads the set and then changes it; one at a time keeps that consistent. */
  #queue: Promise<unknown> = Promise.resolve();
  readonly #store: ProbeSetStore;

  constructor(
    addon: NetAddon,
    hostNetns: NetnsHandle,
    private readonly opts: ProbeSetsOptions,
  ) {
    this.#log = opts.log ?? silentLogger;
    this.#store = opts.store ?? new NftProbeSetStore(addon, hostNetns, this.#log);
    this.#families = opts.ipv6 ? [4, 6] : [4];
    const max = opts.maxChangesPerTransaction ?? DEFAULT_MAX_CHANGES;
    if (!Number.isSafeInteger(max) || max < 1) {
      throw new RangeError(`maxChangesPerTransaction must be a positive integer, got ${String(max)}`);
    }
    this.#maxChanges = max;
  }

  /** The sets this instance manages: v4, and v6 when IPv6 is on. */
  get setNames(): string[] {
    return this.#families.map(probeSetName);
  }

  /** Creates the sets when missing; existing sets keep their elements. */
  ensure(): Promise<void> {
    return this.#exclusive(() => this.#store.ensure(this.#families));
  }

  /** Empties the sets (Istio does this at startup, before re-adding the enrolled pods). */
  flush(): Promise<void> {
    return this.#exclusive(() => this.#store.flush(this.#families));
  }

  /** Removes the sets (full uninstall, after the rules that use them are gone). */
  destroy(): Promise<void> {
    return this.#exclusive(() => this.#store.destroy(this.#families));
  }

  /** Sets that are missing or not what Istio creates. */
  drift(): Promise<DriftItem[]> {
    return this.#exclusive(() => this.#store.drift(this.#families));
  }

  /** Every element of the managed sets: canonical IP → UID ('' for an element without comment). */
  list(): Promise<ProbeEntries> {
    return this.#exclusive(() => this.#store.list(this.#families));
  }

  /** Puts `ip` in its set under `uid`; an element held by another UID is replaced (new UID wins). */
  async upsert(ip: string, uid: string): Promise<UpsertOutcome> {
    const address = this.#address(ip);
    assertValidPodUid(uid);
    return this.#exclusive(async () => {
      const current = (await this.#store.list([address.family])).get(address.ip);
      if (current === uid) return 'unchanged';
      if (current === undefined) {
        await this.#store.apply([{ kind: 'add', address, uid }]);
        this.#log.debug({ ip: address.ip, uid }, 'probe set: added');
        return 'added';
      }
      await this.#store.apply([{ kind: 'replace', address, uid }]);
      this.#log.info({ ip: address.ip, uid, previousUid: current }, 'probe set: IP reused by another pod, UID replaced');
      return 'replaced';
    });
  }

  /**
   * Deletes `ip` only when it is held under `uid`. Returns false, changing nothing, when it is
   * absent or held by another UID (the IP was already reused by a new pod: warned about).
   */
  async remove(ip: string, uid: string): Promise<boolean> {
    const address = this.#address(ip);
    assertValidPodUid(uid);
    return this.#exclusive(async () => {
      const current = (await this.#store.list([address.family])).get(address.ip);
      if (current === undefined) return false;
      if (current !== uid) {
        this.#log.warn({ ip: address.ip, uid, holderUid: current }, 'probe set: IP held by another pod UID, not removed');
        return false;
      }
      await this.#store.apply([{ kind: 'delete', address }]);
      this.#log.debug({ ip: address.ip, uid }, 'probe set: removed');
      return true;
    });
  }

  /**
   * Makes the sets hold every expected IP under its UID; with `prune`, also deletes every
   * element not expected. Everything is validated before any change, and the changes go out in
   * as few transactions as `maxChangesPerTransaction` allows (one for a normal node).
   */
  async sync(expected: ReadonlyMap<string, string>, options: { prune: boolean }): Promise<ProbeSyncResult> {
    const wanted = new Map<string, { address: ProbeAddress; uid: string }>();
    for (const [ip, uid] of expected) {
      const address = this.#address(ip);
      assertValidPodUid(uid);
      const earlier = wanted.get(address.ip);
      if (earlier && earlier.uid !== uid) {
        throw new RangeError(`IP ${address.ip} is expected under two pod UIDs: ${earlier.uid} and ${uid}`);
      }
      wanted.set(address.ip, { address, uid });
    }
    return this.#exclusive(async () => {
      const current = await this.#store.list(this.#families);
      const changes: ProbeChange[] = [];
      const result: ProbeSyncResult = { added: 0, replaced: 0, unchanged: 0, pruned: 0, transactions: 0 };
      for (const { address, uid } of wanted.values()) {
        const held = current.get(address.ip);
        if (held === uid) {
          result.unchanged++;
        } else if (held === undefined) {
          changes.push({ kind: 'add', address, uid });
          result.added++;
        } else {
          changes.push({ kind: 'replace', address, uid });
          result.replaced++;
        }
      }
      if (options.prune) {
        for (const ip of current.keys()) {
          if (wanted.has(ip)) continue;
          changes.push({ kind: 'delete', address: { family: ip.includes(':') ? 6 : 4, ip } });
          result.pruned++;
        }
      }
      for (let i = 0; i < changes.length; i += this.#maxChanges) {
        await this.#store.apply(changes.slice(i, i + this.#maxChanges));
        result.transactions++;
      }
      this.#log.info({ ...result, prune: options.prune }, 'probe sets synced');
      return result;
    });
  }

  #address(ip: string): ProbeAddress {
    const address = parseProbeIp(ip);
    if (address.family === 6 && !this.opts.ipv6) {
      throw new RangeError(`pod IP ${address.ip} is IPv6 but IPv6 is disabled (AMBIENT_IPV6=false): no ${PROBE_SET_V6} set`);
    }
    return address;
  }

  #exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.#queue.then(fn, fn);
    this.#queue = next.catch(() => undefined);
    return next;
  }
}

/** The nft sets of table `inet istio-ambient-nat` (the nftables backend, as Istio's host_sets.go). */
export class NftProbeSetStore implements ProbeSetStore {
  constructor(
    private readonly addon: NetAddon,
    private readonly hostNetns: NetnsHandle,
    private readonly log: Logger = silentLogger,
  ) {}

  ensure(families: readonly ProbeFamily[]): Promise<void> {
    return this.#nft(renderProbeSetsNftables(families.includes(6)));
  }

  flush(families: readonly ProbeFamily[]): Promise<void> {
    return this.#nft(families.map((f) => `flush set ${PROBE_TABLE} ${probeSetName(f)}\n`).join(''));
  }

  async list(families: readonly ProbeFamily[]): Promise<ProbeEntries> {
    const steps: NftStep[] = families.map((f) => ({ op: 'nft', script: `list set ${PROBE_TABLE} ${probeSetName(f)}`, json: true }));
    const results = await this.#run(steps);
    const entries: ProbeEntries = new Map();
    results.forEach((r, i) => {
      const name = probeSetName(families[i] ?? 4);
      for (const [ip, uid] of parseProbeSetJson(r.output, name, (what) =>
        this.log.warn({ set: name }, `probe set listing: skipped ${what}`),
      ))
        entries.set(ip, uid);
    });
    return entries;
  }

  apply(changes: readonly ProbeChange[]): Promise<void> {
    return this.#nft(renderElementChanges(changes));
  }

  /** The sets go with the table (the host rules' cleanup deletes it); each alone otherwise. */
  destroy(families: readonly ProbeFamily[]): Promise<void> {
    const lines = families.map(
      (f) =>
        `add set ${PROBE_TABLE} ${probeSetName(f)} { type ${f === 4 ? 'ipv4_addr' : 'ipv6_addr'} ; }\ndelete set ${PROBE_TABLE} ${probeSetName(f)}\n`,
    );
    return this.#nft(`add table ${PROBE_TABLE}\n${lines.join('')}`);
  }

  async drift(families: readonly ProbeFamily[]): Promise<DriftItem[]> {
    const [listed] = await this.#run([{ op: 'nft', script: `list sets ${NFT_FAMILY}`, json: true }]);
    const present = listedNftSets(listed?.output ?? '{}');
    const missing: DriftItem[] = [];
    for (const family of families) {
      const [name, type] = [probeSetName(family), family === 4 ? 'ipv4_addr' : 'ipv6_addr'];
      // DriftKind 'set': a set is table content, so it is reported against the table.
      if (present.get(name) !== type) missing.push({ kind: 'set', where: PROBE_TABLE, text: `set ${name} { type ${type} ; }` });
    }
    return missing;
  }

  async #nft(script: string): Promise<void> {
    await this.#run([{ op: 'nft', script }]);
  }

  async #run(steps: NftStep[]): Promise<Array<{ output: string }>> {
    try {
      return (await this.addon.run(this.hostNetns, steps)) as Array<{ output: string }>;
    } catch (err) {
      if (err instanceof Error) err.message = `probe sets in ${this.hostNetns.path}: ${err.message}`;
      throw err;
    }
  }
}

/** Set name → type of the sets of table `inet istio-ambient-nat` in `nft -j list sets` output. */
function listedNftSets(json: string): Map<string, string> {
  const sets = new Map<string, string>();
  const items = (JSON.parse(json) as { nftables?: unknown }).nftables;
  if (!Array.isArray(items)) return sets;
  for (const item of items as unknown[]) {
    const set = (item as { set?: { table?: unknown; name?: unknown; type?: unknown } } | null)?.set;
    if (set && set.table === NFT_TABLE_NAT && typeof set.name === 'string') sets.set(set.name, String(set.type));
  }
  return sets;
}
