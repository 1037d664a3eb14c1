// `ambient-node-agent run`: the DaemonSet entrypoint. Only light modules load before the ZDS
// socket is bound (see startAgent): after a restart, ztunnel's next connect attempt should find
// it, and each attempt that misses doubles ztunnel's back-off.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Installer } from '../agent/agent.js';
import type { AgentMode, ModeDeps } from '../agent/mode.js';
import { loadAgentConfig, usage, type AgentConfig } from '../agent/config.js';
import type { LogFormat, Logger } from '../ops/log.js';
import { projectRoot } from '../project-root.js';
import { bindZdsSocket } from '../zds/bind.js';

export const RUN_USAGE = usage();

/**
 * `--kube-mode auto` picks Kubernetes when a kubeconfig or the in-cluster service account is
 * there; `none` (or neither) runs standalone.
 */
async function modeFactory(config: AgentConfig, env: NodeJS.ProcessEnv): Promise<(deps: ModeDeps) => AgentMode> {
  const { StandaloneMode } = await import('../standalone/standalone-mode.js');
  const standalone = (deps: ModeDeps): AgentMode => new StandaloneMode(deps);
  if (config.kubeMode === 'none') return standalone; // without loading the Kubernetes client at all
  const { loadKubeConfig } = await import('../kube/client.js');
  const kc = loadKubeConfig({ ...(config.kubeconfig ? { kubeconfig: config.kubeconfig } : {}), env });
  if (!kc) return standalone;
  const { KubernetesMode } = await import('../kube/kube-mode.js');
  return (deps) =>
    new KubernetesMode(deps, {
      kc,
      nodeName: config.nodeName,
      ...(config.enablementSelector ? { enablementSelector: config.enablementSelector } : {}),
      systemNamespace: config.systemNamespace,
      daemonSetName: 'istio-cni-node',
      disableSafeUpgrade: config.disableSafeUpgrade,
      reconcileRulesOnStartup: config.reconcilePodRulesOnStartup,
    });
}

export interface RunOptions {
  makeInstaller?: (config: AgentConfig, log: Logger) => Installer | undefined;
  /** `run`: pino's JSON; `install-cni`: Istio's console lines, or its JSON with --log_as_json. */
  logFormat?: LogFormat;
  /** The usage text for --help (install-cni has its own). */
  usage?: string;
}

function configFrom(args: string[]): AgentConfig {
  const defaultPlugin = join(projectRoot(), 'build', 'Release', 'istio-cni');
  return loadAgentConfig(args, process.env, existsSync(defaultPlugin) ? defaultPlugin : '');
}

export async function runAgent(args: string[], out: (s: string) => void, stop: Promise<void>, options: RunOptions = {}): Promise<number> {
  if (args.includes('--help') || args.includes('-h')) {
    out(options.usage ?? RUN_USAGE);
    return 0;
  }
  const configured = configFrom(args);
  const zdsListener = bindZdsSocket(configured.zdsSocket);
  const [{ Agent }, { installerFor }, { createLogger, processLogger }, { NativeNetAddon }, { chooseBackend }] = await Promise.all([
    import('../agent/agent.js'),
    import('../cni-install/from-agent-config.js'),
    import('../ops/log.js'),
    import('../addon/net-addon.js'),
    import('../host/backend-fallback.js'),
  ]);
  const agentLog = createLogger({ levels: configured.logLevels, format: options.logFormat ?? 'json' });
  const log = processLogger(agentLog, configured.logLevels);
  // As Istio's install-cni: a bad --log_output_level is reported and the agent runs on.
  if (configured.logLevelProblem) agentLog.error({ err: configured.logLevelProblem }, 'failed to configure log levels');
  const addon = new NativeNetAddon();
  // Istio's migration guard: iptables while its ip sets are still on the node.
  const backend = await chooseBackend(addon, configured, agentLog);
  const config: AgentConfig = backend === configured.backend ? configured : { ...configured, backend };
  const makeInstaller = options.makeInstaller ?? ((c, l) => installerFor(c, l));
  const installer = makeInstaller(config, agentLog);
  const agent = new Agent(config, {
    addon,
    log: agentLog,
    zdsListener,
    makeMode: await modeFactory(config, process.env),
    ...(installer ? { installer } : {}),
  });
  // A SIGTERM may come while start() still waits (for a CNI config to appear, say): stop then.
  const started = agent.start();
  const first = await Promise.race([started.then(() => 'started' as const), stop.then(() => 'stop' as const)]).catch(
    async (err: unknown) => {
      // A failed start (no CAP_SYS_ADMIN, a host netns that cannot be opened) must end the process:
      // the servers it already opened would otherwise keep it alive, reporting nothing.
      await agent.stop().catch(() => undefined);
      throw err;
    },
  );
  if (first === 'started') await stop;
  else started.catch((err: unknown) => log.info({ err: (err as Error).message }, 'start interrupted by the stop signal'));
  log.info('stopping: in-pod rules stay in place');
  // The kubelet kills us after the grace period anyway; never hang past 10 s.
  setTimeout(() => {
    log.error('shutdown took longer than 10 s; exiting');
    process.exit(1);
  }, 10_000).unref();
  await agent.stop();
  return 0;
}

/** `ambient-node-agent uninstall`: removes our CNI config entry and the plugin binary. */
export async function uninstall(args: string[], out: (s: string) => void): Promise<number> {
  if (args.includes('--help') || args.includes('-h')) {
    out(
      `usage: ambient-node-agent uninstall [run's --cni-* flags]\n\nRemoves the istio-cni entry from the CNI config and the plugin binary (in-pod rules stay).\n`,
    );
    return 0;
  }
  const config = configFrom(args);
  const { installerFor } = await import('../cni-install/from-agent-config.js');
  // Uninstall writes no entry: a selector the agent would refuse must not stand in its way.
  const result = await installerFor({ ...config, enablementSelector: undefined, pluginSource: config.pluginSource || '-' }).uninstall();
  out(`rewrote ${result.rewritten.join(', ') || 'nothing'}; removed ${result.removed.join(', ') || 'nothing'}\n`);
  return 0;
}
