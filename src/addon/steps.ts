// The operations the native addon can carry out inside one network namespace, and what each
// returns. TypeScript composes them (policy); the addon only executes them in order (mechanism).

export type Family = 4 | 6;

export interface NftStep {
  op: 'nft';
  script: string;
  /** Omit counter values from listings (default true). */
  stateless?: boolean;
  /** List in libnftables' JSON format (`nft -j`). */
  json?: boolean;
}
export interface FwmarkRuleSpec {
  family: Family;
  mark: number;
  mask: number;
  priority: number;
  table: number;
}
export interface AddFwmarkRuleStep extends FwmarkRuleSpec {
  op: 'addFwmarkRule';
}
export interface DeleteFwmarkRuleStep extends FwmarkRuleSpec {
  op: 'deleteFwmarkRule';
}
export interface LocalRouteSpec {
  family: Family;
  table: number;
  dev: string;
}
export interface ReplaceLocalRouteStep extends LocalRouteSpec {
  op: 'replaceLocalRoute';
  /**
   * Skip (result.skipped) when IPv6 is disabled on `dev` (`net.ipv6.conf.<dev>.disable_ipv6`, or
   * no IPv6 in the kernel). A device that is merely down or has no address yet is not skipped.
   */
  skipWithoutIpv6?: boolean;
}
export interface DeleteLocalRouteStep extends LocalRouteSpec {
  op: 'deleteLocalRoute';
}
/** One change of a routing step: the same fields and meaning as the single-change step of that name. */
export type RoutingChange =
  | (FwmarkRuleSpec & { kind: 'addFwmarkRule' | 'deleteFwmarkRule' })
  | (LocalRouteSpec & { kind: 'replaceLocalRoute'; skipWithoutIpv6?: boolean })
  | (LocalRouteSpec & { kind: 'deleteLocalRoute' });
/**
 * Several rule/route changes in one rtnetlink sendmsg (one ack each, in order); the first one the
 * kernel refuses fails the step. Adding an existing rule and deleting what is gone are no-ops.
 */
export interface RoutingStep {
  op: 'routing';
  changes: RoutingChange[];
}
export interface ListFwmarkRulesStep {
  op: 'listFwmarkRules';
  family: Family;
}
export interface ListRoutesStep {
  op: 'listRoutes';
  family: Family;
  table: number;
}
/** Whether IPv6 is enabled on `dev` (the same test as skipWithoutIpv6). */
export interface DeviceHasIpv6Step {
  op: 'deviceHasIpv6';
  dev: string;
}
/** Brings `dev` up; changed is false when it was up already. */
export interface SetLinkUpStep {
  op: 'setLinkUp';
  dev: string;
}
export interface ListAddressesStep {
  op: 'listAddresses';
}
export interface SocketStep {
  op: 'socket';
  family: Family;
  type: 'tcp' | 'udp';
  mark?: number;
  bindAddress?: string;
  bindPort?: number;
  listen?: number;
  connectAddress?: string;
  connectPort?: number;
  timeoutMs?: number;
  /** IP_TRANSPARENT + IP_FREEBIND: bind to a foreign address (the original client's). */
  transparent?: boolean;
  reusePort?: boolean;
}
export interface ExecStep {
  op: 'exec';
  argv: string[];
  input?: string;
  timeoutMs?: number;
  /** When given, the child gets exactly these variables instead of the agent's environment. */
  env?: Record<string, string>;
}
export interface NetnsIdStep {
  op: 'netnsId';
}
/**
 * Deletes whole nftables tables in one raw nfnetlink batch, outside libnftables' process-wide
 * lock (deleting base chains waits for an RCU grace period); missing tables are fine.
 */
/** The namespace's nftables ruleset generation: +1 with every committed transaction. */
export interface NftGenerationStep {
  op: 'nftGeneration';
}
/** A netlink socket opened inside the namespace, subscribed to its changes (src/addon/netns-watch.ts). */
export interface NetlinkWatchStep {
  op: 'netlinkWatch';
  kind: 'nftables' | 'routing';
}
export interface DeleteNftTablesStep {
  op: 'deleteNftTables';
  family: 'inet' | 'ip' | 'ip6';
  tables: string[];
}
/**
 * Kernel ip sets through raw nfnetlink (no `ipset` binary), as Istio's agent writes them:
 * `hash:ip` with comment support. Creating a set that exists identically and destroying a missing
 * one succeed; a set of that name with other parameters is kept (result `skipped: true`, as Istio
 * ignores "exists"); deleting an absent element succeeds with `changed: false`.
 */
export interface IpsetCreateStep {
  op: 'ipsetCreate';
  name: string;
  family: Family;
}
export interface IpsetDestroyStep {
  op: 'ipsetDestroy';
  name: string;
}
export interface IpsetFlushStep {
  op: 'ipsetFlush';
  name: string;
}
export interface IpsetListStep {
  op: 'ipsetList';
  name: string;
}
/** `replace` (default true, as Istio): an element already in the set takes the new comment. */
export interface IpsetAddStep {
  op: 'ipsetAdd';
  name: string;
  ip: string;
  comment?: string;
  replace?: boolean;
}
export interface IpsetDelStep {
  op: 'ipsetDel';
  name: string;
  ip: string;
}
export type IpsetStep = IpsetCreateStep | IpsetDestroyStep | IpsetFlushStep | IpsetListStep | IpsetAddStep | IpsetDelStep;
/**
 * Compiles `tables` as they are in the namespace into nf_tables netlink messages (table, flush,
 * chains, rules), ready for an nftBatch step elsewhere: run it in a fresh namespace right after
 * the nft step that loaded the rules' text, so the batch is exactly what the kernel made of it.
 */
export interface NftCompileStep {
  op: 'nftCompile';
  family: 'inet' | 'ip' | 'ip6';
  tables: string[];
}
/**
 * Sends a compiled batch in one sendmsg; the kernel's answer names the generation of its commit.
 * If the kernel refuses the batch (nothing applied), `script` is applied through libnftables instead.
 */
export interface NftBatchStep {
  op: 'nftBatch';
  batch: Uint8Array;
  script: string;
}

export type Step =
  | NftStep
  | AddFwmarkRuleStep
  | DeleteFwmarkRuleStep
  | ReplaceLocalRouteStep
  | DeleteLocalRouteStep
  | ListFwmarkRulesStep
  | ListRoutesStep
  | DeviceHasIpv6Step
  | SetLinkUpStep
  | ListAddressesStep
  | SocketStep
  | ExecStep
  | NetnsIdStep
  | NftGenerationStep
  | DeleteNftTablesStep
  | IpsetStep
  | NetlinkWatchStep
  | NftCompileStep
  | NftBatchStep
  | RoutingStep;

export interface NftResult {
  op: 'nft';
  output: string;
}
export interface ChangeResult {
  op: string;
  changed: boolean;
  skipped: boolean;
}
export type FwmarkRuleEntry = FwmarkRuleSpec;
export interface ListFwmarkRulesResult {
  op: 'listFwmarkRules';
  rules: FwmarkRuleEntry[];
}
export interface RouteEntry {
  family: Family;
  dst: string;
  dstLen: number;
  type: number;
  dev: string;
  table: number;
}
export interface ListRoutesResult {
  op: 'listRoutes';
  routes: RouteEntry[];
}
export interface DeviceHasIpv6Result {
  op: 'deviceHasIpv6';
  hasIpv6: boolean;
}
export interface AddressEntry {
  family: Family;
  address: string;
  prefixLen: number;
  dev: string;
}
export interface ListAddressesResult {
  op: 'listAddresses';
  addresses: AddressEntry[];
}
export interface SocketResult {
  op: 'socket' | 'netlinkWatch';
  fd: number;
}
export interface ExecResult {
  op: 'exec';
  exitCode: number;
  signal: number;
  stdout: string;
  stderr: string;
}
export interface NetnsIdResult {
  op: 'netnsId';
  ino: number;
  dev: number;
}
export interface NftGenerationResult {
  op: 'nftGeneration';
  generation: number;
}
export interface IpsetEntry {
  ip: string;
  comment: string;
}
/** A missing set lists as exists: false with no entries. */
export interface IpsetListResult {
  op: 'ipsetList';
  exists: boolean;
  typeName: string;
  family: Family;
  revision: number;
  /** Created with comment support. */
  comments: boolean;
  entries: IpsetEntry[];
}
export interface RoutingResult {
  op: 'routing';
  changes: Array<{ changed: boolean; skipped: boolean }>;
}
export interface NftCompileResult {
  op: 'nftCompile';
  batch: Uint8Array;
}
export interface NftBatchResult {
  op: 'nftBatch';
  /**
   * The ruleset generation the batch's own commit made (the kernel echoes it), so the ruleset
   * of that generation is this batch applied; on a fallback, the generation right after the
   * text (see generationBefore). null when unknown.
   */
  generation: number | null;
  /** The kernel refused the batch and the text was applied instead; why, in fallbackReason. */
  fallback: boolean;
  fallbackReason?: string;
  /** On a fallback: the generation right before the text (the text's commit has no echo). */
  generationBefore?: number;
}

export type ResultOf<S extends Step> = S extends NftStep
  ? NftResult
  : S extends ListFwmarkRulesStep
    ? ListFwmarkRulesResult
    : S extends ListRoutesStep
      ? ListRoutesResult
      : S extends DeviceHasIpv6Step
        ? DeviceHasIpv6Result
        : S extends ListAddressesStep
          ? ListAddressesResult
          : S extends SocketStep | NetlinkWatchStep
            ? SocketResult
            : S extends ExecStep
              ? ExecResult
              : S extends NetnsIdStep
                ? NetnsIdResult
                : S extends NftGenerationStep
                  ? NftGenerationResult
                  : S extends IpsetListStep
                    ? IpsetListResult
                    : S extends NftCompileStep
                      ? NftCompileResult
                      : S extends NftBatchStep
                        ? NftBatchResult
                        : S extends RoutingStep
                          ? RoutingResult
                          : ChangeResult;

export type ResultsOf<S extends readonly Step[]> = { -readonly [K in keyof S]: ResultOf<S[K]> };

/** RTN_LOCAL from <linux/rtnetlink.h>: the route type of `ip route ... local ...`. */
export const RTN_LOCAL = 2;

const MAX_TIMEOUT_MS = 24 * 3600 * 1000;

function checkInteger(step: Step, key: string, value: number | undefined, max: number): void {
  if (value === undefined) return;
  if (!Number.isInteger(value) || value < 0 || value > max) {
    throw new TypeError(`${step.op} step: ${key} must be an integer from 0 to ${max}, got ${String(value)}`);
  }
}

/**
 * Rejects steps the addon would refuse, with a clear message before anything runs (the addon
 * checks again as a backstop). Ports and timeouts matter most: a wrapped port or a negative
 * timeout would otherwise mean a different port or an unbounded wait.
 */
export function assertValidSteps(steps: readonly Step[]): void {
  for (const step of steps) {
    if (step.op === 'socket') {
      checkInteger(step, 'bindPort', step.bindPort, 65535);
      checkInteger(step, 'connectPort', step.connectPort, 65535);
      checkInteger(step, 'timeoutMs', step.timeoutMs, MAX_TIMEOUT_MS);
      checkInteger(step, 'mark', step.mark, 0xffffffff);
      if (step.bindPort !== undefined && step.bindAddress === undefined) {
        throw new TypeError('socket step: bindPort needs bindAddress');
      }
      if ((step.connectAddress === undefined) !== (step.connectPort === undefined)) {
        throw new TypeError('socket step: connectAddress and connectPort go together');
      }
    }
    if (step.op === 'exec') {
      checkInteger(step, 'timeoutMs', step.timeoutMs, MAX_TIMEOUT_MS);
      if (step.argv.length === 0) throw new TypeError('exec step: argv must not be empty');
    }
  }
}
