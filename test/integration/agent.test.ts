// The standalone agent end to end without root: real plugin-event socket, real ZDS socket and a
// ztunnel-like client; the kernel side (netns, rules) is the fake addon.
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Agent } from '../../src/agent/agent.js';
import type { AgentConfig } from '../../src/agent/config.js';
import { PodStateStore } from '../../src/standalone/state-store.js';
import { StandaloneMode } from '../../src/standalone/standalone-mode.js';
import { FakeNetAddon, type FakeNamespace } from '../fakes/fake-net-addon.js';
import { FakeZtunnel } from '../helpers/fake-ztunnel.js';
import { getHttp, postUnix } from '../helpers/unix-http.js';
import { debugSocketPath, getDebug } from '../../src/agent/debug-server.js';
import { HEALTH_ROUTES } from '../../src/agent/health-server.js';
import { METRICS_ROUTES } from '../../src/ops/metrics.js';
import { main } from '../../src/cli/main.js';
import { netconf, runPlugin } from '../helpers/plugin-exec.js';
import { testAgentConfig } from '../helpers/agent-config.js';
import { tieringFlags, v8TieringDefaults } from '../../src/runtime/tier-up.js';

const listing = readFileSync(new URL('../fixtures/default-inpod.listing.nft', import.meta.url), 'utf8');

/** Polls `done` every 10 ms for up to `ms` (the assertion after it says what was expected). */
async function pollUntil(done: () => boolean, ms = 2_000): Promise<void> {
  const until = Date.now() + ms;
  while (!done() && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
}

function addEvent(name: string, uid = `uid-${name}`, namespace = 'shop') {
  return {
    Netns: `/var/run/netns/${name}`,
    PodName: name,
    PodNamespace: namespace,
    PodUID: uid,
    ContainerID: `c-${name}`,
    IPs: [{ Interface: 2, Address: { IP: '10.1.0.5', Mask: '////AA==' }, Gateway: '10.1.0.1' }],
  };
}

describe('standalone agent', () => {
  let dir: string;
  let config: AgentConfig;
  let addon: FakeNetAddon;
  let agent: Agent;
  let pods: Record<string, FakeNamespace>;
  let logs: Array<{ level: number; msg: string; uid?: string }>;
  const clients: FakeZtunnel[] = [];
  const sock = (): string => join(config.runDir, 'pluginevent.sock');

  async function ztunnel(): Promise<FakeZtunnel> {
    const client = await FakeZtunnel.connect(config.zdsSocket);
    clients.push(client);
    await client.waitFor(() => client.snapshotSent);
    return client;
  }

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'agent-'));
    config = testAgentConfig(dir, {
      zdsSocket: join(dir, 'ztunnel', 'z.sock'),
      netnsRoot: '/host',
      flags: ['--ipv6', 'false', '--exclude-namespaces', 'kube-system'],
    });
    addon = new FakeNetAddon({ realFds: true });
    addon.fresh.listing = listing;
    pods = {};
    for (const name of ['web', 'db', 'api', 'sys']) pods[name] = addon.addNetns(`/host/var/run/netns/${name}`);
    logs = [];
    const log = pino(
      { level: 'debug', base: undefined },
      { write: (line: string) => void logs.push(JSON.parse(line) as (typeof logs)[number]) },
    );
    agent = new Agent(config, { addon, log, makeMode: (d) => new StandaloneMode(d) });
    await agent.start();
  });

  afterEach(async () => {
    for (const c of clients.splice(0)) c.close();
    await agent.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('is ready once started, and serves /healthz', async () => {
    await agent.startWorkDone(); // the install and the restore (when `run` may tier up the per-pod path)
    expect(await getHttp(agent.healthPort!, '/readyz')).toEqual({ status: 200, body: 'ready\n' });
    expect((await getHttp(agent.healthPort!, '/healthz')).status).toBe(200);
    expect(statSync(sock()).mode & 0o777).toBe(0o600);
    expect(statSync(config.runDir).mode & 0o777).toBe(0o750);
    expect(JSON.parse(readFileSync(join(config.runDir, 'ambient-enablement.json'), 'utf8'))).toMatchObject({
      version: 1,
      allNamespaces: true,
      excludedNamespaces: ['kube-system'],
    });
  });

  it('ADD: opens the netns under --netns-root, applies the rules, hands the pod to ztunnel, then answers 200', async () => {
    const z = await ztunnel();
    expect(await postUnix(sock(), '/cmdadd', addEvent('web'))).toEqual({ status: 200, body: '' });
    expect(pods['web']!.nftScripts).toHaveLength(1);
    expect(z.messages.at(-1)).toMatchObject({
      kind: 'add',
      uid: 'uid-web',
      info: { name: 'web', namespace: 'shop', serviceAccount: 'default' },
      fds: 1,
    });
    // a second ADD for the same pod is idempotent
    expect((await postUnix(sock(), '/cmdadd', addEvent('web'))).status).toBe(200);
    expect(z.running.size).toBe(1);
    expect(addon.openFds).toBe(1);
  });

  it('hands the free heap back once its pod events have stopped for the quiet spell, not in between', async () => {
    await agent.stop();
    let rss = 80 * 2 ** 20; // the agent's RSS as the release sees it
    const heapRelease = { quietMs: 150, growthBytes: 8 * 2 ** 20, rss: () => rss };
    agent = new Agent(config, { addon, makeMode: (d) => new StandaloneMode(d), heapRelease });
    await agent.start();
    await ztunnel();
    rss = 100 * 2 ** 20; // grown by the pods below
    for (const name of ['web', 'db', 'api']) {
      expect((await postUnix(sock(), '/cmdadd', addEvent(name))).status).toBe(200);
      await new Promise((r) => setTimeout(r, 50)); // pods keep coming: no release yet
      expect(addon.heapReleases).toBe(0);
    }
    await pollUntil(() => addon.heapReleases >= 1);
    expect(addon.heapReleases).toBe(1);
    await new Promise((r) => setTimeout(r, 300));
    expect(addon.heapReleases).toBe(1); // once per quiet spell
  });

  it("tiers up the per-pod path once started; a burst of ADDs has V8's own thresholds and gives its memory back as it ends", async () => {
    await agent.stop();
    const flags: string[] = [];
    let rss = 80 * 2 ** 20;
    const heapRelease = { quietMs: 60_000, growthBytes: 8 * 2 ** 20, rss: () => rss }; // no quiet spell in this test
    agent = new Agent(config, { addon, makeMode: (d) => new StandaloneMode(d), setV8Flags: (f) => flags.push(f), heapRelease });
    await agent.start();
    await agent.startWorkDone();
    await new Promise((r) => setImmediate(r));
    const lowered = tieringFlags({ maglevCalls: config.tierUpCalls, callsAfterIcUpdate: config.tierUpCalls });
    const v8Own = tieringFlags(v8TieringDefaults()!);
    expect(config.tierUpCalls).toBe(20); // the default
    expect(flags).toEqual([lowered]);
    // No ztunnel yet: the three ADDs wait for it, all in flight at once.
    const adds = ['web', 'db', 'api'].map((name) => postUnix(sock(), '/cmdadd', addEvent(name)));
    await pollUntil(() => flags.length >= 2);
    expect(flags).toEqual([lowered, v8Own]);
    rss = 100 * 2 ** 20; // grown by the burst
    await ztunnel();
    expect((await Promise.all(adds)).map((r) => r.status)).toEqual([200, 200, 200]);
    expect(flags).toEqual([lowered, v8Own, lowered]);
    await pollUntil(() => addon.heapReleases >= 1);
    expect(addon.heapReleases).toBe(1);
    expect((await postUnix(sock(), '/cmdadd', addEvent('sys'))).status).toBe(200); // a lone ADD changes nothing
    expect(flags).toEqual([lowered, v8Own, lowered]);
    expect(addon.heapReleases).toBe(1);
  });

  it('with no ztunnel, an ADD waits for one to connect and is answered by its snapshot ack (one add, no second one)', async () => {
    const adding = postUnix(sock(), '/cmdadd', addEvent('db'));
    await new Promise((r) => setTimeout(r, 300));
    const z = await ztunnel();
    expect(await adding).toEqual({ status: 200, body: '' });
    expect(z.messages.map((m) => `${m.kind}:${m.uid ?? ''}`)).toEqual(['add:uid-db', 'snapshotSent:']);
    const metrics = await agent.metrics.registry.getSingleMetricAsString('ambient_node_agent_ztunnel_waits_total');
    expect(metrics).toContain('ambient_node_agent_ztunnel_waits_total{result="enrolled"} 1');
  });

  it('brings a down pod lo up before ztunnel hears of the pod (it binds 127.0.0.1:15053 there at once)', async () => {
    const web = pods['web']!;
    web.loUp = false; // containerd's own loopback setup has not run yet
    addon.runDelayMs = 30; // the rules' netns visit is still on its way when the ZDS add could go
    const z = await FakeZtunnel.connect(config.zdsSocket, {
      ackError: (req) =>
        'add' in req && !web.loUp
          ? "failure to start proxy : EADDRNOTAVAIL: Cannot assign requested address, bind '127.0.0.1:15053'"
          : undefined,
    });
    clients.push(z);
    await z.waitFor(() => z.snapshotSent);
    expect(await postUnix(sock(), '/cmdadd', addEvent('web'))).toEqual({ status: 200, body: '' });
    expect(z.messages.filter((m) => m.kind === 'add').map((m) => m.ack)).toEqual(['']);
    expect(web.routes.map((r) => r.family)).toEqual([4]); // --ipv6 false here; the IPv6 case: rules-manager tests
  });

  it('answers 500 naming ztunnel when none comes within the wait, and the pod goes out with the next snapshot', async () => {
    await agent.stop();
    agent = new Agent({ ...config, ztunnelWaitMs: 150 }, { addon, makeMode: (d) => new StandaloneMode(d) });
    await agent.start();
    const res = await postUnix(sock(), '/cmdadd', addEvent('db'));
    expect(res).toEqual({
      status: 500,
      body: 'no ztunnel connection (waited 150 ms for one; the pod stays registered for the next snapshot)',
    });
    const z = await ztunnel();
    expect(z.messages.map((m) => `${m.kind}:${m.uid ?? ''}`)).toEqual(['add:uid-db', 'snapshotSent:']);
  });

  it("with ztunnel-wait-timeout 0, fails at once with Istio's text", async () => {
    await agent.stop();
    agent = new Agent({ ...config, ztunnelWaitMs: 0 }, { addon, makeMode: (d) => new StandaloneMode(d) });
    await agent.start();
    expect(await postUnix(sock(), '/cmdadd', addEvent('db'))).toEqual({ status: 500, body: 'no ztunnel connection' });
  });

  it('answers 400 for a bad body and 500 when the netns does not exist', async () => {
    expect(await postUnix(sock(), '/cmdadd', '{not json')).toMatchObject({ status: 400, body: expect.stringContaining('invalid JSON') });
    expect(await postUnix(sock(), '/cmdadd', { PodName: 'x' })).toEqual({ status: 400, body: 'missing Netns' });
    const gone = await postUnix(sock(), '/cmdadd', addEvent('missing'));
    expect(gone).toEqual({ status: 500, body: 'pod netns /host/var/run/netns/missing does not exist (the sandbox is gone?)' });
  });

  it('refuses a netns path outside the runtime locations (500, nothing applied, nothing recorded)', async () => {
    // The body check answers 400 for what is never a path ('..', relative); the opener 500 for the rest.
    for (const Netns of ['/etc/passwd', '/var/run/netns/../../../proc/1/ns/net', 'relative/netns', '/var/lib/x/netns']) {
      const res = await postUnix(sock(), '/cmdadd', { ...addEvent('web'), Netns });
      expect(res.status === 400 || res.body.includes('refusing netns path'), `${Netns}: ${res.status} ${res.body}`).toBe(true);
      expect(res.status).not.toBe(200);
    }
    expect(pods['web']!.nftScripts).toHaveLength(0);
    expect(new PodStateStore(config.runDir).load().pods).toEqual([]);
  });

  it('skips excluded namespaces', async () => {
    await ztunnel();
    expect((await postUnix(sock(), '/cmdadd', addEvent('sys', 'uid-sys', 'kube-system'))).status).toBe(200);
    expect(pods['sys']!.nftScripts).toHaveLength(0);
  });

  it('DEL removes the rules and tells ztunnel; DEL of an unknown pod is fine', async () => {
    const z = await ztunnel();
    await postUnix(sock(), '/cmdadd', addEvent('web'));
    const del = { Netns: '/var/run/netns/web', PodName: 'web', PodNamespace: 'shop', PodUID: 'uid-web' };
    expect((await postUnix(sock(), '/cmddel', del)).status).toBe(200);
    expect(pods['web']!.nftScripts.at(-1)).toContain('delete table inet istio-ambient-nat');
    expect(z.messages.at(-1)).toMatchObject({ kind: 'del', uid: 'uid-web' });
    expect((await postUnix(sock(), '/cmddel', del)).status).toBe(200);
    expect(addon.openFds).toBe(0);
  });

  it('a repeated DEL (containerd: StopPodSandbox, then RemovePodSandbox) is a quiet no-op: no ztunnel del, no "pod removed" log', async () => {
    const z = await ztunnel();
    await postUnix(sock(), '/cmdadd', addEvent('web'));
    const del = { Netns: '/var/run/netns/web', PodName: 'web', PodNamespace: 'shop', PodUID: 'uid-web' };
    expect((await postUnix(sock(), '/cmddel', del)).status).toBe(200);
    const scriptsAfterFirst = pods['web']!.nftScripts.length;
    const messagesAfterFirst = z.messages.length;
    expect((await postUnix(sock(), '/cmddel', { ...del, Netns: '' })).status).toBe(200);
    expect((await postUnix(sock(), '/cmddel', { ...del, PodUID: 'uid-never-added' })).status).toBe(200);
    expect(z.messages).toHaveLength(messagesAfterFirst);
    expect(pods['web']!.nftScripts).toHaveLength(scriptsAfterFirst);
    expect(logs.filter((l) => l.msg === 'pod removed').map((l) => l.uid)).toEqual(['uid-web']);
    const quiet = logs.filter((l) => l.msg === 'DEL for a pod that is not enrolled; nothing to do');
    expect(quiet.map((l) => [l.uid, l.level])).toEqual([
      ['uid-web', 20],
      ['uid-never-added', 20],
    ]);
  });

  it('CNI GC (the real plugin, cni.dev/valid-attachments) removes the enrolments the runtime no longer has; ztunnel gets the del', async () => {
    const z = await ztunnel();
    await postUnix(sock(), '/cmdadd', addEvent('web'));
    await postUnix(sock(), '/cmdadd', addEvent('db'));
    const dbNetns = agent.registry.netnsOf('uid-db')!;
    const run = await runPlugin(
      { CNI_COMMAND: 'GC', CNI_PATH: '/opt/cni/bin' },
      netconf(config.runDir, {
        cniVersion: '1.1.0',
        'cni.dev/valid-attachments': [
          { containerID: 'c-web', ifname: 'eth0' },
          { containerID: 'c-other', ifname: 'eth0' },
        ],
      }),
    );
    expect(run.status, run.stdout + run.stderr).toBe(0);
    expect(agent.registry.has('uid-db')).toBe(false);
    expect(dbNetns.closed).toBe(true); // the dead sandbox's netns is no longer pinned by our fd
    expect(agent.registry.has('uid-web')).toBe(true);
    await z.waitFor(() => z.messages.some((m) => m.kind === 'del' && m.uid === 'uid-db'));
    expect(readdirSync(join(config.runDir, 'pods')).sort()).toEqual(['uid-web.json']);
    // A GC that lists everything removes nothing.
    await postUnix(sock(), '/cmdgc', { ValidAttachments: [{ ContainerID: 'c-web', IfName: 'eth0' }] });
    expect(agent.registry.has('uid-web')).toBe(true);
    expect((await postUnix(sock(), '/cmdgc', { ValidAttachments: 'all' })).status).toBe(400);
  });

  it('CHECK reports drift in an enrolled pod', async () => {
    await ztunnel();
    await postUnix(sock(), '/cmdadd', addEvent('web'));
    pods['web']!.listing = listing;
    expect((await postUnix(sock(), '/cmdcheck', addEvent('web'))).status).toBe(200);
    pods['web']!.listing = '';
    pods['web']!.nftGeneration++; // (any nft change in a netns moves its generation)
    expect(await postUnix(sock(), '/cmdcheck', addEvent('web'))).toMatchObject({
      status: 500,
      body: expect.stringContaining('missing table'),
    });
  });

  it('after a restart: restores enrolled pods from the run dir, repairs drift, and sends them in the snapshot', async () => {
    await ztunnel();
    await postUnix(sock(), '/cmdadd', addEvent('web'));
    await postUnix(sock(), '/cmdadd', addEvent('db'));
    await postUnix(sock(), '/cmdadd', addEvent('api'));
    await agent.stop();
    for (const c of clients.splice(0)) c.close();
    pods['web']!.listing = listing; // still in sync (and its nftables generation unchanged: not even listed)
    pods['api']!.listing = ''; // drifted: rules must be re-applied
    pods['api']!.nftGeneration++; // (any nft change in a netns moves its generation)
    addon.namespaces.delete('/host/var/run/netns/db');
    pods['db'] = addon.addNetns('/host/var/run/netns/db'); // the path now holds another namespace
    agent = new Agent(config, { addon, makeMode: (d) => new StandaloneMode(d) });
    await agent.start();
    const z = await ztunnel();
    expect(z.messages.map((m) => `${m.kind}:${m.uid ?? ''}`)).toEqual(['add:uid-api', 'add:uid-web', 'snapshotSent:']); // restored in state-file order
    // The rules are verified while ztunnel takes the snapshot; the agent is ready afterwards.
    await (agent.mode as StandaloneMode).restored();
    expect(agent.notReadyReasons()).toEqual([]);
    expect(pods['web']!.nftScripts).toHaveLength(1); // in sync: not re-applied
    expect(pods['api']!.nftScripts).toHaveLength(2); // drifted: re-applied
    const stored = new PodStateStore(config.runDir).load();
    expect(stored.pods.map((p) => p.uid)).toEqual(['uid-api', 'uid-web']); // db's sandbox is gone
    expect(stored.problems).toEqual([]);
  });

  it('exposes Istio-named metrics and latency histograms after real events', async () => {
    await ztunnel();
    addon.cpuSecondsPerRead = 0.001;
    pods['web']!.listing = listing;
    await postUnix(sock(), '/cmdadd', addEvent('web'));
    await postUnix(sock(), '/cmdadd', { PodName: 'bad' });
    const text = (await getHttp(agent.metricsPort!, '/metrics')).body;
    expect(text).toContain('istio_cni_plugin_requests_total{response_code="200"} 1');
    expect(text).toContain('istio_cni_plugin_requests_total{response_code="400"} 1');
    expect(text).toContain('ztunnel_connected 1');
    expect(text).toMatch(/ambient_node_agent_pod_onboarding_seconds_count\{result="ok"\} 1/);
    expect(text).toMatch(/ambient_node_agent_rule_operation_seconds_count\{backend="nftables",operation="apply",result="ok"\} 1/);
    expect(text).toMatch(/ambient_node_agent_zds_ack_seconds_count\{request="add",result="ok"\} 1/);
    // The addon's netns-thread totals, read at the scrape (the pod's lo came up in its visit).
    expect(text).toMatch(/ambient_node_agent_netns_steps_total\{step="setLinkUp"\} [1-9]/);
    expect(text).toMatch(/ambient_node_agent_netns_jobs_total [1-9]/);
    expect(text).toMatch(/ambient_node_agent_zds_ack_seconds_count\{request="snapshotSent",result="ok"\} 1/);
    // The event loop's own CPU while each of the two events was in flight: two reads of the
    // thread clock per event, each 1 ms on the fake's clock.
    expect(text).toContain('ambient_node_agent_pod_events_loop_cpu_seconds_total 0.002');
    expect(text).toContain('process_cpu_user_seconds_total');
    expect(text).toContain('# TYPE istio_cni_install_ready gauge');
  });

  it('/debug/pods (on the debug socket) shows each pod, its netns, rule state and what each ztunnel said', async () => {
    const z = await ztunnel();
    await postUnix(sock(), '/cmdadd', addEvent('web'));
    pods['web']!.listing = listing;
    const debugPods = async (): Promise<string> => (await getDebug(debugSocketPath(config.runDir), '/debug/pods')).body;
    const body = JSON.parse(await debugPods()) as { mode: string; pods: Array<Record<string, unknown>>; connections: unknown[] };
    expect(body.mode).toBe('standalone');
    expect(body.connections).toHaveLength(1);
    // lastVerified: live reconciliation's last check (null until its first one, 0.5 s after the ADD).
    expect(body.pods[0]!['lastVerified'] === null || typeof body.pods[0]!['lastVerified'] === 'string').toBe(true);
    expect(body.pods).toEqual([
      {
        uid: 'uid-web',
        namespace: 'shop',
        name: 'web',
        serviceAccount: 'default',
        netnsInode: pods['web']!.ino,
        rules: 'verified',
        lastVerified: body.pods[0]!['lastVerified'],
        repairs: 0,
        ztunnel: { [String(agent.zds.connections()[0]!.id)]: 'acked' },
      },
    ]);
    pods['web']!.listing = '';
    const drifted = JSON.parse(await debugPods()) as { pods: Array<{ rules: string }> };
    expect(drifted.pods[0]!.rules).toMatch(/^drifted: missing table/);
    // `ambient-node-agent pods --run-dir DIR` reads the same socket.
    const out: string[] = [];
    expect(await main(['pods', '--run-dir', config.runDir], { out: (t) => out.push(t), err: (t) => out.push(t) })).toBe(0);
    expect(out.join('')).toMatch(/^shop\s+web\s+uid-web\s+\d+\s+drifted: missing table/m);
    await postUnix(sock(), '/cmddel', { Netns: '', PodName: 'web', PodNamespace: 'shop', PodUID: 'uid-web' });
    expect(JSON.parse(await debugPods())).toMatchObject({ pods: [] });
    expect(statSync(debugSocketPath(config.runDir)).mode & 0o777).toBe(0o600);
    z.close();
  });

  it('`pods` says which socket it could not reach', async () => {
    const err: string[] = [];
    expect(await main(['pods', '--run-dir', join(dir, 'nowhere')], { out: () => undefined, err: (t) => err.push(t) })).toBe(1);
    expect(err.join('')).toContain(`cannot reach the agent at ${join(dir, 'nowhere', 'debug.sock')}`);
  });

  it('the network ports serve exactly /healthz and /readyz (8000) and /metrics (15014), 404 for anything else', async () => {
    expect(HEALTH_ROUTES).toEqual(['/healthz', '/readyz']);
    expect(METRICS_ROUTES).toEqual(['/metrics']);
    // What an operator (or an attacker in the cluster) might try: Istio's and common debug paths.
    const probes = [
      '/',
      '/debug/pods',
      '/debug',
      '/debug/pprof/',
      '/debug/vars',
      '/metrics',
      '/healthz',
      '/readyz',
      '/readyz/',
      '/healthz/x',
      '/stats',
      '/ready',
      '/live',
      '/quitquitquit',
      '/config_dump',
      '/version',
    ];
    const answered = async (port: number): Promise<string[]> => {
      const out: string[] = [];
      for (const path of probes) {
        const { status } = await getHttp(port, path);
        if (status !== 404) out.push(path);
      }
      return out;
    };
    expect(await answered(agent.healthPort!)).toEqual([...HEALTH_ROUTES]);
    expect(await answered(agent.metricsPort!)).toEqual([...METRICS_ROUTES]);
    // A query string does not change the route.
    expect((await getHttp(agent.healthPort!, '/readyz?verbose=1')).status).toBe(200);
    expect((await getHttp(agent.healthPort!, '/debug/pods?x=1')).status).toBe(404);
  });

  it("a pod's netns watch opens after its ADD is answered, not while it onboards (the live reconciler's holds)", async () => {
    const slow = await FakeZtunnel.connect(config.zdsSocket, { ackDelayMs: 300 });
    clients.push(slow);
    await slow.waitFor(() => slow.snapshotSent);
    const webNetns = '/host/var/run/netns/web';
    const pending = postUnix(sock(), '/cmdadd', addEvent('web'));
    await slow.waitFor(() => slow.messages.some((m) => m.kind === 'add' && m.uid === 'uid-web'));
    expect(pods['web']!.nftScripts).toHaveLength(1); // the rules are in, ztunnel's ack is due
    expect(addon.watches.get(webNetns)).toBeUndefined();
    expect(await pending).toEqual({ status: 200, body: '' });
    await new Promise((r) => setImmediate(r));
    expect(addon.watches.get(webNetns)).toHaveLength(1);
    expect(agent.reconciler.status('uid-web')).toMatchObject({ watched: true });
  });

  it('on stop, finishes an in-flight ADD before closing (graceful shutdown)', async () => {
    const slow = await FakeZtunnel.connect(config.zdsSocket, { ackDelayMs: 800 });
    clients.push(slow);
    await slow.waitFor(() => slow.snapshotSent);
    const pending = postUnix(sock(), '/cmdadd', addEvent('web'));
    await pollUntil(() => slow.messages.length >= 2); // the add reached ztunnel
    const started = Date.now();
    await agent.stop();
    const stopMs = Date.now() - started;
    expect(await pending).toEqual({ status: 200, body: '' });
    expect(stopMs).toBeGreaterThan(300);
    expect(stopMs).toBeLessThan(10_000);
    agent = new Agent(config, { addon, makeMode: (d) => new StandaloneMode(d) }); // afterEach stops it again
    await agent.start();
  });
});
