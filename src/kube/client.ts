// Kubernetes API access for the node agent: where the credentials come from, and the few calls the
// agent makes outside its informers (status annotation patches, DaemonSet and pod reads).
import { existsSync } from 'node:fs';
import { isIPv6 } from 'node:net';
import {
  AppsV1Api,
  CoreV1Api,
  KubeConfig,
  PatchStrategy,
  setHeaderOptions,
  type V1DaemonSet,
  type V1Namespace,
  type V1NamespaceList,
  type V1Pod,
  type V1PodList,
} from '@kubernetes/client-node';

/** Where a pod's service account credentials are mounted (the same constant as the client library's). */
export const SERVICE_ACCOUNT_TOKEN_PATH = '/var/run/secrets/kubernetes.io/serviceaccount/token';

export interface LoadKubeConfigOptions {
  /** An explicit kubeconfig file (the --kubeconfig flag); wins over everything else. */
  kubeconfig?: string;
  env?: NodeJS.ProcessEnv;
  /** Test hook: prefix of the service account directory (the library's loadFromCluster pathPrefix). */
  serviceAccountPrefix?: string;
}

/**
 * Picks the API server credentials, in this order:
 *  1. an explicit kubeconfig path (a missing file is an error: the operator asked for it);
 *  2. in-cluster, when KUBERNETES_SERVICE_HOST is set and the service account token is mounted;
 *  3. the first existing file of KUBECONFIG (a path list, like kubectl's).
 * Returns undefined when none applies: the agent then runs standalone (no API server).
 */
export function loadKubeConfig(opts: LoadKubeConfigOptions = {}): KubeConfig | undefined {
  const env = opts.env ?? process.env;
  const kc = new KubeConfig();
  if (opts.kubeconfig) {
    if (!existsSync(opts.kubeconfig)) throw new Error(`kubeconfig ${opts.kubeconfig} does not exist`);
    kc.loadFromFile(opts.kubeconfig);
    return kc;
  }
  if (inCluster(env, opts.serviceAccountPrefix)) {
    kc.loadFromCluster(opts.serviceAccountPrefix);
    // loadFromCluster reads process.env; honour the environment we were given instead.
    const [cluster, ...others] = kc.clusters;
    if (cluster) kc.clusters = [{ ...cluster, server: inClusterServer(env) }, ...others];
    return kc;
  }
  const file = kubeconfigFromEnv(env);
  if (file) {
    kc.loadFromFile(file);
    return kc;
  }
  return undefined;
}

/** For `--kube-mode auto`: whether loadKubeConfig would find credentials (without reading them). */
export function kubeAvailable(env: NodeJS.ProcessEnv = process.env, opts: Omit<LoadKubeConfigOptions, 'env'> = {}): boolean {
  if (opts.kubeconfig) return existsSync(opts.kubeconfig);
  return inCluster(env, opts.serviceAccountPrefix) || kubeconfigFromEnv(env) !== undefined;
}

function inCluster(env: NodeJS.ProcessEnv, prefix = ''): boolean {
  return !!env['KUBERNETES_SERVICE_HOST'] && existsSync(`${prefix}${SERVICE_ACCOUNT_TOKEN_PATH}`);
}

/** Same URL rule as the library's loadFromCluster (ports 80/8080/8001 are plain HTTP). */
function inClusterServer(env: NodeJS.ProcessEnv): string {
  const host = env['KUBERNETES_SERVICE_HOST'] ?? '';
  const port = env['KUBERNETES_SERVICE_PORT'] ?? '443';
  const scheme = port === '80' || port === '8080' || port === '8001' ? 'http' : 'https';
  return `${scheme}://${isIPv6(host) ? `[${host}]` : host}:${port}`;
}

function kubeconfigFromEnv(env: NodeJS.ProcessEnv): string | undefined {
  const list = env['KUBECONFIG'];
  if (!list) return undefined;
  return list.split(':').find((p) => p !== '' && existsSync(p));
}

/** HTTP status of an error thrown by the generated API clients (ApiException.code), if any. */
export function httpStatusOf(err: unknown): number | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const code = (err as { code?: unknown }).code;
  return typeof code === 'number' ? code : undefined;
}

/** The agent's direct (non-informer) API calls. */
export class KubeApi {
  readonly core: CoreV1Api;
  readonly apps: AppsV1Api;

  constructor(readonly kc: KubeConfig) {
    this.core = kc.makeApiClient(CoreV1Api);
    this.apps = kc.makeApiClient(AppsV1Api);
  }

  /**
   * Sets (string) or removes (null) annotations with a JSON merge patch on pods/status: the only
   * subresource Istio's RBAC grants for this. The generated client would send json-patch by
   * default, which the API server rejects for a merge-patch body, hence the explicit header.
   * Resolves false when the pod no longer exists (nothing to annotate), true otherwise.
   */
  async patchPodAnnotations(namespace: string, name: string, annotations: Record<string, string | null>): Promise<boolean> {
    try {
      await this.core.patchNamespacedPodStatus(
        { name, namespace, body: { metadata: { annotations } } },
        setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
      );
      return true;
    } catch (err) {
      if (httpStatusOf(err) === 404) return false;
      throw err;
    }
  }

  async getPod(namespace: string, name: string): Promise<V1Pod | undefined> {
    return orUndefinedOn404(this.core.readNamespacedPod({ name, namespace }));
  }

  async getDaemonSet(namespace: string, name: string): Promise<V1DaemonSet | undefined> {
    return orUndefinedOn404(this.apps.readNamespacedDaemonSet({ name, namespace }));
  }

  async getNamespace(name: string): Promise<V1Namespace | undefined> {
    return orUndefinedOn404(this.core.readNamespace({ name }));
  }

  /** List function for a pod informer: this node's pods only (the field selector Istio uses). */
  listPodsOnNode(nodeName: string): () => Promise<V1PodList> {
    return () => this.core.listPodForAllNamespaces({ fieldSelector: `spec.nodeName=${nodeName}` });
  }

  /** List function for the namespace informer. */
  listNamespaces(): () => Promise<V1NamespaceList> {
    return () => this.core.listNamespace();
  }
}

async function orUndefinedOn404<T>(call: Promise<T>): Promise<T | undefined> {
  try {
    return await call;
  } catch (err) {
    if (httpStatusOf(err) === 404) return undefined;
    throw err;
  }
}
