// The istio-cni plugin binary (native/cni-plugin) driven as a container runtime drives it: argv
// only, CNI_* environment, network config on stdin, result or spec error on stdout. The node
// agent is an in-process fake on <tmp run dir>/pluginevent.sock. No root needed.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  ENABLEMENT_SNAPSHOT_FILE,
  PLUGIN_EVENT_SOCKET,
  type EnablementSnapshot,
  type PluginAddEvent,
  type PluginDelEvent,
} from '../../src/cni/protocol.js';
import { FakePluginAgent, neverReply, RawPluginAgent, reply, replyChunked } from '../helpers/plugin-agent.js';
import { cniArgs, netconf, type PodArgs, PLUGIN_BINARY, requirePluginBinary, runPlugin, stdoutJson } from '../helpers/plugin-exec.js';

const POD: Required<PodArgs> = {
  name: 'web-7d9c',
  namespace: 'shop',
  uid: '0b6c9f3e-1111-4a5b-9c1d-2e3f4a5b6c7d',
  infraContainerId: 'infra-abc',
};
const CONTAINER_ID = 'c0ffee0123456789';
const NETNS = '/var/run/netns/cni-1234-5678';

// What a primary CNI (e.g. ptp/bridge) hands on, in each result version.
const PREV_RESULT_100 = {
  cniVersion: '1.0.0',
  interfaces: [
    { name: 'eth0', mac: '0a:58:0a:f4:01:05', sandbox: NETNS },
    { name: 'net1', mac: '0a:58:ac:10:03:04', sandbox: NETNS },
  ],
  ips: [
    { interface: 0, address: '10.244.1.5/24', gateway: '10.244.1.1' },
    { address: '172.16.3.4/16' },
    { interface: 0, address: 'fd00:10:244:0::5/64', gateway: 'fd00:10:244::1' },
  ],
  routes: [{ dst: '0.0.0.0/0', gw: '10.244.1.1' }],
  dns: { nameservers: ['10.96.0.10'] },
};

const PREV_RESULT_031 = {
  cniVersion: '0.3.1',
  interfaces: [{ name: 'eth0', mac: '0a:58:0a:f4:01:05', sandbox: NETNS }],
  ips: [
    { version: '4', interface: 0, address: '10.244.1.5/24', gateway: '10.244.1.1' },
    { version: '4', address: '172.16.3.4/16' },
  ],
  routes: [{ dst: '0.0.0.0/0' }],
  dns: {},
};

// Go's JSON of net.IPNet / IPConfig for the addresses above (masks are base64 of the bytes).
const IPS_100 = [
  { Interface: 0, Address: { IP: '10.244.1.5', Mask: '////AA==' }, Gateway: '10.244.1.1' },
  { Interface: null, Address: { IP: '172.16.3.4', Mask: '//8AAA==' }, Gateway: '' },
  { Interface: 0, Address: { IP: 'fd00:10:244::5', Mask: '//////////8AAAAAAAAAAA==' }, Gateway: 'fd00:10:244::1' },
];

function cniEnv(command: string, pod: PodArgs = POD, extra: Record<string, string | undefined> = {}): Record<string, string | undefined> {
  return {
    CNI_COMMAND: command,
    CNI_CONTAINERID: CONTAINER_ID,
    CNI_NETNS: NETNS,
    CNI_IFNAME: 'eth0',
    CNI_PATH: '/opt/cni/bin',
    CNI_ARGS: cniArgs(pod),
    ...extra,
  };
}

interface SpecError {
  cniVersion: string;
  code: number;
  msg: string;
  details?: string;
}

function specError(run: Awaited<ReturnType<typeof runPlugin>>): SpecError {
  expect(run.status, `expected a failing exit, stderr: ${run.stderr}`).not.toBe(0);
  const err = stdoutJson(run) as unknown as SpecError;
  expect(typeof err.code).toBe('number');
  expect(typeof err.msg).toBe('string');
  return err;
}

function expectSuccess(run: Awaited<ReturnType<typeof runPlugin>>): void {
  expect(run.status, `exit ${run.status}, stdout: ${run.stdout}, stderr: ${run.stderr}`).toBe(0);
  expect(run.signal).toBeNull();
}

function writeSnapshot(runDir: string, snapshot: Partial<EnablementSnapshot>): void {
  const full: EnablementSnapshot = {
    version: 1,
    allNamespaces: false,
    namespaces: [],
    excludedNamespaces: [],
    generatedAt: '2026-01-01T00:00:00.000Z',
    ...snapshot,
  };
  writeFileSync(join(runDir, ENABLEMENT_SNAPSHOT_FILE), JSON.stringify(full));
}

describe('istio-cni plugin binary', () => {
  let runDir: string;
  let agent: FakePluginAgent | undefined;
  let raw: RawPluginAgent | undefined;

  beforeAll(() => {
    requirePluginBinary(); // fails every test with the build hint rather than with ENOENT
  });

  beforeEach(() => {
    runDir = mkdtempSync(join(tmpdir(), 'cni-plugin-'));
  });

  afterEach(async () => {
    await agent?.close();
    await raw?.close();
    agent = undefined;
    raw = undefined;
    rmSync(runDir, { recursive: true, force: true });
  });

  async function startAgent(respond = reply(200)): Promise<FakePluginAgent> {
    agent = await FakePluginAgent.start(runDir, respond);
    return agent;
  }

  describe('ADD', () => {
    it('POSTs the pod to /cmdadd and echoes a 1.0.0 prevResult', async () => {
      const a = await startAgent();
      const run = await runPlugin(cniEnv('ADD'), netconf(runDir, { prevResult: PREV_RESULT_100 }));
      expectSuccess(run);
      expect(stdoutJson(run)).toEqual({ ...PREV_RESULT_100, cniVersion: '1.0.0' });
      expect(run.stderr).toBe(''); // quiet by default when all is well

      expect(a.requests).toHaveLength(1);
      const [req] = a.requests;
      expect(req?.method).toBe('POST');
      expect(req?.url).toBe('/cmdadd');
      expect(req?.headers.host).toBe('unix');
      expect(req?.headers['content-type']).toBe('application/json');
      expect(Number(req?.headers['content-length'])).toBe(Buffer.byteLength(req?.rawBody ?? ''));
      const expected: PluginAddEvent = {
        Netns: NETNS,
        PodName: POD.name,
        PodNamespace: POD.namespace,
        IPs: IPS_100,
        PodUID: POD.uid,
        ContainerID: CONTAINER_ID,
      };
      expect(req?.body).toEqual(expected);
      // Go's field order, so the bytes look like what Istio's plugin sends.
      expect(Object.keys(req?.body as object)).toEqual(['Netns', 'PodName', 'PodNamespace', 'IPs', 'PodUID', 'ContainerID']);
    });

    it('echoes a 0.3.1 prevResult in 0.3.1 and sends the same IP conversion', async () => {
      const a = await startAgent();
      const run = await runPlugin(cniEnv('ADD'), netconf(runDir, { cniVersion: '0.3.1', prevResult: PREV_RESULT_031 }));
      expectSuccess(run);
      expect(stdoutJson(run)).toEqual({ ...PREV_RESULT_031, cniVersion: '0.3.1' });
      expect(a.requests[0]?.body).toEqual({
        Netns: NETNS,
        PodName: POD.name,
        PodNamespace: POD.namespace,
        IPs: [IPS_100[0], IPS_100[1]],
        PodUID: POD.uid,
        ContainerID: CONTAINER_ID,
      });
    });

    it('stamps the config version on a prevResult that lacks one', async () => {
      await startAgent();
      const { cniVersion: _dropped, ...noVersion } = PREV_RESULT_100;
      const run = await runPlugin(cniEnv('ADD'), netconf(runDir, { cniVersion: '1.1.0', prevResult: noVersion }));
      expectSuccess(run);
      expect(stdoutJson(run)).toEqual({ ...noVersion, cniVersion: '1.1.0' });
    });

    it('prints an empty result without prevResult, and sends no IPs and no PodUID when absent', async () => {
      const a = await startAgent();
      const { uid: _uid, ...noUid } = POD;
      const run = await runPlugin(cniEnv('ADD', noUid), netconf(runDir));
      expectSuccess(run);
      expect(stdoutJson(run)).toEqual({ cniVersion: '1.0.0', dns: {} });
      expect(a.requests[0]?.body).toEqual({
        Netns: NETNS,
        PodName: POD.name,
        PodNamespace: POD.namespace,
        IPs: [],
        ContainerID: CONTAINER_ID,
      });
    });

    it('ignores unknown CNI_ARGS keys', async () => {
      const a = await startAgent();
      const env = cniEnv('ADD', POD, { CNI_ARGS: `${cniArgs(POD, ['IgnoreUnknown=true', 'FOO=bar', 'K8S_POD_TENANT=x'])};` });
      const run = await runPlugin(env, netconf(runDir, { prevResult: PREV_RESULT_100 }));
      expectSuccess(run);
      expect((a.requests[0]?.body as PluginAddEvent).PodName).toBe(POD.name);
    });

    describe('skips without contacting the agent and prints prevResult', () => {
      const cases: [string, PodArgs, Record<string, unknown>][] = [
        ['no Kubernetes CNI_ARGS', {}, {}],
        ['a pod name without namespace', { name: 'x' }, {}],
        ['an excluded namespace', { ...POD, namespace: 'kube-system' }, {}],
        ['the agent’s own pod', { ...POD, name: 'istio-cni-node-x7k2p', namespace: 'istio-system' }, {}],
        [
          'the agent’s own pod even with ambient off',
          { ...POD, name: 'istio-cni-node-x7k2p', namespace: 'istio-system' },
          { ambient_enabled: false },
        ],
        ['ambient_enabled false', POD, { ambient_enabled: false }],
      ];
      it.each(cases)('%s', async (_label, pod, overrides) => {
        const a = await startAgent(reply(500, 'must not be called'));
        const run = await runPlugin(cniEnv('ADD', pod), netconf(runDir, { prevResult: PREV_RESULT_100, ...overrides }));
        expectSuccess(run);
        expect(stdoutJson(run)).toEqual({ ...PREV_RESULT_100, cniVersion: '1.0.0' });
        expect(a.requests).toHaveLength(0);
      });

      it('a pod named istio-cni-node-* in another namespace is not skipped', async () => {
        const a = await startAgent();
        const run = await runPlugin(cniEnv('ADD', { ...POD, name: 'istio-cni-node-fake' }), netconf(runDir));
        expectSuccess(run);
        expect(a.requests).toHaveLength(1);
      });

      it('exclude_namespaces may be null', async () => {
        const a = await startAgent();
        const run = await runPlugin(cniEnv('ADD', { ...POD, namespace: 'kube-system' }), netconf(runDir, { exclude_namespaces: null }));
        expectSuccess(run);
        expect(a.requests).toHaveLength(1);
      });
    });

    it('fails with 999 and Istio’s message when the agent answers 500', async () => {
      await startAgent(reply(500, 'pod shop/web-7d9c does not match the enablement selectors'));
      const run = await runPlugin(cniEnv('ADD'), netconf(runDir, { prevResult: PREV_RESULT_100 }));
      const err = specError(run);
      expect(err.code).toBe(999);
      expect(err.cniVersion).toBe('1.0.0');
      expect(err.msg).toBe(
        'istio-cni cmdAdd failed to contact node Istio CNI agent: unable to push CNI event (status code 500): pod shop/web-7d9c does not match the enablement selectors',
      );
      expect(run.stderr).toMatch(/"level":"error"/);
    });

    it('reads a chunked error body', async () => {
      await startAgent(replyChunked(503, 'no ztunnel connection, try again'));
      const err = specError(await runPlugin(cniEnv('ADD'), netconf(runDir)));
      expect(err.code).toBe(999);
      expect(err.msg).toMatch(/\(status code 503\): no ztunnel connection, try again$/);
    });

    it('reads replies delimited by the connection closing', async () => {
      raw = await RawPluginAgent.start(runDir, 'HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nok');
      const run = await runPlugin(cniEnv('ADD'), netconf(runDir, { prevResult: PREV_RESULT_100 }));
      expectSuccess(run);
      await raw.close();
      raw = await RawPluginAgent.start(runDir, 'HTTP/1.0 500 Internal Server Error\r\n\r\nboom\n');
      const err = specError(await runPlugin(cniEnv('ADD'), netconf(runDir)));
      expect(err.msg).toBe('istio-cni cmdAdd failed to contact node Istio CNI agent: unable to push CNI event (status code 500): boom');
    });

    describe('agent unreachable', () => {
      it('fails an ambient namespace with 11 (try again later)', async () => {
        writeSnapshot(runDir, { namespaces: ['shop'] });
        const run = await runPlugin(cniEnv('ADD'), netconf(runDir, { prevResult: PREV_RESULT_100 }));
        const err = specError(run);
        expect(err.code).toBe(11);
        expect(err.msg).toMatch(/failed to contact node Istio CNI agent/);
        expect(err.msg).toMatch(/try again later/);
        expect(err.details).toMatch(/namespace shop is ambient/);
      });

      it('fails with 11 when all namespaces are ambient and this one is not excluded', async () => {
        writeSnapshot(runDir, { allNamespaces: true, excludedNamespaces: ['other'] });
        expect(specError(await runPlugin(cniEnv('ADD'), netconf(runDir))).code).toBe(11);
      });

      it('starts a pod whose namespace is not ambient, with a warning', async () => {
        writeSnapshot(runDir, { allNamespaces: true, excludedNamespaces: ['shop'], namespaces: ['bank'] });
        const run = await runPlugin(cniEnv('ADD'), netconf(runDir, { prevResult: PREV_RESULT_100 }));
        expectSuccess(run);
        expect(stdoutJson(run)).toEqual({ ...PREV_RESULT_100, cniVersion: '1.0.0' });
        const lines = run.stderr.trim().split('\n');
        expect(lines).toHaveLength(1);
        expect(JSON.parse(lines[0] ?? '')).toMatchObject({ level: 'warn', pod: 'shop/web-7d9c', container: CONTAINER_ID });
        expect(run.stderr).toMatch(/unreachable/);
      });

      it('starts the pod when there is no enablement snapshot, with a warning', async () => {
        const run = await runPlugin(cniEnv('ADD'), netconf(runDir, { prevResult: PREV_RESULT_100 }));
        expectSuccess(run);
        expect(stdoutJson(run)).toEqual({ ...PREV_RESULT_100, cniVersion: '1.0.0' });
        expect(run.stderr.trim().split('\n')).toHaveLength(1);
        expect(run.stderr).toMatch(/"level":"warn".*unreachable.*snapshot unavailable/);
      });

      it('starts the pod when the snapshot is unreadable', async () => {
        writeFileSync(join(runDir, ENABLEMENT_SNAPSHOT_FILE), '{"version":1,"allNamespaces":tr');
        const run = await runPlugin(cniEnv('ADD'), netconf(runDir));
        expectSuccess(run);
        expect(run.stderr).toMatch(/"level":"warn"/);
      });

      it('treats a socket file nobody listens on (connection refused) as unreachable', async () => {
        writeFileSync(join(runDir, PLUGIN_EVENT_SOCKET), '');
        writeSnapshot(runDir, { namespaces: ['shop'] });
        const err = specError(await runPlugin(cniEnv('ADD'), netconf(runDir)));
        expect(err.code).toBe(11);
        expect(err.msg).toMatch(/Connection refused/);
      });

      it('treats a reply that is not HTTP as unreachable', async () => {
        raw = await RawPluginAgent.start(runDir, 'SSH-2.0-nope\r\n\r\n');
        const run = await runPlugin(cniEnv('ADD'), netconf(runDir));
        expectSuccess(run);
        expect(run.stderr).toMatch(/invalid reply/);
      });

      it('gives up on an agent that never answers within 5 s', { timeout: 10_000 }, async () => {
        const a = await startAgent(neverReply);
        writeSnapshot(runDir, { namespaces: ['shop'] });
        const run = await runPlugin(cniEnv('ADD'), netconf(runDir));
        expect(a.requests).toHaveLength(1); // the request did arrive; only the reply never came
        expect(run.elapsedMs).toBeGreaterThanOrEqual(4_900);
        expect(run.elapsedMs).toBeLessThanOrEqual(5_500);
        const err = specError(run);
        expect(err.code).toBe(11);
        expect(err.msg).toMatch(/no reply within 5000 ms/);
      });
    });
  });

  describe('DEL', () => {
    it('POSTs the pod to /cmddel and prints nothing', async () => {
      const a = await startAgent();
      const run = await runPlugin(cniEnv('DEL'), netconf(runDir, { prevResult: PREV_RESULT_100 }));
      expectSuccess(run);
      expect(run.stdout).toBe('');
      expect(a.requests.map((r) => r.url)).toEqual(['/cmddel']);
      const expected: PluginDelEvent = {
        Netns: NETNS,
        PodName: POD.name,
        PodNamespace: POD.namespace,
        PodUID: POD.uid,
        ContainerID: CONTAINER_ID,
      };
      expect(a.requests[0]?.body).toEqual(expected);
    });

    it('succeeds without CNI_NETNS (the sandbox is already gone)', async () => {
      const a = await startAgent();
      expectSuccess(await runPlugin(cniEnv('DEL', POD, { CNI_NETNS: undefined }), netconf(runDir)));
      expect((a.requests[0]?.body as PluginDelEvent).Netns).toBe('');
    });

    it('succeeds when the agent is down, with a warning', async () => {
      writeSnapshot(runDir, { namespaces: ['shop'] });
      const run = await runPlugin(cniEnv('DEL'), netconf(runDir));
      expectSuccess(run);
      expect(run.stdout).toBe('');
      expect(run.stderr).toMatch(/"level":"warn"/);
    });

    it('succeeds when the agent answers 500, with a warning', async () => {
      await startAgent(reply(500, 'boom'));
      const run = await runPlugin(cniEnv('DEL'), netconf(runDir));
      expectSuccess(run);
      expect(run.stdout).toBe('');
      expect(run.stderr).toMatch(/status 500: boom/);
    });

    it('is idempotent: twice with the agent up, twice with it down', async () => {
      const a = await startAgent();
      for (let i = 0; i < 2; i++) expectSuccess(await runPlugin(cniEnv('DEL'), netconf(runDir)));
      expect(a.requests).toHaveLength(2);
      await a.close();
      agent = undefined;
      for (let i = 0; i < 2; i++) {
        const run = await runPlugin(cniEnv('DEL'), netconf(runDir));
        expectSuccess(run);
        expect(run.stdout).toBe('');
      }
    });

    it('skips the agent’s own pods and excluded namespaces', async () => {
      const a = await startAgent();
      expectSuccess(await runPlugin(cniEnv('DEL', { ...POD, name: 'istio-cni-node-abc', namespace: 'istio-system' }), netconf(runDir)));
      expectSuccess(await runPlugin(cniEnv('DEL', { ...POD, namespace: 'kube-system' }), netconf(runDir)));
      expect(a.requests).toHaveLength(0);
    });

    it('succeeds with a warning on a config field it cannot read, but still reports undecodable JSON', async () => {
      const a = await startAgent();
      const run = await runPlugin(cniEnv('DEL'), netconf(runDir, { ambient_enabled: 'yes' }));
      expectSuccess(run);
      expect(run.stderr).toMatch(/"level":"warn".*unusable network config/);
      expect(a.requests).toHaveLength(0);
      expect(specError(await runPlugin(cniEnv('DEL'), 'not json')).code).toBe(6);
    });

    it('is quiet towards Istio’s agent, which has no /cmddel route', async () => {
      await startAgent(reply(404, '404 page not found\n'));
      const run = await runPlugin(cniEnv('DEL'), netconf(runDir));
      expectSuccess(run);
      expect(run.stderr).toBe('');
    });
  });

  describe('CHECK', () => {
    it('POSTs the add body to /cmdcheck and prints nothing on 200', async () => {
      const a = await startAgent();
      const run = await runPlugin(cniEnv('CHECK'), netconf(runDir, { prevResult: PREV_RESULT_100 }));
      expectSuccess(run);
      expect(run.stdout).toBe('');
      expect(a.requests.map((r) => r.url)).toEqual(['/cmdcheck']);
      expect(a.requests[0]?.body).toEqual({
        Netns: NETNS,
        PodName: POD.name,
        PodNamespace: POD.namespace,
        IPs: IPS_100,
        PodUID: POD.uid,
        ContainerID: CONTAINER_ID,
      });
    });

    it('fails with 999 when the agent answers non-200', async () => {
      await startAgent(reply(500, 'rules drifted'));
      const err = specError(await runPlugin(cniEnv('CHECK'), netconf(runDir, { prevResult: PREV_RESULT_100 })));
      expect(err.code).toBe(999);
      expect(err.msg).toMatch(/status code 500\): rules drifted$/);
    });

    it('passes with a warning when the agent is unreachable', async () => {
      const run = await runPlugin(cniEnv('CHECK'), netconf(runDir, { prevResult: PREV_RESULT_100 }));
      expectSuccess(run);
      expect(run.stdout).toBe('');
      expect(run.stderr).toMatch(/"level":"warn"/);
    });

    it('requires CNI_NETNS', async () => {
      expect(specError(await runPlugin(cniEnv('CHECK', POD, { CNI_NETNS: undefined }), netconf(runDir))).code).toBe(4);
    });
  });

  describe('VERSION, STATUS, GC', () => {
    it('VERSION prints the supported versions', async () => {
      const run = await runPlugin({ CNI_COMMAND: 'VERSION' }, { cniVersion: '1.1.0' });
      expectSuccess(run);
      expect(run.stdout.trim()).toBe('{"cniVersion":"1.1.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}');
    });

    it('STATUS succeeds even with the agent down', async () => {
      const run = await runPlugin({ CNI_COMMAND: 'STATUS' }, netconf(runDir, { cniVersion: '1.1.0' }));
      expectSuccess(run);
      expect(run.stdout).toBe('');
    });

    it('GC forwards cni.dev/valid-attachments to the agent (/cmdgc) and prints nothing', async () => {
      const a = await startAgent();
      const run = await runPlugin(
        { CNI_COMMAND: 'GC' },
        netconf(runDir, { cniVersion: '1.1.0', 'cni.dev/valid-attachments': [{ containerID: 'x', ifname: 'eth0' }, { bogus: 1 }] }),
      );
      expectSuccess(run);
      expect(run.stdout).toBe('');
      expect(a.requests.map((r) => [r.url, r.body])).toEqual([['/cmdgc', { ValidAttachments: [{ ContainerID: 'x', IfName: 'eth0' }] }]]);
    });

    it('GC succeeds with the agent down (best effort, like DEL)', async () => {
      const run = await runPlugin({ CNI_COMMAND: 'GC' }, netconf(runDir, { cniVersion: '1.1.0', 'cni.dev/valid-attachments': [] }));
      expectSuccess(run);
    });
  });

  describe('errors', () => {
    it('malformed stdin JSON is code 6', async () => {
      const err = specError(await runPlugin(cniEnv('ADD'), '{"cniVersion":"1.0.0",'));
      expect(err.code).toBe(6);
      expect(err.cniVersion).toBe('1.1.0');
    });

    it('missing CNI_COMMAND is code 4', async () => {
      const err = specError(await runPlugin(cniEnv('ADD', POD, { CNI_COMMAND: undefined }), netconf(runDir)));
      expect(err.code).toBe(4);
      expect(err.msg).toMatch(/CNI_COMMAND/);
    });

    it.each(['CNI_CONTAINERID', 'CNI_IFNAME', 'CNI_NETNS'])('ADD without %s is code 4', async (name) => {
      const a = await startAgent();
      const err = specError(await runPlugin(cniEnv('ADD', POD, { [name]: undefined }), netconf(runDir)));
      expect(err.code).toBe(4);
      expect(err.msg).toMatch(name);
      expect(a.requests).toHaveLength(0);
    });

    it('unsupported cniVersion is code 1', async () => {
      const err = specError(await runPlugin(cniEnv('ADD'), netconf(runDir, { cniVersion: '9.9.9' })));
      expect(err.code).toBe(1);
      expect(err.details).toMatch(/9\.9\.9/);
    });

    it('an unknown command is an error (code 4)', async () => {
      const err = specError(await runPlugin(cniEnv('FROB'), netconf(runDir)));
      expect(err.code).toBe(4);
      expect(err.msg).toMatch(/FROB/);
    });

    it('a field of the wrong type is code 7, and a bad prevResult address too', async () => {
      expect(specError(await runPlugin(cniEnv('ADD'), netconf(runDir, { exclude_namespaces: 'kube-system' }))).code).toBe(7);
      const bad = { ...PREV_RESULT_100, ips: [{ address: '10.0.0.300/24' }] };
      const err = specError(await runPlugin(cniEnv('ADD'), netconf(runDir, { prevResult: bad })));
      expect(err.code).toBe(7);
      expect(err.cniVersion).toBe('1.0.0');
    });

    it('a CNI_ARGS pair without "=" is code 4', async () => {
      expect(specError(await runPlugin(cniEnv('ADD', POD, { CNI_ARGS: 'K8S_POD_NAME' }), netconf(runDir))).code).toBe(4);
    });
  });

  describe('logging', () => {
    it('plugin_log_level debug logs one JSON line per event on stderr, never on stdout', async () => {
      await startAgent();
      const run = await runPlugin(cniEnv('ADD'), netconf(runDir, { plugin_log_level: 'debug', prevResult: PREV_RESULT_100 }));
      expectSuccess(run);
      expect(stdoutJson(run)).toEqual({ ...PREV_RESULT_100, cniVersion: '1.0.0' });
      const lines = run.stderr
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      expect(lines.length).toBeGreaterThanOrEqual(1);
      for (const l of lines) expect(l).toMatchObject({ level: 'debug', scope: 'cni-plugin', command: 'ADD', pod: 'shop/web-7d9c' });
    });

    it('plugin_log_level error hides the unreachable-agent warning', async () => {
      const run = await runPlugin(cniEnv('ADD'), netconf(runDir, { plugin_log_level: 'error' }));
      expectSuccess(run);
      expect(run.stderr).toBe('');
    });

    it("Istio's other level names, fatal and none (what --log_output_level=cni-plugin:fatal writes), log nothing and warn of nothing", async () => {
      for (const level of ['fatal', 'none']) {
        const run = await runPlugin(cniEnv('ADD'), netconf(runDir, { plugin_log_level: level }));
        expectSuccess(run);
        expect(run.stderr, level).toBe('');
      }
    });
  });

  describe('the binary', () => {
    it('is statically linked and smaller than 3 MB', (ctx) => {
      expect(statSync(PLUGIN_BINARY).size).toBeLessThan(3 * 1024 * 1024);
      const file = spawnSync('file', ['-b', PLUGIN_BINARY], { encoding: 'utf8' });
      if (!file.error) expect(file.stdout).toMatch(/statically linked/);
      const ldd = spawnSync('ldd', [PLUGIN_BINARY], { encoding: 'utf8' });
      if (ldd.error) {
        ctx.skip(`ldd not available (${ldd.error.message}); size and file(1) checked only`);
        return;
      }
      expect(`${ldd.stdout}${ldd.stderr}`).toMatch(/not a dynamic executable/);
    });
  });
});
