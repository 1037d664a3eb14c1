// deploy/ and the Dockerfile, checked statically (no cluster, no Docker daemon here).
//
// Validation, in two layers:
//  1. Schema: each document goes through its kubernetes-models class's validate(): the
//     Kubernetes OpenAPI schemas compiled to validators, shipped in the package (offline).
//     It catches missing required fields, wrong types and values outside an enum
//     (mountPropagation, hostPath.type, toleration operator, ...). The Kubernetes schemas do not
//     forbid unknown properties, so a misspelt field would pass; hence
//  2. Unknown fields: every key must be a field of its Kubernetes type, walked with the type map
//     of @kubernetes/client-node's generated models (what the API server would reject or drop).
// Then the essentials of Istio's chart for ambient, RBAC against the API calls the agent makes,
// every env var the manifests set against what the agent reads, and the Dockerfile.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, posix, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as k8s from '@kubernetes/client-node';
import type {
  V1ClusterRole,
  V1ClusterRoleBinding,
  V1ConfigMap,
  V1Container,
  V1DaemonSet,
  V1EnvVar,
  V1PodSpec,
  V1ServiceAccount,
} from '@kubernetes/client-node';
import { loadAll } from 'js-yaml';
import { parseInstallCniArgs } from '../../src/cli/install-cni-command.js';
import { imageNodeEnv } from '../../bench/image-runtime.js';
import { DaemonSet } from 'kubernetes-models/apps/v1/DaemonSet';
import { ClusterRole } from 'kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRole';
import { ClusterRoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRoleBinding';
import { ConfigMap } from 'kubernetes-models/v1/ConfigMap';
import { ServiceAccount } from 'kubernetes-models/v1/ServiceAccount';
import { describe, expect, it } from 'vitest';
import { loadAgentConfig, OPTIONS } from '../../src/agent/config.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const DEPLOY = join(ROOT, 'deploy');
const read = (path: string): string => readFileSync(join(ROOT, path), 'utf8');

type Obj = Record<string, unknown>;
interface Doc {
  file: string;
  index: number;
  obj: Obj;
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? filesUnder(path) : [path];
  });
}

const yamlFiles = filesUnder(DEPLOY)
  .filter((f) => /\.ya?ml$/.test(f))
  .sort();
const allDocs: Doc[] = yamlFiles.flatMap((path) =>
  loadAll(readFileSync(path, 'utf8'))
    .map((obj, index) => ({ file: relative(ROOT, path), index, obj: obj as Obj }))
    .filter((d) => d.obj !== null && d.obj !== undefined),
);
const isKustomization = (d: Doc): boolean => d.obj['kind'] === 'Kustomization';
/** The Kubernetes API objects (a kustomization.yaml is kustomize's input, not an API object). */
const docs = allDocs.filter((d) => !isKustomization(d));
const label = (d: Doc): string =>
  `${d.file}#${d.index} ${String(d.obj['kind'])}/${String((d.obj['metadata'] as Obj | undefined)?.['name'])}`;

function only<T>(kind: string, name: string): T {
  const found = docs.filter((d) => d.obj['kind'] === kind && (d.obj['metadata'] as Obj | undefined)?.['name'] === name);
  expect(found.map(label), `exactly one ${kind} ${name}`).toHaveLength(1);
  return found[0]!.obj as T;
}

// --- layer 1: kubernetes-models schemas, by apiVersion/kind -----------------------------------
type Validator = (data: unknown) => void;
const SCHEMAS: Record<string, Validator> = {
  'v1/ServiceAccount': (d) => new ServiceAccount(d as ConstructorParameters<typeof ServiceAccount>[0]).validate(),
  'v1/ConfigMap': (d) => new ConfigMap(d as ConstructorParameters<typeof ConfigMap>[0]).validate(),
  'rbac.authorization.k8s.io/v1/ClusterRole': (d) => new ClusterRole(d as ConstructorParameters<typeof ClusterRole>[0]).validate(),
  'rbac.authorization.k8s.io/v1/ClusterRoleBinding': (d) =>
    new ClusterRoleBinding(d as ConstructorParameters<typeof ClusterRoleBinding>[0]).validate(),
  'apps/v1/DaemonSet': (d) => new DaemonSet(d as ConstructorParameters<typeof DaemonSet>[0]).validate(),
};

// --- layer 2: unknown fields, with @kubernetes/client-node's model type maps ------------------
interface AttributeType {
  baseName: string;
  type: string;
}
const MODELS = k8s as unknown as Record<string, { getAttributeTypeMap?: () => AttributeType[] } | undefined>;

/** Paths of keys that are not fields of `type` (e.g. 'V1DaemonSet'), recursively. */
function unknownFields(value: unknown, type: string, path: string, out: string[] = []): string[] {
  if (value === null || value === undefined) return out;
  const array = /^Array<(.+)>$/.exec(type);
  if (array) {
    if (!Array.isArray(value)) out.push(`${path}: expected a list`);
    else value.forEach((v, i) => unknownFields(v, array[1]!, `${path}[${i}]`, out));
    return out;
  }
  const map = /^\{ \[key: string\]: (.+); \}$/.exec(type);
  if (map) {
    if (typeof value !== 'object' || Array.isArray(value)) out.push(`${path}: expected a map`);
    else for (const [k, v] of Object.entries(value)) unknownFields(v, map[1]!, `${path}.${k}`, out);
    return out;
  }
  if (['string', 'number', 'boolean', 'Date', 'any', 'IntOrString', 'object'].includes(type)) return out;
  const attributes = MODELS[type]?.getAttributeTypeMap?.();
  if (!attributes) throw new Error(`no @kubernetes/client-node model for type ${type} (at ${path})`);
  if (typeof value !== 'object' || Array.isArray(value)) {
    out.push(`${path}: expected an object (${type})`);
    return out;
  }
  for (const [key, v] of Object.entries(value)) {
    const attribute = attributes.find((a) => a.baseName === key);
    if (!attribute) out.push(`${path}.${key}: not a field of ${type}`);
    else unknownFields(v, attribute.type, `${path}.${key}`, out);
  }
  return out;
}
const modelName = (obj: Obj): string => `${String(obj['apiVersion']).split('/').pop()!.replace(/^v/, 'V')}${String(obj['kind'])}`;

describe('deploy/: every document is a valid Kubernetes object', () => {
  it('finds the manifests', () => {
    expect(yamlFiles.map((f) => relative(ROOT, f))).toContain('deploy/istio-cni-node.yaml');
    expect(docs.map((d) => `${String(d.obj['kind'])}/${String((d.obj['metadata'] as Obj)['name'])}`).sort()).toEqual([
      'ClusterRole/istio-cni',
      'ClusterRole/istio-cni-ambient',
      'ClusterRoleBinding/istio-cni',
      'ClusterRoleBinding/istio-cni-ambient',
      'ConfigMap/istio-cni-config',
      'DaemonSet/istio-cni-node',
      'ServiceAccount/istio-cni',
    ]);
  });

  it.each(docs.map((d) => [label(d), d] as const))('%s passes its kubernetes-models schema', (_name, d) => {
    const validate = SCHEMAS[`${String(d.obj['apiVersion'])}/${String(d.obj['kind'])}`];
    expect(validate, `a schema for ${String(d.obj['apiVersion'])} ${String(d.obj['kind'])}`).toBeDefined();
    expect(() => validate!(d.obj)).not.toThrow();
  });

  it.each(docs.map((d) => [label(d), d] as const))('%s has no field unknown to Kubernetes', (_name, d) => {
    expect(unknownFields(d.obj, modelName(d.obj), String(d.obj['kind']))).toEqual([]);
  });

  it('both layers catch what they are there for (a wrong enum value, a misspelt field)', () => {
    const ds = structuredClone(only<Obj>('DaemonSet', 'istio-cni-node')) as unknown as V1DaemonSet;
    const mount = ds.spec!.template.spec!.containers[0]!.volumeMounts!.find((m) => m.mountPropagation)!;
    mount.mountPropagation = 'Sideways';
    expect(() => SCHEMAS['apps/v1/DaemonSet']!(ds)).toThrow(/mountPropagation/);
    delete mount.mountPropagation;
    (mount as unknown as Obj)['mountPropogation'] = 'HostToContainer';
    expect(() => SCHEMAS['apps/v1/DaemonSet']!(ds)).not.toThrow(); // the schema allows unknown fields
    expect(unknownFields(ds, 'V1DaemonSet', 'DaemonSet')).toEqual([
      expect.stringMatching(/\.volumeMounts\[\d+\]\.mountPropogation: not a field of V1VolumeMount$/),
    ]);
  });

  it('namespaced objects are in istio-system, as Istio installs them', () => {
    for (const d of docs.filter((x) => ['ServiceAccount', 'ConfigMap', 'DaemonSet'].includes(String(x.obj['kind'])))) {
      expect((d.obj['metadata'] as Obj)['namespace'], label(d)).toBe('istio-system');
    }
  });

  it('kustomization.yaml lists every manifest and names the DaemonSet image', () => {
    const kustomizations = allDocs.filter(isKustomization);
    expect(kustomizations).toHaveLength(1);
    const k = kustomizations[0]!;
    const resources = (k.obj['resources'] as string[]).map((r) => posix.join('deploy', r)).sort();
    const manifestFiles = [...new Set(docs.map((d) => d.file))].sort();
    expect(resources).toEqual(manifestFiles);
    const image = container().image!;
    const images = k.obj['images'] as Array<{ name: string; newName?: string; newTag?: string }>;
    expect(images.map((i) => i.name)).toEqual([image.split(':')[0]]);
  });
});

// --- the DaemonSet ---------------------------------------------------------------------------
const daemonSet = (): V1DaemonSet => only<V1DaemonSet>('DaemonSet', 'istio-cni-node');
const podSpec = (): V1PodSpec => daemonSet().spec!.template.spec!;
function container(): V1Container {
  const containers = podSpec().containers;
  expect(containers.map((c) => c.name)).toEqual(['install-cni']);
  return containers[0]!;
}

describe('deploy/: the istio-cni-node DaemonSet matches Istio chart essentials for ambient', () => {
  it("runs as root, not privileged, with exactly the five capabilities of Istio's chart, AppArmor unconfined", () => {
    const sc = container().securityContext!;
    expect(sc.privileged).toBe(false);
    expect(sc.runAsUser).toBe(0);
    expect(sc.capabilities!.drop).toEqual(['ALL']);
    expect([...sc.capabilities!.add!].sort()).toEqual(['DAC_OVERRIDE', 'NET_ADMIN', 'NET_RAW', 'SYS_ADMIN', 'SYS_PTRACE']);
    const annotation = daemonSet().spec!.template.metadata?.annotations?.['container.apparmor.security.beta.kubernetes.io/install-cni'];
    expect(sc.appArmorProfile?.type === 'Unconfined' || annotation === 'unconfined').toBe(true);
  });

  it("mounts exactly the hostPaths Istio's chart mounts for ambient", () => {
    const expected = [
      { host: '/opt/cni/bin', mount: '/host/opt/cni/bin' },
      { host: '/etc/cni/net.d', mount: '/host/etc/cni/net.d' },
      { host: '/proc', mount: '/host/proc', readOnly: true, type: 'Directory' },
      { host: '/var/run/istio-cni', mount: '/var/run/istio-cni' },
      { host: '/var/run/netns', mount: '/host/var/run/netns', propagation: 'HostToContainer', type: 'DirectoryOrCreate' },
      { host: '/var/run/ztunnel', mount: '/var/run/ztunnel', type: 'DirectoryOrCreate' },
    ];
    const volumes = podSpec().volumes!;
    const mounts = container().volumeMounts!;
    expect(volumes.map((v) => v.hostPath?.path).sort()).toEqual(expected.map((e) => e.host).sort());
    expect(mounts).toHaveLength(expected.length);
    for (const e of expected) {
      const volume = volumes.find((v) => v.hostPath?.path === e.host)!;
      const mount = mounts.find((m) => m.name === volume.name);
      expect(mount, `a mount of ${e.host}`).toBeDefined();
      expect(mount!.mountPath, e.host).toBe(e.mount);
      expect(mount!.readOnly ?? false, `${e.host} read-only`).toBe(e.readOnly ?? false);
      expect(mount!.mountPropagation, `${e.host} propagation`).toBe(e.propagation);
      if (e.type) expect(volume.hostPath!.type, `${e.host} type`).toBe(e.type);
    }
  });

  it('runs on every Linux node: tolerates every taint, system-node-critical, switching to the node netns for the host side', () => {
    const spec = podSpec();
    expect(spec.priorityClassName).toBe('system-node-critical');
    expect(spec.nodeSelector).toEqual({ 'kubernetes.io/os': 'linux' });
    expect(spec.tolerations).toEqual(
      expect.arrayContaining([
        { effect: 'NoSchedule', operator: 'Exists' },
        { effect: 'NoExecute', operator: 'Exists' },
        { key: 'CriticalAddonsOnly', operator: 'Exists' },
      ]),
    );
    // Istio's chart default: its own network namespace, the host side switched to
    // /host/proc/1/ns/net (src/host/host-netns.ts).
    expect(spec.hostNetwork).toBeUndefined();
    expect(spec.dnsPolicy).toBeUndefined();
    expect(container().env).toContainEqual({ name: 'ALLOW_SWITCH_TO_HOST_NS', value: 'true' });
    expect(container().volumeMounts).toContainEqual(expect.objectContaining({ mountPath: '/host/proc', readOnly: true }));
    expect(spec.serviceAccountName).toBe('istio-cni');
    // The agent exits within 10 s of SIGTERM.
    expect(spec.terminationGracePeriodSeconds).toBeGreaterThanOrEqual(10);
  });

  it('has the readiness probe, the metrics port and the labels Istio relies on', () => {
    const c = container();
    expect(c.readinessProbe?.httpGet).toMatchObject({ path: '/readyz', port: 8000 });
    expect(c.ports).toEqual([expect.objectContaining({ containerPort: 15014, name: 'metrics' })]);
    const labels = daemonSet().spec!.template.metadata!.labels!;
    expect(labels).toMatchObject({ 'sidecar.istio.io/inject': 'false', 'istio.io/dataplane-mode': 'none', app: 'istio-cni-node' });
    // The selector is immutable: it must stay Istio's so `kubectl apply` can replace Istio's DaemonSet.
    expect(daemonSet().spec!.selector.matchLabels).toEqual({ 'k8s-app': 'istio-cni-node' });
    expect(labels).toMatchObject(daemonSet().spec!.selector.matchLabels!);
  });
});

// --- RBAC ------------------------------------------------------------------------------------
/** "group resource[/names] verb", one per verb, for every rule bound to the agent's account. */
function grantedPermissions(): string[] {
  const bindings = docs.filter((d) => d.obj['kind'] === 'ClusterRoleBinding').map((d) => d.obj as unknown as V1ClusterRoleBinding);
  const ours = bindings.filter((b) =>
    b.subjects?.some((s) => s.kind === 'ServiceAccount' && s.name === 'istio-cni' && s.namespace === 'istio-system'),
  );
  return ours.flatMap((b) => {
    expect(b.roleRef.kind).toBe('ClusterRole');
    const role = only<V1ClusterRole>('ClusterRole', b.roleRef.name);
    return (role.rules ?? []).flatMap((r) =>
      r.apiGroups!.flatMap((g) =>
        r.resources!.flatMap((res) =>
          r.verbs.map((v) => `${g || 'core'} ${res}${r.resourceNames ? `/${r.resourceNames.join(',')}` : ''} ${v}`),
        ),
      ),
    );
  });
}

/**
 * The permission each Kubernetes API call needs. The test below finds every CoreV1Api/AppsV1Api
 * method src/ calls, and every informer path; one missing here fails with its name.
 */
const CALL_PERMISSIONS: Record<string, string> = {
  listPodForAllNamespaces: 'core pods list',
  readNamespacedPod: 'core pods get',
  listNamespace: 'core namespaces list',
  readNamespace: 'core namespaces get',
  readNode: 'core nodes get', // SIGTERM upgrade check: this node's labels vs the DaemonSet's nodeSelector
  patchNamespacedPodStatus: 'core pods/status patch', // the ambient.istio.io/redirection annotation
  readNamespacedDaemonSet: 'apps daemonsets/istio-cni-node get', // SIGTERM: upgrade or uninstall?
};

const srcFiles = filesUnder(join(ROOT, 'src')).filter((f) => f.endsWith('.ts'));
const srcText = srcFiles.map((f) => readFileSync(f, 'utf8')).join('\n');

describe("deploy/: RBAC is Istio's for ambient and covers every API call the agent makes", () => {
  it("grants exactly what Istio's chart grants for ambient (no repair role)", () => {
    expect(grantedPermissions().sort()).toEqual(
      [
        ...['pods', 'nodes', 'namespaces'].flatMap((r) => ['get', 'list', 'watch'].map((v) => `core ${r} ${v}`)),
        'core pods/status patch',
        'core pods/status update',
        'apps daemonsets/istio-cni-node get',
      ].sort(),
    );
  });

  it("grants every permission the agent's API calls and informers need", () => {
    const apiMethods = new Set(
      [k8s.CoreV1Api, k8s.AppsV1Api].flatMap((c) => Object.getOwnPropertyNames(c.prototype)).filter((m) => m !== 'constructor'),
    );
    const called = [...new Set([...srcText.matchAll(/\.(\w+)\(/g)].map((m) => m[1]!).filter((m) => apiMethods.has(m)))].sort();
    expect(called.length).toBeGreaterThan(0);
    const unmapped = called.filter((m) => !(m in CALL_PERMISSIONS));
    expect(unmapped, 'API calls without a permission in CALL_PERMISSIONS (add it here and to deploy/)').toEqual([]);
    // Informers watch collection paths: '/api/v1/pods' -> core pods watch.
    const watched = [...srcText.matchAll(/path: '\/api\/v1\/(\w+)'/g)].map((m) => `core ${m[1]!} watch`);
    expect(watched.length).toBeGreaterThan(0);
    const granted = new Set(grantedPermissions());
    for (const need of [...called.map((m) => CALL_PERMISSIONS[m]!), ...watched]) expect(granted.has(need), need).toBe(true);
  });
});

// --- environment -----------------------------------------------------------------------------
const AGENT_ENV = new Set(OPTIONS.map((o) => o.env).filter((e): e is string => !!e));
/**
 * Variables the agent reads outside OPTIONS (each one's reader named; the test checks that the
 * name still occurs in src/). None of them needs setting in the manifests today.
 */
const READ_ELSEWHERE: Record<string, string> = {
  KUBERNETES_NODE_NAME: 'src/agent/config.ts: the node name when NODE_NAME is unset',
  KUBERNETES_SERVICE_HOST: 'src/kube/client.ts: in-cluster API address (set by the kubelet)',
  KUBERNETES_SERVICE_PORT: 'src/kube/client.ts: in-cluster API port (set by the kubelet)',
  AMBIENT_NATIVE_ADDON: 'src/addon/binding.ts: another path for ambient_native.node',
};
const isRead = (name: string): boolean => AGENT_ENV.has(name) || name in READ_ELSEWHERE;
/** The image's variables for the process itself, not the agent: read by the shell's exec, Node and glibc. */
const RUNTIME_ENV = ['PATH', 'NODE_OPTIONS', 'NODE_COMPILE_CACHE', 'MALLOC_ARENA_MAX', 'MALLOC_TRIM_THRESHOLD_', 'MALLOC_MMAP_THRESHOLD_'];

/** Every env var the container gets: env[] names and the keys envFrom/configMapKeyRef bring in. */
function containerEnv(): { names: string[]; values: Record<string, string> } {
  const c = container();
  const names: string[] = [];
  const values: Record<string, string> = {};
  // (configMapRef.name is optional in the client's types; a missing one reads as '' and fails.)
  const configMap = (name: string | undefined): V1ConfigMap => only<V1ConfigMap>('ConfigMap', name ?? '');
  for (const from of c.envFrom ?? []) {
    expect(from.secretRef, 'no secrets').toBeUndefined();
    const data = configMap(from.configMapRef?.name).data ?? {};
    for (const [key, value] of Object.entries(data)) {
      names.push(`${from.prefix ?? ''}${key}`);
      values[`${from.prefix ?? ''}${key}`] = value;
    }
  }
  for (const e of c.env ?? ([] as V1EnvVar[])) {
    names.push(e.name);
    const ref = e.valueFrom?.configMapKeyRef;
    if (ref) {
      const data = configMap(ref.name).data ?? {};
      expect(data, `${e.name}: ConfigMap ${ref.name} has key ${ref.key}`).toHaveProperty([ref.key]);
      values[e.name] = data[ref.key]!;
    } else if (e.valueFrom?.fieldRef) {
      // Downward API: stand-ins for what the kubelet fills in.
      values[e.name] = (
        { 'spec.nodeName': 'node-1', 'metadata.namespace': 'istio-system', 'metadata.name': 'istio-cni-node-x' } as Record<string, string>
      )[e.valueFrom.fieldRef.fieldPath]!;
    } else if (e.value !== undefined) values[e.name] = e.value;
  }
  return { names, values };
}

describe('deploy/: every env var the manifests set is one the agent reads', () => {
  it('each READ_ELSEWHERE entry is still read in src/', () => {
    for (const name of Object.keys(READ_ELSEWHERE)) expect(srcText, name).toMatch(new RegExp(`['"]${name}['"]`));
  });

  it('every env name and every ConfigMap key brought in is in OPTIONS (src/agent/config.ts) or READ_ELSEWHERE', () => {
    const { names } = containerEnv();
    expect(names).toEqual(expect.arrayContaining(['NODE_NAME', 'POD_NAMESPACE']));
    expect(names.filter((n) => !isRead(n))).toEqual([]);
    expect(new Set(names).size, 'no variable set twice').toBe(names.length);
    // A ConfigMap key no container brings in would be dead configuration too.
    for (const cm of docs.filter((d) => d.obj['kind'] === 'ConfigMap')) {
      for (const key of Object.keys((cm.obj as V1ConfigMap).data ?? {})) expect(isRead(key), `${label(cm)} ${key}`).toBe(true);
    }
  });

  it('NODE_NAME and POD_NAMESPACE come from the downward API', () => {
    const env = container().env ?? [];
    expect(env.find((e) => e.name === 'NODE_NAME')?.valueFrom?.fieldRef?.fieldPath).toBe('spec.nodeName');
    expect(env.find((e) => e.name === 'POD_NAMESPACE')?.valueFrom?.fieldRef?.fieldPath).toBe('metadata.namespace');
  });

  it('the agent accepts the values, and the paths and ports it derives are the mounted and probed ones', () => {
    const { values } = containerEnv();
    const config = loadAgentConfig([], { ...values, CNI_PLUGIN_SOURCE: dockerfileEnv()['CNI_PLUGIN_SOURCE']! });
    const mounts = container().volumeMounts!;
    const mounted = (path: string): boolean => mounts.some((m) => path === m.mountPath || path.startsWith(`${m.mountPath}/`));
    expect(config.nodeName).toBe('node-1');
    expect(config.podNamespace).toBe('istio-system');
    expect(config.systemNamespace).toBe('istio-system');
    expect(config.kubeMode).toBe('auto');
    for (const path of [
      config.cniBinDir,
      config.cniConfDir,
      config.runDir,
      config.zdsSocket,
      config.procDir,
      posix.join(config.netnsRoot, 'var/run/netns'),
    ]) {
      expect(mounted(path), `${path} is on a hostPath mount`).toBe(true);
    }
    expect(config.healthPort).toBe(container().readinessProbe!.httpGet!.port);
    expect(config.metricsPort).toBe(container().ports![0]!.containerPort);
    // What Istio's chart renders for ambient.
    expect(config).toMatchObject({ dnsCapture: true, ipv6: true, reconcilePodRulesOnStartup: true, excludeNamespaces: ['kube-system'] });
  });

  it("the container runs install-cni with Istio's flags, as the chart does", () => {
    expect(container().command).toEqual(['install-cni']);
    expect(() => parseInstallCniArgs(container().args ?? [])).not.toThrow();
    expect(
      parseInstallCniArgs(container().args ?? []).runArgs.filter((a) => a !== '--log-output-level' && !a.includes(':') && a !== 'info'),
    ).toEqual([]);
  });

  it('ServiceAccount has no automount opt-out (the agent uses the in-cluster token)', () => {
    expect(only<V1ServiceAccount>('ServiceAccount', 'istio-cni').automountServiceAccountToken).not.toBe(false);
  });
});

// --- Dockerfile ------------------------------------------------------------------------------
interface Instruction {
  op: string;
  args: string;
}
interface Stage {
  from: string;
  name: string | undefined;
  body: Instruction[];
}

/** Instructions with line continuations joined and comments dropped, grouped by FROM. */
function dockerStages(text: string): Stage[] {
  const logical = text
    .split('\n')
    .filter((l) => !/^\s*#/.test(l))
    .join('\n')
    .replace(/\\\n/g, ' ')
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean);
  const stages: Stage[] = [];
  for (const line of logical) {
    const [, op = '', args = ''] = /^(\S+)\s*(.*)$/.exec(line) ?? [];
    if (op.toUpperCase() === 'FROM') {
      const [image = '', as, name] = args.split(/\s+/);
      stages.push({ from: image, name: as?.toUpperCase() === 'AS' ? name : undefined, body: [] });
    } else {
      expect(stages.length, `${op} before the first FROM`).toBeGreaterThan(0);
      stages.at(-1)!.body.push({ op: op.toUpperCase(), args });
    }
  }
  return stages;
}

const dockerfile = read('Dockerfile');
const stages = dockerStages(dockerfile);
const finalStage = (): Stage => stages.at(-1)!;
const buildStage = (): Stage => stages.find((s) => s.name === 'build')!;
/** The stage whose file tree the final image is (COPY --from=<it> / /). */
const rootfsStage = (): Stage => {
  const whole = copies(finalStage()).find((c) => c.sources.length === 1 && c.sources[0] === '/' && c.dest === '/');
  expect(whole, 'the final stage copies a whole tree').toBeDefined();
  return stages.find((s) => s.name === whole!.from)!;
};

function dockerfileEnv(stage = finalStage()): Record<string, string> {
  const env: Record<string, string> = {};
  for (const i of stage.body.filter((x) => x.op === 'ENV')) {
    for (const m of i.args.matchAll(/(\w+)=("[^"]*"|\S+)/g)) env[m[1]!] = m[2]!.replace(/^"|"$/g, '');
  }
  return env;
}

/** Packages an `apt-get install` in the stage installs. */
function aptPackages(stage: Stage): string[] {
  return runCommands(stage)
    .map((cmd) => /apt-get\s+install\s+(.*)$/.exec(cmd)?.[1])
    .filter((s): s is string => s !== undefined)
    .flatMap((s) => s.split(/\s+/).filter((w) => w && !w.startsWith('-')));
}

/** The stage's RUN commands, split at && and ;. */
function runCommands(stage: Stage): string[] {
  return stage.body
    .filter((i) => i.op === 'RUN')
    .flatMap((i) => i.args.split(/&&|;/))
    .map((c) => c.trim());
}

/** COPY instructions of the stage: sources, absolute destination (WORKDIR applied), --from. */
function copies(stage: Stage): Array<{ from: string | undefined; sources: string[]; dest: string }> {
  let workdir = '/';
  const out: Array<{ from: string | undefined; sources: string[]; dest: string }> = [];
  for (const i of stage.body) {
    if (i.op === 'WORKDIR') workdir = posix.resolve(workdir, i.args);
    if (i.op !== 'COPY') continue;
    const words = i.args.startsWith('[') ? (JSON.parse(i.args) as string[]) : i.args.split(/\s+/);
    const flags = words.filter((w) => w.startsWith('--'));
    const paths = words.filter((w) => !w.startsWith('--'));
    const from = flags.find((f) => f.startsWith('--from='))?.slice('--from='.length);
    const sources = paths.slice(0, -1);
    const rawDest = paths.at(-1)!;
    const dest = posix.resolve(workdir, rawDest);
    out.push({
      from,
      sources,
      dest: rawDest.endsWith('/') && sources.length === 1 && sources[0] !== '/' ? posix.join(dest, posix.basename(sources[0]!)) : dest,
    });
  }
  return out;
}

function jsonForm(stage: Stage, op: string): string[] {
  const i = stage.body.filter((x) => x.op === op).at(-1);
  expect(i, op).toBeDefined();
  return JSON.parse(i!.args) as string[];
}

describe('Dockerfile (static checks; npm run test:image runs the built image)', () => {
  it('builds on Node 24 bookworm, takes its runtime tree from Node 24 bookworm-slim, and is that tree on scratch', () => {
    expect(buildStage().from).toBe('node:24-bookworm');
    expect(rootfsStage().from).toBe('node:24-bookworm-slim');
    expect(finalStage().from).toBe('scratch');
    expect(copies(finalStage())).toHaveLength(1); // one layer: nothing removed survives below it
  });

  it('needs no BuildKit: no `# syntax=` line, no RUN --mount, no heredoc', () => {
    expect(dockerfile).not.toMatch(/^#\s*syntax\s*=/im);
    expect(stages.flatMap((s) => s.body).filter((i) => /^--mount|<</.test(i.args))).toEqual([]);
  });

  it('runs npm through the checker (an npm error fails the build even when npm exits 0), builds, and drops the dev dependencies', () => {
    expect(aptPackages(buildStage())).toEqual(
      expect.arrayContaining(['libnftables-dev', 'libmnl-dev', 'nlohmann-json3-dev', 'g++', 'make', 'python3']),
    );
    const runs = runCommands(buildStage());
    expect(runs).toContain('node scripts/npm-checked.mjs ci --no-audit --no-fund');
    expect(runs).toContain('npm run build');
    expect(runs).toContain('node scripts/npm-checked.mjs prune --omit=dev --no-audit --no-fund');
    expect(runs.filter((c) => /^npm (ci|install|i|prune)\b/.test(c))).toEqual([]); // never unchecked
    expect(copies(buildStage()).some((c) => c.sources.includes('scripts/npm-checked.mjs'))).toBe(true);
  });

  it('the runtime tree has the runtime libraries and tools, no compiler, and no npm, yarn, corepack or Node headers', () => {
    const packages = aptPackages(rootfsStage());
    expect(packages).toEqual(expect.arrayContaining(['libnftables1', 'libmnl0', 'nftables', 'iptables', 'iproute2']));
    const toolchain = /^(g\+\+|gcc|cc|c\+\+|cpp|clang|llvm|make|cmake|ninja-build|python3?|build-essential)(-[\d.]+)?$|-dev$/;
    expect(packages.filter((p) => toolchain.test(p))).toEqual([]);
    const removed = runCommands(rootfsStage())
      .filter((c) => c.startsWith('rm -rf '))
      .flatMap((c) => c.slice('rm -rf '.length).split(/\s+/));
    expect(removed).toEqual(
      expect.arrayContaining([
        '/usr/local/lib/node_modules',
        '/usr/local/include/node',
        '/opt/yarn-v*',
        '/usr/local/bin/npm',
        '/usr/local/bin/npx',
        '/usr/local/bin/corepack',
        '/usr/local/bin/yarn',
        '/usr/local/bin/yarnpkg',
      ]),
    );
  });

  it("has Istio's layout: the plugin at /opt/cni/bin/istio-cni (CNI_PLUGIN_SOURCE), /usr/local/bin/install-cni the CLI, install-cni the default command", () => {
    const source = dockerfileEnv()['CNI_PLUGIN_SOURCE'];
    expect(source).toBe('/opt/cni/bin/istio-cni');
    const plugin = copies(rootfsStage()).find((c) => c.dest === source);
    expect(plugin, `a COPY to ${source}`).toBeDefined();
    expect(plugin!.from).toBe(buildStage().name);
    expect(plugin!.sources).toEqual([expect.stringMatching(/(^|\/)build\/Release\/istio-cni$/)]);
    const runs = runCommands(rootfsStage());
    expect(runs).toContain('ln -s /app/dist/src/cli/main.js /usr/local/bin/install-cni');
    expect(runs).toContain('ln -s /app/dist/src/cli/main.js /usr/local/bin/ambient-node-agent');
    expect(runs.find((c) => c.startsWith('chmod 0755 '))).toContain('/app/dist/src/cli/main.js');
    expect(readFileSync(join(ROOT, 'src/cli/main.ts'), 'utf8').startsWith('#!/usr/bin/env node\n')).toBe(true);
    expect(finalStage().body.filter((i) => i.op === 'ENTRYPOINT')).toEqual([]);
    expect(jsonForm(finalStage(), 'CMD')).toEqual(['/usr/local/bin/install-cni']);
    expect(dockerfileEnv()['PATH']?.split(':')).toEqual(expect.arrayContaining(['/usr/local/bin', '/usr/bin', '/bin']));
  });

  it('the app root holds what the agent loads from it', () => {
    const pkg = JSON.parse(read('package.json')) as { bin: Record<string, string> };
    expect(pkg.bin['ambient-node-agent']).toBe('dist/src/cli/main.js');
    // src/project-root.ts: the app root is the first folder upwards with package.json.
    const appRoot = '/app';
    const dests = copies(rootfsStage())
      .filter((c) => c.from === buildStage().name)
      .map((c) => c.dest);
    expect(dests).toEqual(
      expect.arrayContaining([
        `${appRoot}/package.json`,
        `${appRoot}/node_modules`,
        `${appRoot}/dist`,
        `${appRoot}/build/Release/ambient_native.node`, // src/addon/binding.ts
      ]),
    );
  });

  it('runs as root (the agent needs CAP_NET_ADMIN, CAP_SYS_ADMIN, ...) and sets only variables the agent reads (and PATH)', () => {
    const users = finalStage()
      .body.filter((i) => i.op === 'USER')
      .map((i) => i.args);
    expect(users.every((u) => u === 'root' || u === '0')).toBe(true);
    expect(Object.keys(dockerfileEnv()).filter((n) => !RUNTIME_ENV.includes(n) && !isRead(n))).toEqual([]);
  });

  it("caps Node 24's young generation at 2 x 4 MB, glibc at two malloc arenas and fixed thresholds, and CI's Node 24 run uses the same variables", () => {
    const env = dockerfileEnv();
    expect(env['NODE_OPTIONS']).toBe('--max-semi-space-size=4');
    expect(env['MALLOC_ARENA_MAX']).toBe('2');
    // glibc's defaults, fixed: no dynamic growth of either threshold.
    expect(env['MALLOC_TRIM_THRESHOLD_']).toBe('131072');
    expect(env['MALLOC_MMAP_THRESHOLD_']).toBe('131072');
    const script = read('scripts/test-node-lts.sh');
    expect(script).toContain(`export NODE_OPTIONS="${env['NODE_OPTIONS']}\${NODE_OPTIONS:+ $NODE_OPTIONS}"`);
    for (const name of ['MALLOC_ARENA_MAX', 'MALLOC_TRIM_THRESHOLD_', 'MALLOC_MMAP_THRESHOLD_']) {
      expect(script).toContain(`export ${name}=${env[name]}\n`);
    }
  });

  it("fills Node's compile cache at build time, at the final stage's NODE_COMPILE_CACHE, with the app's modules", () => {
    const cache = dockerfileEnv()['NODE_COMPILE_CACHE'];
    expect(cache).toBe('/app/compile-cache');
    expect(runCommands(rootfsStage())).toContain(`NODE_COMPILE_CACHE=${cache} node scripts/warm-compile-cache.mjs /app`);
    const script = copies(rootfsStage()).find((c) => c.dest === '/app/scripts/warm-compile-cache.mjs');
    expect(script?.sources).toEqual(['scripts/warm-compile-cache.mjs']);
    // The node benchmark runs its agent with the same variables (and a cache warmed the same way).
    const runtime = Object.fromEntries(Object.entries(dockerfileEnv()).filter(([n]) => n.startsWith('NODE_') || n.startsWith('MALLOC_')));
    expect(imageNodeEnv(dockerfile)).toEqual(runtime);
  });

  it('copies from the build context only files that exist and that .dockerignore keeps', () => {
    const ignored = read('.dockerignore')
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith('#'));
    expect(ignored).toEqual(expect.arrayContaining(['node_modules', 'build', 'dist', '.git']));
    const contextSources = stages.flatMap((s) =>
      copies(s)
        .filter((c) => c.from === undefined)
        .flatMap((c) => c.sources),
    );
    expect(contextSources.length).toBeGreaterThan(0);
    for (const src of contextSources) {
      expect(() => statSync(join(ROOT, src)), src).not.toThrow();
      expect(ignored.includes(src.split('/')[0]!), `${src} is excluded by .dockerignore`).toBe(false);
    }
    // What tsconfig.json compiles for the agent (src/) and what binding.gyp builds (native/) are copied.
    expect(contextSources).toEqual(
      expect.arrayContaining(['package.json', 'package-lock.json', 'binding.gyp', 'tsconfig.json', 'native', 'src']),
    );
  });

  it('deploy/README.md says how to build the image and apply the manifests', () => {
    const readme = read('deploy/README.md');
    expect(readme).toContain('docker build');
    expect(readme).toContain('kubectl apply -k');
  });
});
