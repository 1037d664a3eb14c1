// `ambient-node-agent run`: the DaemonSet entrypoint.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Agent, type Installer } from '../agent/agent.js';
import { installerFor } from '../cni-install/from-agent-config.js';
import { KubernetesSource, StandaloneSource, type PodSource, type SourceDeps } from '../agent/pod-sources.js';
import { loadKubeConfig } from '../kube/client.js';
import { loadAgentConfig, usage, type AgentConfig } from '../agent/config.js';
import { createLogger, type Logger } from '../ops/log.js';
import { projectRoot } from '../project-root.js';

export const RUN_USAGE = usage();

/**
 * `--kube-mode auto` picks Kubernetes when a kubeconfig or the in-cluster service account is
 * there; `none` (or neither) runs standalone.
 */
function sourceFactory(config: AgentConfig, env: NodeJS.ProcessEnv): (deps: SourceDeps) => PodSource {
  const kc = config.kubeMode === 'none' ? undefined : loadKubeConfig({ ...(config.kubeconfig ? { kubeconfig: config.kubeconfig } : {}), env });
  if (!kc) return (deps) => new StandaloneSource(deps);
  return (deps) =>
    new KubernetesSource(deps, {
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
}

function configFrom(args: string[]): AgentConfig {
  const defaultPlugin = join(projectRoot(), 'build', 'Release', 'istio-cni');
  return loadAgentConfig(args, process.env, existsSync(defaultPlugin) ? defaultPlugin : '');
}

export async function runAgent(args: string[], out: (s: string) => void, stop: Promise<void>, options: RunOptions = {}): Promise<number> {
  if (args.includes('--help') || args.includes('-h')) {
    out(RUN_USAGE);
    return 0;
  }
  const config = configFrom(args);
  const log = createLogger({ level: config.logLevel });
  const makeInstaller = options.makeInstaller ?? ((c, l) => installerFor(c, l));
  const installer = makeInstaller(config, log);
  const agent = new Agent(config, { log, makeSource: sourceFactory(config, process.env), ...(installer ? { installer } : {}) });
  // A SIGTERM may come while start() still waits (for a CNI config to appear, say): stop then.
  const started = agent.start();
  const first = await Promise.race([started.then(() => 'started' as const), stop.then(() => 'stop' as const)]);
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
    out(`usage: ambient-node-agent uninstall [run's --cni-* flags]\n\nRemoves the istio-cni entry from the CNI config and the plugin binary (in-pod rules stay).\n`);
    return 0;
  }
  const config = configFrom(args);
  const result = await installerFor({ ...config, pluginSource: config.pluginSource || '-' }).uninstall();
  out(`rewrote ${result.rewritten.join(', ') || 'nothing'}; removed ${result.removed.join(', ') || 'nothing'}\n`);
  return 0;
}
