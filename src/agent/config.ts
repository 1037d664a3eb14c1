// The agent's settings: every flag has the environment variable Istio's chart sets, flags win
// over the environment, and each bad value is reported in one clear line.
import { isIPv4, isIPv6 } from 'node:net';
import { hostname } from 'node:os';
import { parseArgs } from 'node:util';
import { DEFAULT_HOST_PROBE_SNAT_IPV4, DEFAULT_HOST_PROBE_SNAT_IPV6 } from '../rules/constants.js';
import { parseGoBool } from '../rules/settings.js';
import { UsageError } from '../util/usage-error.js';
import { applyOutputLevels, isPinoLevel, PINO_LEVELS, uniformLevels, type ScopeLevels } from '../ops/log-levels.js';
import { ADD_ANSWER_MS } from '../cni/protocol.js';

/**
 * The longest ztunnel wait allowed: an ADD that waited it out still has half a second for the
 * rest of its work (netns, rules, state file) and for the answer within ADD_ANSWER_MS.
 */
export const MAX_ZTUNNEL_WAIT_MS = ADD_ANSWER_MS - 500;
import { netnsDirProblem } from '../pods/netns-path.js';
import { BURST_IN_FLIGHT } from '../runtime/load-phases.js';
import { DEFAULT_TIER_UP_CALLS, MAX_TIER_UP_CALLS, v8TieringDefaults } from '../runtime/tier-up.js';

export type KubeMode = 'auto' | 'none';

/** --reconcile-nft-poll-interval's floor: asking hundreds of namespaces more often costs a core. */
const MIN_NFT_POLL_MS = 10;

export interface AgentConfig {
  cniBinDir: string;
  cniConfDir: string;
  cniConfName: string | undefined;
  runDir: string;
  zdsSocket: string;
  kubeMode: KubeMode;
  excludeNamespaces: string[];
  dnsCapture: boolean;
  ipv6: boolean;
  backend: 'nftables' | 'iptables';
  netnsRoot: string;
  /** NETNS_DIRS: netns directories accepted besides the runtimes' usual ones (src/pods/netns-path.ts). */
  netnsDirs: string[];
  procDir: string;
  /**
   * ALLOW_SWITCH_TO_HOST_NS (Istio's chart sets true unless the DaemonSet shares the host
   * network): host-side rules and sets go into `<procDir>/1/ns/net` instead of the agent's own.
   */
  allowSwitchToHostNs: boolean;
  healthPort: number;
  metricsPort: number;
  podNamespace: string;
  /** LOG_LEVEL / --log-level: every scope's starting level. */
  logLevel: string;
  /** Per scope, after --log-output-level (install-cni's --log_output_level). */
  logLevels: ScopeLevels;
  /** A malformed --log-output-level entry (Istio logs it and runs on with what came before it). */
  logLevelProblem: string | undefined;
  hostProbeSnatIpv4: string;
  hostProbeSnatIpv6: string;
  /** Where the plugin binary to install comes from (the image's copy). */
  pluginSource: string;
  kubeconfig: string | undefined;
  nodeName: string;
  /** AMBIENT_ENABLEMENT_SELECTOR (YAML); undefined means Istio's default selectors. */
  enablementSelector: string | undefined;
  systemNamespace: string;
  disableSafeUpgrade: boolean;
  /** AMBIENT_RECONCILE_POD_RULES_ON_STARTUP (Istio's chart sets true). */
  reconcilePodRulesOnStartup: boolean;
  /** AMBIENT_RECONCILE_ENROLLMENT_INTERVAL: the live reconciler's sweep; 0 turns the sweep off (events stay). */
  reconcileEnrollmentIntervalMs: number;
  /** How often the live reconciler asks each watched netns for its nftables generation; 0: the sweep only. */
  reconcileNftPollMs: number;
  chainedCniPlugin: boolean;
  /** ISTIO_OWNED_CNI_CONFIG: write our own conflist that sorts first instead of editing the primary. */
  istioOwnedCniConfig: boolean;
  istioOwnedCniConfigFilename: string | undefined;
  /** ENABLE_AMBIENT_DETECTION_RETRY: written into the plugin's config entry for Istio's plugin. */
  enableAmbientDetectionRetry: boolean;
  /** AMBIENT_ZTUNNEL_WAIT_TIMEOUT: how long an ADD waits for a (re)connecting ztunnel to ack its pod. */
  ztunnelWaitMs: number;
  /** After start and outside bursts, V8 optimises a function after this many calls (src/runtime/tier-up.ts); 0: V8's own. */
  tierUpCalls: number;
}

interface Option {
  flag: string;
  env: string | undefined;
  fallback: string;
  help: string;
  kind: 'string' | 'bool';
}

export const OPTIONS: readonly Option[] = [
  { flag: 'cni-bin-dir', env: 'CNI_BIN_DIR', fallback: '/host/opt/cni/bin', help: 'where the plugin binary is installed', kind: 'string' },
  {
    flag: 'cni-conf-dir',
    env: 'MOUNTED_CNI_NET_DIR',
    fallback: '/host/etc/cni/net.d',
    help: 'the node CNI config directory',
    kind: 'string',
  },
  { flag: 'cni-conf-name', env: 'CNI_CONF_NAME', fallback: '', help: 'primary CNI config file (default: first valid one)', kind: 'string' },
  {
    flag: 'run-dir',
    env: 'CNI_AGENT_RUN_DIR',
    fallback: '/var/run/istio-cni',
    help: 'sockets and state shared with the plugin',
    kind: 'string',
  },
  {
    flag: 'zds-socket',
    env: 'ZTUNNEL_UDS_ADDRESS',
    fallback: '/var/run/ztunnel/ztunnel.sock',
    help: 'ZDS socket ztunnel connects to',
    kind: 'string',
  },
  { flag: 'kube-mode', env: 'KUBE_MODE', fallback: 'auto', help: 'auto (Kubernetes when configured) or none (standalone)', kind: 'string' },
  {
    flag: 'exclude-namespaces',
    env: 'EXCLUDE_NAMESPACES',
    fallback: '',
    help: 'comma-separated namespaces never enrolled',
    kind: 'string',
  },
  { flag: 'dns-capture', env: 'AMBIENT_DNS_CAPTURE', fallback: 'true', help: 'redirect DNS to ztunnel (15053)', kind: 'bool' },
  { flag: 'ipv6', env: 'AMBIENT_IPV6', fallback: 'true', help: 'also redirect IPv6', kind: 'bool' },
  {
    flag: 'backend',
    env: 'NATIVE_NFTABLES',
    fallback: 'nftables',
    help: 'nftables or iptables (NATIVE_NFTABLES=false selects iptables)',
    kind: 'string',
  },
  {
    flag: 'netns-root',
    env: 'NETNS_ROOT',
    fallback: '/host',
    help: 'prefix for netns paths from the runtime (the host filesystem)',
    kind: 'string',
  },
  {
    flag: 'netns-dirs',
    env: 'NETNS_DIRS',
    fallback: '',
    help: 'comma-separated extra directories (host paths) where the runtime puts pod netns files, besides the usual ones',
    kind: 'string',
  },
  { flag: 'proc-dir', env: 'PROC_DIR', fallback: '/host/proc', help: "the host's /proc", kind: 'string' },
  {
    flag: 'allow-switch-to-host-ns',
    env: 'ALLOW_SWITCH_TO_HOST_NS',
    fallback: 'false',
    help: "host probe rules and sets in <proc-dir>/1/ns/net, not the agent's own netns",
    kind: 'bool',
  },
  { flag: 'health-port', env: 'HEALTH_PORT', fallback: '8000', help: '/healthz and /readyz', kind: 'string' },
  { flag: 'metrics-port', env: 'MONITORING_PORT', fallback: '15014', help: '/metrics', kind: 'string' },
  { flag: 'pod-namespace', env: 'POD_NAMESPACE', fallback: 'istio-system', help: "the agent's own namespace", kind: 'string' },
  {
    flag: 'log-level',
    env: 'LOG_LEVEL',
    fallback: 'info',
    help: 'every log scope starts at this level: trace, debug, info, warn, error, fatal or silent',
    kind: 'string',
  },
  {
    flag: 'log-output-level',
    env: undefined,
    fallback: '',
    help: "Istio's <scope>:<level>,... (scopes default, cni-agent, cni-plugin, all; levels debug, info, warn, error, fatal, none)",
    kind: 'string',
  },
  {
    flag: 'snat-ipv4',
    env: 'HOST_PROBE_SNAT_IP',
    fallback: DEFAULT_HOST_PROBE_SNAT_IPV4,
    help: 'kubelet probe SNAT address',
    kind: 'string',
  },
  {
    flag: 'snat-ipv6',
    env: 'HOST_PROBE_SNAT_IPV6',
    fallback: DEFAULT_HOST_PROBE_SNAT_IPV6,
    help: 'kubelet probe SNAT address (IPv6)',
    kind: 'string',
  },
  {
    flag: 'plugin-source',
    env: 'CNI_PLUGIN_SOURCE',
    fallback: '',
    help: 'plugin binary to install (default: build/Release/istio-cni)',
    kind: 'string',
  },
  { flag: 'kubeconfig', env: 'KUBECONFIG', fallback: '', help: 'kubeconfig file (default: in-cluster service account)', kind: 'string' },
  {
    flag: 'node-name',
    env: 'NODE_NAME',
    fallback: '',
    help: 'this node (default: KUBERNETES_NODE_NAME, then the hostname)',
    kind: 'string',
  },
  {
    flag: 'enablement-selector',
    env: 'AMBIENT_ENABLEMENT_SELECTOR',
    fallback: '',
    help: "YAML list of {podSelector, namespaceSelector} (default: Istio's)",
    kind: 'string',
  },
  {
    flag: 'system-namespace',
    env: 'SYSTEM_NAMESPACE',
    fallback: 'istio-system',
    help: "Istio's namespace (ztunnel pods are skipped)",
    kind: 'string',
  },
  {
    flag: 'disable-safe-upgrade',
    env: 'AMBIENT_DISABLE_SAFE_UPGRADE',
    fallback: 'false',
    help: 'always remove node artefacts on SIGTERM',
    kind: 'bool',
  },
  {
    flag: 'ambient-enabled',
    env: 'AMBIENT_ENABLED',
    fallback: 'true',
    help: 'ambient mode (the only mode this agent implements)',
    kind: 'bool',
  },
  {
    flag: 'chained-cni-plugin',
    env: 'CHAINED_CNI_PLUGIN',
    fallback: 'true',
    help: 'chain into the primary config (false: a standalone config file)',
    kind: 'bool',
  },
  {
    flag: 'istio-owned-cni-config',
    env: 'ISTIO_OWNED_CNI_CONFIG',
    fallback: 'false',
    help: 'leave the primary config alone; write our own that sorts first',
    kind: 'bool',
  },
  {
    flag: 'istio-owned-cni-config-filename',
    env: 'ISTIO_OWNED_CNI_CONFIG_FILENAME',
    fallback: '',
    help: 'its name (default 02-istio-cni.conflist)',
    kind: 'string',
  },
  {
    flag: 'ztunnel-wait-timeout',
    env: 'AMBIENT_ZTUNNEL_WAIT_TIMEOUT',
    fallback: '3s',
    help: `how long an ADD waits for a restarting ztunnel (Go duration, 0 to max ${MAX_ZTUNNEL_WAIT_MS}ms; 0 fails at once like Istio)`,
    kind: 'string',
  },
  {
    flag: 'reconcile-pod-rules-on-startup',
    env: 'AMBIENT_RECONCILE_POD_RULES_ON_STARTUP',
    fallback: 'true',
    help: 'verify and repair in-pod rules at start',
    kind: 'bool',
  },
  {
    flag: 'enable-ambient-detection-retry',
    env: 'ENABLE_AMBIENT_DETECTION_RETRY',
    fallback: 'false',
    help: "written into the CNI config entry for Istio's plugin (this plugin asks the agent, never the API server)",
    kind: 'bool',
  },
  {
    flag: 'reconcile-enrollment-interval',
    env: 'AMBIENT_RECONCILE_ENROLLMENT_INTERVAL',
    fallback: '30s',
    help: 'sweep verifying every enrolled pod and the host rules (Go duration; 0 = events only)',
    kind: 'string',
  },
  {
    flag: 'reconcile-nft-poll-interval',
    env: 'CNI_AGENT_RECONCILE_NFT_POLL_INTERVAL',
    fallback: '2s',
    help: `how often each watched netns is asked for its nftables generation (Go duration, 0 or at least ${MIN_NFT_POLL_MS}ms; 0 = the sweep only)`,
    kind: 'string',
  },
  {
    flag: 'tier-up-calls',
    env: 'CNI_AGENT_TIER_UP_CALLS',
    fallback: String(DEFAULT_TIER_UP_CALLS),
    help: `once started, V8 optimises a function after this many calls, so the per-pod path after that many pods (V8's own threshold on this Node: ${v8TieringDefaults()?.maglevCalls ?? 'not known'} calls); V8's own apply in bursts (from ${BURST_IN_FLIGHT} pod events in flight until none is left); 0 keeps V8's throughout`,
    kind: 'string',
  },
];

/**
 * Variables Istio's chart (manifests/charts/istio-cni) sets that this agent accepts and does not
 * use, with the reason: they never cause a warning or an error.
 */
export const ACCEPTED_UNUSED_ENV: ReadonlyArray<{ env: string; why: string }> = [
  { env: 'CURRENT_AGENT_VERSION', why: 'the chart tag; Istio does not read it either' },
  {
    env: 'ISTIO_OWNED_CNI_CONF_FILENAME',
    why: "the chart's spelling; Istio reads ISTIO_OWNED_CNI_CONFIG_FILENAME, so the owned file stays 02-istio-cni.conflist, here too",
  },
  { env: 'REPAIR_ENABLED', why: 'the repair controller is for sidecar pods (istio-validation init container); this agent is ambient only' },
  { env: 'REPAIR_LABEL_PODS', why: 'sidecar repair (see REPAIR_ENABLED)' },
  { env: 'REPAIR_DELETE_PODS', why: 'sidecar repair (see REPAIR_ENABLED)' },
  { env: 'REPAIR_REPAIR_PODS', why: 'sidecar repair (see REPAIR_ENABLED)' },
  { env: 'REPAIR_INIT_CONTAINER_NAME', why: 'sidecar repair (see REPAIR_ENABLED)' },
  { env: 'REPAIR_BROKEN_POD_LABEL_KEY', why: 'sidecar repair (see REPAIR_ENABLED)' },
  { env: 'REPAIR_BROKEN_POD_LABEL_VALUE', why: 'sidecar repair (see REPAIR_ENABLED)' },
  { env: 'REPAIR_NODE_NAME', why: 'sidecar repair (see REPAIR_ENABLED); the node is NODE_NAME' },
  { env: 'REPAIR_RUN_AS_DAEMON', why: 'unused by Istio too' },
  { env: 'REPAIR_SIDECAR_ANNOTATION', why: 'sidecar repair (see REPAIR_ENABLED)' },
  { env: 'GOMEMLIMIT', why: "the Go runtime's memory limit; Node's heap cannot be resized from the environment at run time" },
  { env: 'POD_NAME', why: 'the agent identifies itself by POD_NAMESPACE and the DaemonSet name' },
];

/** The flag / variable table and the accepted-but-unused variables (run --help, install-cni --help). */
export function optionsHelp(): string {
  const rows = OPTIONS.map((o) => `  --${o.flag.padEnd(31)} ${(o.env ?? '').padEnd(39)} ${o.help} (default ${JSON.stringify(o.fallback)})`);
  const unused = ACCEPTED_UNUSED_ENV.map((v) => `  ${v.env.padEnd(31)} ${v.why}`);
  return `flag / environment variable / meaning:\n${rows.join('\n')}\n\nset by Istio's chart, accepted and not used here:\n${unused.join('\n')}\n`;
}

export function usage(): string {
  return `usage: ambient-node-agent run [options]\n\n${optionsHelp()}`;
}

type Raw = Record<string, string>;

function collect(args: string[], env: NodeJS.ProcessEnv): Raw {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args,
      options: Object.fromEntries(OPTIONS.map((o) => [o.flag, { type: 'string' as const }])),
      strict: true,
    }));
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  return Object.fromEntries(OPTIONS.map((o) => [o.flag, String(values[o.flag] ?? (o.env ? env[o.env] : undefined) ?? o.fallback)]));
}

function bool(raw: Raw, flag: string, problems: string[]): boolean {
  const parsed = parseGoBool(raw[flag] ?? '');
  if (parsed === undefined) problems.push(`--${flag}: expected true or false, got ${JSON.stringify(raw[flag])}`);
  return parsed ?? false;
}

function port(raw: Raw, flag: string, problems: string[]): number {
  const n = Number(raw[flag]);
  if (!Number.isInteger(n) || n < 0 || n > 65535) problems.push(`--${flag}: expected a port number, got ${JSON.stringify(raw[flag])}`);
  return n;
}

const GO_DURATION_UNITS_MS: Record<string, number> = { ns: 1e-6, us: 1e-3, µs: 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** A Go duration ("3s", "1.5s", "500ms", "1m30s", "0") in milliseconds; undefined when malformed. */
export function parseGoDurationMs(text: string): number | undefined {
  if (text === '0') return 0;
  const parts = [...text.matchAll(/(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)/gy)];
  if (parts.length === 0 || parts.map((p) => p[0]).join('') !== text) return undefined;
  return parts.reduce((ms, p) => ms + Number(p[1]) * GO_DURATION_UNITS_MS[p[2]!]!, 0);
}

function ztunnelWait(raw: Raw, problems: string[]): number {
  const text = raw['ztunnel-wait-timeout'] ?? '';
  const ms = parseGoDurationMs(text);
  if (ms === undefined || ms > MAX_ZTUNNEL_WAIT_MS) {
    problems.push(
      `--ztunnel-wait-timeout: expected a duration from 0 to ${MAX_ZTUNNEL_WAIT_MS}ms (inside the ${ADD_ANSWER_MS} ms ADD answer), got ${JSON.stringify(text)}`,
    );
    return 0;
  }
  return Math.round(ms);
}

function tierUpCalls(raw: Raw, problems: string[]): number {
  const text = raw['tier-up-calls'] ?? '';
  const n = /^\d+$/.test(text) ? Number(text) : NaN;
  if (!(n <= MAX_TIER_UP_CALLS))
    problems.push(`--tier-up-calls: expected a number of calls from 0 to ${MAX_TIER_UP_CALLS}, got ${JSON.stringify(text)}`);
  return n <= MAX_TIER_UP_CALLS ? n : 0;
}

function duration(raw: Raw, flag: string, problems: string[]): number {
  const ms = parseGoDurationMs(raw[flag] ?? '');
  if (ms === undefined) problems.push(`--${flag}: expected a duration such as 30s, 1m or 0, got ${JSON.stringify(raw[flag])}`);
  return Math.round(ms ?? 0);
}

function nftPollInterval(raw: Raw, problems: string[]): number {
  const ms = duration(raw, 'reconcile-nft-poll-interval', problems);
  if (ms !== 0 && ms < MIN_NFT_POLL_MS) problems.push(`--reconcile-nft-poll-interval: 0 or at least ${MIN_NFT_POLL_MS}ms, got ${ms}ms`);
  return ms;
}

function backendOf(raw: string, problems: string[]): 'nftables' | 'iptables' {
  if (raw === 'nftables' || raw === 'iptables') return raw;
  const asBool = parseGoBool(raw); // NATIVE_NFTABLES=true|false, as Istio's chart sets it
  if (asBool !== undefined) return asBool ? 'nftables' : 'iptables';
  problems.push(`--backend: expected nftables or iptables, got ${JSON.stringify(raw)}`);
  return 'nftables';
}

function netnsDirs(raw: string, problems: string[]): string[] {
  const dirs = raw
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const dir of dirs) {
    const problem = netnsDirProblem(dir);
    if (problem) problems.push(`--netns-dirs: ${JSON.stringify(dir)} ${problem}`);
  }
  return dirs;
}

/** Parses flags and environment; throws one UsageError listing every bad value. */
export function loadAgentConfig(args: string[], env: NodeJS.ProcessEnv = process.env, defaultPluginSource = ''): AgentConfig {
  const raw = collect(args, env);
  const problems: string[] = [];
  const get = (flag: string): string => raw[flag] ?? '';
  const kubeMode = get('kube-mode');
  if (kubeMode !== 'auto' && kubeMode !== 'none') problems.push(`--kube-mode: expected auto or none, got ${JSON.stringify(kubeMode)}`);
  if (!isIPv4(get('snat-ipv4'))) problems.push(`--snat-ipv4: not an IPv4 address: ${JSON.stringify(get('snat-ipv4'))}`);
  if (!isIPv6(get('snat-ipv6'))) problems.push(`--snat-ipv6: not an IPv6 address: ${JSON.stringify(get('snat-ipv6'))}`);
  const logLevel = get('log-level');
  if (!isPinoLevel(logLevel))
    problems.push(`--log-level: unknown level ${JSON.stringify(logLevel)} (want one of ${PINO_LEVELS.join(', ')})`);
  const { levels: logLevels, error: logLevelProblem } = applyOutputLevels(
    get('log-output-level'),
    uniformLevels(isPinoLevel(logLevel) ? logLevel : 'info'),
  );
  const config: AgentConfig = {
    cniBinDir: get('cni-bin-dir'),
    cniConfDir: get('cni-conf-dir'),
    cniConfName: get('cni-conf-name') || undefined,
    runDir: get('run-dir'),
    zdsSocket: get('zds-socket'),
    kubeMode: kubeMode as KubeMode,
    excludeNamespaces: get('exclude-namespaces')
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean),
    dnsCapture: bool(raw, 'dns-capture', problems),
    ipv6: bool(raw, 'ipv6', problems),
    backend: backendOf(get('backend'), problems),
    netnsRoot: get('netns-root'),
    netnsDirs: netnsDirs(get('netns-dirs'), problems),
    procDir: get('proc-dir'),
    allowSwitchToHostNs: bool(raw, 'allow-switch-to-host-ns', problems),
    healthPort: port(raw, 'health-port', problems),
    metricsPort: port(raw, 'metrics-port', problems),
    podNamespace: get('pod-namespace'),
    logLevel,
    logLevels,
    logLevelProblem,
    hostProbeSnatIpv4: get('snat-ipv4'),
    hostProbeSnatIpv6: get('snat-ipv6'),
    pluginSource: get('plugin-source') || defaultPluginSource,
    kubeconfig: get('kubeconfig') || undefined,
    nodeName: get('node-name') || env['KUBERNETES_NODE_NAME'] || hostname(),
    enablementSelector: get('enablement-selector') || undefined,
    systemNamespace: get('system-namespace'),
    disableSafeUpgrade: bool(raw, 'disable-safe-upgrade', problems),
    reconcilePodRulesOnStartup: bool(raw, 'reconcile-pod-rules-on-startup', problems),
    reconcileEnrollmentIntervalMs: duration(raw, 'reconcile-enrollment-interval', problems),
    reconcileNftPollMs: nftPollInterval(raw, problems),
    chainedCniPlugin: bool(raw, 'chained-cni-plugin', problems),
    istioOwnedCniConfig: bool(raw, 'istio-owned-cni-config', problems),
    istioOwnedCniConfigFilename: get('istio-owned-cni-config-filename') || undefined,
    enableAmbientDetectionRetry: bool(raw, 'enable-ambient-detection-retry', problems),
    ztunnelWaitMs: ztunnelWait(raw, problems),
    tierUpCalls: tierUpCalls(raw, problems),
  };
  if (!bool(raw, 'ambient-enabled', problems))
    problems.push('--ambient-enabled: only ambient mode is implemented (sidecar-mode CNI is not); it must be true');
  if (problems.length > 0) throw new UsageError(problems.join('\n'));
  return config;
}
