// Fault injection around the agent process (root): the agent SIGKILLed in the middle of a burst of
// real chained CNI ADDs, a misbehaving ztunnel (killed mid-snapshot, error acks, no acks), and a
// pod's netns vanishing or its DEL arriving while its ADD is in flight. Everything runs in a
// DemoEnvironment (a throw-away node netns, bridge + host-local + our plugin, the agent as its own
// process, a ztunnel stand-in); pods are test-owned namespaces, deleted in afterAll.
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NetnsHandle } from '../../src/addon/net-addon.js';
import { CniPluginError, type CniRuntime } from '../../src/demo/cni-runtime.js';
import { demoPrerequisites, DemoEnvironment } from '../../src/demo/environment.js';
import { ZtunnelStandIn } from '../../src/demo/ztunnel/zds-client.js';
import { STATE_DIR } from '../../src/standalone/state-store.js';
import {
  agentPid,
  agentRules,
  checkRules,
  CniDriverRun,
  cniRuntime,
  demoNodeNetnsPath,
  hasNoRules,
  expectedRuleLines,
  makePod,
  fdTargets,
  heldNamespaces,
  prevResultOf,
  runCni,
  runOurPlugin,
  settledFdCount,
  stateFileOf,
  type FaultPod,
} from '../helpers/fault-env.js';
import { FakeZtunnel, type FakeZtunnelOptions } from '../helpers/fake-ztunnel.js';
import { deleteNetns, requirePrivilegedInCi } from '../helpers/netns.js';

requirePrivilegedInCi();
const skip = demoPrerequisites();
if (skip && process.env['CI']) throw new Error(`fault tests cannot run in CI: ${skip}`);
const reason = skip ? ` — skipped: ${skip}` : '';

/** The state files in the agent's run dir, by pod UID order of their names. */
function stateFiles(runDir: string): string[] {
  const dir = join(runDir, STATE_DIR);
  return existsSync(dir) ? readdirSync(dir).sort() : [];
}

async function expectRedirectedOnce(env: DemoEnvironment, pod: FaultPod): Promise<void> {
  const check = await checkRules(env.addon, agentRules(env.addon), pod.ns);
  expect({ pod: pod.name, ...check }).toEqual({
    pod: pod.name,
    drift: [],
    tables: { 'istio-ambient-nat': 1, 'istio-ambient-mangle': 1, 'istio-ambient-raw': 1 },
    ipRules: { v4: 1, v6: 1 },
    ruleLines: await expectedRuleLines(env.addon),
  });
}

function expectRunningInZtunnel(env: DemoEnvironment, pod: FaultPod): void {
  const handle = env.addon.openNetns(pod.ns.path);
  const ino = handle.ino;
  handle.close();
  expect(env.standIn!.pods().get(pod.uid), `${pod.name} in the ztunnel stand-in`).toMatchObject({
    name: pod.name,
    namespace: pod.namespace,
    state: 'running',
    netns: { ino },
  });
}

describe.skipIf(skip)(`agent SIGKILLed in the middle of a 50-pod burst of real CNI ADDs${reason}`, () => {
  let env: DemoEnvironment;
  const pods: FaultPod[] = [];

  beforeAll(async () => {
    env = new DemoEnvironment({ subnet: 93, podNames: [] });
    await env.setUp();
  }, 60_000);

  afterAll(async () => {
    try {
      if (env && pods.length > 0)
        await runCni(
          env,
          pods.map((p) => ({ id: p.uid, pod: p.cni, commands: ['DEL'] })),
        ).catch(() => undefined);
    } finally {
      for (const p of pods) deleteNetns(p.ns);
      await env?.tearDown();
    }
  }, 60_000);

  it('redirects every pod whose ADD succeeded exactly once, completes the failed ones on retry, forgets pods deleted meanwhile', async () => {
    for (let i = 0; i < 50; i++) pods.push(makePod('burst'));
    const run = new CniDriverRun(
      env,
      pods.map((p) => ({ id: p.uid, pod: p.cni, commands: ['ADD'] })),
    );
    await run.until((lines) => lines.filter((l) => l.ok).length >= 12);
    await env.stopAgent('SIGKILL');
    await run.done;

    const succeeded = pods.filter((p) => run.last(p.uid, 'ADD')?.ok);
    const failed = pods.filter((p) => !run.last(p.uid, 'ADD')?.ok);
    // The kill really landed mid-burst.
    expect(succeeded.length).toBeGreaterThanOrEqual(12);
    expect(failed.length).toBeGreaterThan(5);
    // Fail closed, from our plugin, with a reason (agent unreachable: try again later).
    for (const p of failed) {
      const line = run.last(p.uid, 'ADD')!;
      expect(line).toMatchObject({
        ok: false,
        code: 11,
        msg: expect.stringMatching(/istio-cni cmdAdd failed to contact node Istio CNI agent .*try again later/),
      });
    }

    // While the agent is down the runtime deletes three running pods (DEL always succeeds) and their netns.
    const deleted = succeeded.slice(0, 3);
    const delRun = await runCni(
      env,
      deleted.map((p) => ({ id: p.uid, pod: p.cni, commands: ['DEL'] })),
    );
    expect(delRun.lines.map((l) => l.ok)).toEqual([true, true, true]);
    for (const p of deleted) deleteNetns(p.ns);
    const kept = succeeded.slice(3);

    const connections = env.standIn!.connectionCount;
    await env.startAgent();
    await env.standIn!.waitFor(
      () => env.standIn!.connectionCount > connections && env.standIn!.ready,
      10_000,
      'stand-in resynced after the restart',
    );

    // Every pod whose ADD succeeded: in the next snapshot (running, same netns), rules exactly once.
    for (const p of kept) {
      expectRunningInZtunnel(env, p);
      await expectRedirectedOnce(env, p);
      expect(existsSync(stateFileOf(env.runDir, p.uid))).toBe(true);
    }
    // Pods deleted while the agent was down: no state file, not in ztunnel.
    for (const p of deleted) {
      expect(existsSync(stateFileOf(env.runDir, p.uid)), `${p.name} state file`).toBe(false);
      expect(env.standIn!.pods().has(p.uid), `${p.name} in ztunnel`).toBe(false);
    }

    // The runtime retries each failed sandbox (containerd: teardown with DEL, then ADD again).
    const retry = await runCni(
      env,
      failed.map((p) => ({ id: p.uid, pod: p.cni, commands: ['DEL', 'ADD'] })),
    );
    for (const p of failed) {
      expect(retry.last(p.uid, 'DEL'), `${p.name} DEL`).toMatchObject({ ok: true });
      expect(retry.last(p.uid, 'ADD'), `${p.name} retried ADD`).toMatchObject({ ok: true });
    }
    const live = [...kept, ...failed];
    for (const p of failed) {
      expectRunningInZtunnel(env, p);
      await expectRedirectedOnce(env, p);
    }
    // Nothing else anywhere: one state file and one ztunnel pod per live pod; the agent holds the
    // namespace of every live pod (by its watch socket or a namespace fd) and of no other pod.
    expect(stateFiles(env.runDir)).toEqual(live.map((p) => stateFileOf(env.runDir, p.uid).split('/').at(-1)).sort());
    expect([...env.standIn!.pods().keys()].sort()).toEqual(live.map((p) => p.uid).sort());
    const podNamespaces = new Set(pods.map((p) => p.ns.name));
    expect(heldNamespaces(agentPid(env)).filter((n) => podNamespaces.has(n))).toEqual(live.map((p) => p.ns.name).sort());
  }, 90_000);
});

describe.skipIf(skip)(`ztunnel misbehaving, netns vanishing, DEL during ADD${reason}`, () => {
  let env: DemoEnvironment;
  let node: NetnsHandle;
  let runtime: CniRuntime;
  let pid: number;
  let baselineFds: number;
  let fake: FakeZtunnel | undefined;
  const pods: FaultPod[] = [];

  /** A new pod (test-owned netns), remembered for cleanup. */
  const newPod = (tag: string): FaultPod => {
    const pod = makePod(tag);
    pods.push(pod);
    return pod;
  };

  /** Replaces the healthy stand-in with a scripted ztunnel. */
  async function badZtunnel(options: FakeZtunnelOptions, waitSnapshot = true): Promise<FakeZtunnel> {
    fake?.close();
    await env.standIn?.stop();
    env.standIn = undefined;
    fake = await FakeZtunnel.connect(env.zdsSocket, options);
    if (waitSnapshot) await fake.waitFor(() => fake!.snapshotSent);
    return fake;
  }

  /** ztunnel is healthy again: a fresh stand-in, synced (every registered pod running). */
  async function healthyZtunnel(): Promise<void> {
    fake?.close();
    fake = undefined;
    await env.standIn?.stop();
    env.standIn = new ZtunnelStandIn({ socketPath: env.zdsSocket, addon: env.addon }).start();
    await env.standIn.waitFor(() => env.standIn!.ready, 10_000, 'a healthy ztunnel connected and synced');
  }

  /** The chained ADD must fail in our plugin with a CNI error naming the cause. */
  async function expectAddFails(pod: FaultPod, cause: RegExp): Promise<void> {
    const err = await runtime.add(pod.cni).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(CniPluginError);
    expect(err).toMatchObject({ plugin: 'istio-cni', code: 999, msg: expect.stringMatching(cause) });
  }

  /** After a failed ADD: the pod is remembered and redirected; ztunnel gets it with its next snapshot; a retried ADD completes. */
  async function expectRetryCompletes(pod: FaultPod): Promise<void> {
    expect(existsSync(stateFileOf(env.runDir, pod.uid))).toBe(true);
    await expectRedirectedOnce(env, pod);
    await healthyZtunnel();
    expectRunningInZtunnel(env, pod);
    // The runtime retries our plugin's ADD for the same sandbox (bridge + host-local already done).
    expect(await runOurPlugin(env, 'ADD', pod.cni, prevResultOf(pod.ns))).toMatchObject({ ok: true });
    expectRunningInZtunnel(env, pod);
    await expectRedirectedOnce(env, pod);
  }

  /** Runtime DEL (chained), then the sandbox's netns goes. */
  async function deletePod(pod: FaultPod): Promise<void> {
    await runtime.del(pod.cni);
    deleteNetns(pod.ns);
  }

  beforeAll(async () => {
    env = new DemoEnvironment({ subnet: 94, podNames: [] });
    await env.setUp();
    node = env.addon.openNetns(demoNodeNetnsPath(env));
    runtime = cniRuntime(env, env.addon, node);
    // Three enrolled pods, so every ztunnel connection gets a snapshot with entries.
    for (let i = 0; i < 3; i++) await runtime.add(newPod('base').cni);
    pid = agentPid(env);
    baselineFds = await settledFdCount(pid);
  }, 60_000);

  afterAll(async () => {
    try {
      fake?.close();
      for (const p of pods) await runtime?.del(p.cni).catch(() => undefined);
    } finally {
      for (const p of pods) deleteNetns(p.ns);
      node?.close();
      await env?.tearDown();
    }
  }, 60_000);

  it("ztunnel answers the add with an error ack: ADD fails naming ztunnel's error; the retry completes", async () => {
    const pod = newPod('errack');
    await badZtunnel({
      ackError: (req) => ('add' in req && req.add.uid === pod.uid ? 'failure to start proxy : injected: address in use' : undefined),
    });
    await expectAddFails(pod, /status code 500\): ztunnel rejected pod .*failure to start proxy : injected: address in use/);
    await expectRetryCompletes(pod);
  });

  it('ztunnel killed mid-snapshot: ADD fails naming the lost connection; the retry completes', async () => {
    const pod = newPod('midsnap');
    const bad = await badZtunnel({ dieOnRequest: 2, ackDelayMs: 400 }, false);
    await bad.waitFor(() => bad.messages.length >= 1); // the snapshot is under way
    await expectAddFails(pod, /status code 500\): (ztunnel connection \d+ closed: ztunnel closed the connection|no ztunnel connection)/);
    expect(bad.closed && !bad.snapshotSent).toBe(true);
    await expectRetryCompletes(pod);
  });

  it('ztunnel never acks the add: ADD fails naming ztunnel (not an unreachable agent); the retry completes', async () => {
    const pod = newPod('noack');
    await badZtunnel({ silent: (req) => 'add' in req && req.add.uid === pod.uid });
    await expectAddFails(pod, /status code 500\): pod faults\/noack-\d+ not enrolled within 4000 ms: ztunnel has not acknowledged it/);
    await expectRetryCompletes(pod);
  }, 30_000);

  it('an ADD for a netns deleted just before: fails naming the missing netns; nothing recorded, nothing in ztunnel, no fd kept', async () => {
    await healthyZtunnel();
    const before = await settledFdCount(pid);
    const pod = newPod('gone');
    deleteNetns(pod.ns);
    const outcome = await runOurPlugin(env, 'ADD', pod.cni, { cniVersion: '1.0.0', ips: [{ address: '10.248.94.250/24' }] });
    expect(outcome).toMatchObject({
      ok: false,
      code: 999,
      msg: expect.stringMatching(/status code 500\): pod netns \S+ does not exist \(the sandbox is gone\?\)/),
    });
    expect(existsSync(stateFileOf(env.runDir, pod.uid))).toBe(false);
    expect(env.standIn!.pods().has(pod.uid)).toBe(false);
    expect(await settledFdCount(pid)).toBe(before);
  });

  it('the netns is deleted while its ADD is in flight: the ADD completes on the held namespace; the DEL that follows leaves nothing', async () => {
    const pod = newPod('vanish');
    const slow = await badZtunnel({ ackDelayFor: (req) => ('add' in req && req.add.uid === pod.uid ? 400 : undefined) });
    const before = await settledFdCount(pid);
    const targetsBefore = fdTargets(pid);
    const adding = runtime.add(pod.cni);
    await slow.waitFor(() => slow.messages.some((m) => m.kind === 'add' && m.uid === pod.uid), 5_000);
    deleteNetns(pod.ns); // the runtime tears the sandbox down meanwhile
    await adding; // the agent holds the namespace open: rules and ztunnel got the same one
    expect(slow.running.has(pod.uid)).toBe(true);
    await runtime.del(pod.cni); // the runtime's DEL for the gone sandbox
    expect(existsSync(stateFileOf(env.runDir, pod.uid))).toBe(false);
    expect(slow.running.has(pod.uid)).toBe(false);
    // Every fd the ADD took (the sockets that held the vanished namespace) is closed again.
    expect(await settledFdCount(pid)).toBe(before);
    expect(fdTargets(pid)).toEqual(targetsBefore);
  });

  it('a DEL arrives while the ADD is in flight: the ADD is answered, then the DEL takes everything out again', async () => {
    const pod = newPod('deladd');
    const slow = await badZtunnel({ ackDelayFor: (req) => ('add' in req && req.add.uid === pod.uid ? 400 : undefined) });
    const before = await settledFdCount(pid);
    const adding = runtime.add(pod.cni);
    await slow.waitFor(() => slow.messages.some((m) => m.kind === 'add' && m.uid === pod.uid), 5_000);
    const deleting = runOurPlugin(env, 'DEL', pod.cni); // another plugin process: not serialised by our runtime
    await adding;
    expect(await deleting).toMatchObject({ ok: true });
    expect(existsSync(stateFileOf(env.runDir, pod.uid))).toBe(false);
    expect(slow.messages.filter((m) => m.uid === pod.uid).map((m) => m.kind)).toEqual(['add', 'del']);
    expect(slow.running.has(pod.uid)).toBe(false);
    expect(hasNoRules(pod.ns)).toBe(true);
    expect(await settledFdCount(pid)).toBe(before);
    await runtime.del(pod.cni); // the runtime's own teardown of bridge + host-local
  });

  it('left nothing behind: after DEL of these pods the agent holds exactly the baseline fds', async () => {
    await healthyZtunnel();
    for (const p of pods.slice(3)) await deletePod(p);
    expect(await settledFdCount(pid)).toBe(baselineFds);
  });
});
