// Fault injection around the agent's persisted pod registry (root): state files damaged while the
// agent is down, and the run dir's filesystem full (a small tmpfs mounted on the test's own
// run dir). The agent must say so, rebuild what it can verify, keep serving, and never enrol a
// pod it could not record (a restart would forget it).
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NetnsHandle } from '../../src/addon/net-addon.js';
import type { CniRuntime } from '../../src/demo/cni-runtime.js';
import { demoPrerequisites, DemoEnvironment } from '../../src/demo/environment.js';
import { parseEnrolledPod, STATE_DIR } from '../../src/standalone/state-store.js';
import {
  agentPid,
  agentRules,
  checkRules,
  cniRuntime,
  demoNodeNetnsPath,
  hasNoRules,
  makePod,
  netnsFds,
  prevResultOf,
  runOurPlugin,
  stateFileOf,
  type FaultPod,
} from '../helpers/fault-env.js';
import { waitUntil } from '../helpers/wait.js';
import { deleteNetns, requirePrivilegedInCi } from '../helpers/netns.js';

requirePrivilegedInCi();
const skip = demoPrerequisites();
if (skip && process.env['CI']) throw new Error(`fault tests cannot run in CI: ${skip}`);

/** The run dir's filesystem: small enough to fill in a moment, big enough for sockets and a few pods. */
const TMPFS_SIZE = '1m';

describe.skipIf(skip)(`damaged pod registry and a full disk${skip ? ` — skipped: ${skip}` : ''}`, () => {
  let env: DemoEnvironment;
  let node: NetnsHandle;
  let runtime: CniRuntime;
  let mounted = false;
  const pods: FaultPod[] = [];
  const filler = (): string => join(env.runDir, 'filler');
  const agentLog = (): string => readFileSync(env.agentLog, 'utf8');
  const readyz = async (): Promise<number> =>
    fetch(`http://127.0.0.1:${env.healthPort}/readyz`).then(
      (r) => r.status,
      () => 0,
    );
  const umount = (): void => {
    if (!mounted) return;
    try {
      execFileSync('umount', [env.runDir], { stdio: 'ignore' });
    } catch {
      execFileSync('umount', ['-l', env.runDir], { stdio: 'ignore' }); // something still has it open
    }
    mounted = false;
  };
  const umountOnExit = (): void => {
    try {
      umount();
    } catch {
      // best effort
    }
  };

  const newPod = (tag: string): FaultPod => {
    const pod = makePod(tag);
    pods.push(pod);
    return pod;
  };

  async function expectRedirectedAndRunning(pod: FaultPod): Promise<void> {
    expect((await checkRules(env.addon, agentRules(env.addon), pod.ns)).drift, `${pod.name} rules`).toEqual([]);
    expect(env.standIn!.pods().get(pod.uid), `${pod.name} in ztunnel`).toMatchObject({ state: 'running' });
  }

  /** Restarts the agent process and waits until the stand-in has its new snapshot. */
  async function restartAgent(signal: 'SIGKILL' | 'SIGTERM'): Promise<void> {
    const connections = env.standIn!.connectionCount;
    await env.stopAgent(signal);
    await env.startAgent();
    await env.standIn!.waitFor(
      () => env.standIn!.connectionCount > connections && env.standIn!.ready,
      10_000,
      'stand-in resynced after the restart',
    );
  }

  /** Fills the run dir's filesystem until a write fails with ENOSPC. */
  function fillDisk(): void {
    try {
      writeFileSync(filler(), Buffer.alloc(4 * 1024 * 1024, 1));
      throw new Error('the run dir is not the small tmpfs: 4 MiB fitted');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
    }
  }

  beforeAll(async () => {
    env = new DemoEnvironment({ subnet: 96, podNames: [] });
    mkdirSync(env.runDir, { recursive: true, mode: 0o750 });
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${TMPFS_SIZE},mode=0750`, 'ana-faults-run', env.runDir]);
    mounted = true;
    process.once('exit', umountOnExit);
    await env.setUp();
    node = env.addon.openNetns(demoNodeNetnsPath(env));
    runtime = cniRuntime(env, env.addon, node);
  }, 60_000);

  afterAll(async () => {
    try {
      rmSync(join(env.runDir, 'filler'), { force: true });
      for (const p of pods) await runtime?.del(p.cni).catch(() => undefined);
    } finally {
      for (const p of pods) deleteNetns(p.ns);
      node?.close();
      await env?.stopAgent('SIGTERM');
      umountOnExit();
      process.removeListener('exit', umountOnExit);
      await env?.tearDown();
    }
  }, 60_000);

  it('pod state files truncated or corrupted while the agent is down: logged and set aside, the others restored and verified', async () => {
    const [truncated, garbled, okA, okB] = [newPod('trunc'), newPod('garble'), newPod('oka'), newPod('okb')];
    for (const p of [truncated!, garbled!, okA!, okB!]) await runtime.add(p.cni);
    await env.stopAgent('SIGKILL');
    const truncatedFile = stateFileOf(env.runDir, truncated!.uid);
    const garbledFile = stateFileOf(env.runDir, garbled!.uid);
    truncateSync(truncatedFile, Math.floor(readFileSync(truncatedFile).length / 2));
    writeFileSync(garbledFile, '\0\0\0\0{"uid": 7, "garbage');
    const connections = env.standIn!.connectionCount;
    await env.startAgent();
    await env.standIn!.waitFor(
      () => env.standIn!.connectionCount > connections && env.standIn!.ready,
      10_000,
      'stand-in resynced after the restart',
    );

    // Said so: one error line per damaged file, naming it and why.
    const problems = agentLog()
      .split('\n')
      .filter((l) => l.includes('unusable pod state file set aside'))
      .map((l) => JSON.parse(l) as { level: number; file: string; reason: string });
    expect(problems.map((p) => p.file).sort()).toEqual([truncatedFile, garbledFile].sort());
    expect(problems.every((p) => p.level >= 50 && p.reason.length > 0)).toBe(true);
    expect(existsSync(`${truncatedFile}.corrupt`) && existsSync(`${garbledFile}.corrupt`)).toBe(true);
    expect(existsSync(truncatedFile) || existsSync(garbledFile)).toBe(false);
    // Rebuilt what it could verify: the undamaged pods are in the new snapshot, their rules verified.
    for (const p of [okA!, okB!]) await expectRedirectedAndRunning(p);
    // The damaged ones are not served any more (their rules stay: fail closed), and CHECK tells the runtime.
    for (const p of [truncated!, garbled!]) {
      expect(env.standIn!.pods().has(p.uid), `${p.name} in ztunnel`).toBe(false);
      expect(await runOurPlugin(env, 'CHECK', p.cni, prevResultOf(p.ns))).toMatchObject({
        ok: false,
        msg: expect.stringContaining('is not enrolled'),
      });
    }
    expect(await readyz()).toBe(200);
    // The runtime's retried ADD brings a damaged pod back: recorded again, rules once, running.
    expect(await runOurPlugin(env, 'ADD', truncated!.cni, prevResultOf(truncated!.ns))).toMatchObject({ ok: true });
    expect(parseEnrolledPod(readFileSync(truncatedFile, 'utf8')).uid).toBe(truncated!.uid);
    await expectRedirectedAndRunning(truncated!);
  });

  it('disk full: a new ADD fails with a clear error and enrols nothing; enrolled pods and serving are unaffected', async () => {
    const enrolled = pods.filter((p) => env.standIn!.pods().has(p.uid));
    const pid = agentPid(env);
    const before = netnsFds(pid);
    fillDisk();
    const pod = newPod('full');
    const err = await runtime.add(pod.cni).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toMatchObject({
      plugin: 'istio-cni',
      code: 999,
      msg: expect.stringMatching(/status code 500\): cannot record the pod in \S+: ENOSPC/),
    });
    // The agent logs the failure before it answers, but its output reaches env.agentLog through
    // this process's pipe, which may not have written it yet (ASan's slower agent lost this race).
    await waitUntil(() => /cannot record the pod in [^"]*: ENOSPC/.test(agentLog()), 5_000, 'the ENOSPC failure in the agent log');
    expect(agentLog()).toMatch(/"msg":"plugin event failed"/);
    expect(agentLog()).toMatch(/cannot record the pod in [^"]*: ENOSPC/);
    // Nothing a restart would forget: no rules, not in ztunnel, no state (no temp file either), no netns kept.
    expect(hasNoRules(pod.ns)).toBe(true);
    expect(env.standIn!.pods().has(pod.uid)).toBe(false);
    expect(readdirSync(join(env.runDir, STATE_DIR)).filter((f) => !f.endsWith('.json') && !f.endsWith('.corrupt'))).toEqual([]);
    expect(existsSync(stateFileOf(env.runDir, pod.uid))).toBe(false);
    expect(netnsFds(pid)).toEqual(before);
    // A repeated ADD of an enrolled pod cannot record it either, but the pod stays enrolled and its file intact.
    const again = await runOurPlugin(env, 'ADD', enrolled[0]!.cni, prevResultOf(enrolled[0]!.ns));
    expect(again).toMatchObject({ ok: false, msg: expect.stringContaining('ENOSPC') });
    expect(parseEnrolledPod(readFileSync(stateFileOf(env.runDir, enrolled[0]!.uid), 'utf8')).uid).toBe(enrolled[0]!.uid);
    for (const p of enrolled) await expectRedirectedAndRunning(p);
    expect(await readyz()).toBe(200);
  });

  it('disk still full: a restarted agent comes up, restores the enrolled pods and serves', async () => {
    const enrolled = pods.filter((p) => env.standIn!.pods().has(p.uid));
    expect(enrolled.length).toBeGreaterThan(0);
    await restartAgent('SIGTERM');
    expect(await readyz()).toBe(200);
    for (const p of enrolled) await expectRedirectedAndRunning(p);
    // It said what it could not do (the plugin's fallback file keeps its previous content).
    expect(agentLog()).toMatch(/"err":"ENOSPC[^"]*","msg":"could not write the enablement snapshot file/);
    expect(JSON.parse(readFileSync(join(env.runDir, 'ambient-enablement.json'), 'utf8'))).toMatchObject({
      version: 1,
      allNamespaces: true,
    });
  });

  it("space freed: the failed pod is enrolled on the runtime's retry, and the registry survives another restart", async () => {
    rmSync(filler());
    const pod = pods.find((p) => p.name.startsWith('full-'))!;
    await runtime.del(pod.cni); // the runtime's teardown of the failed sandbox attempt
    await runtime.add(pod.cni);
    await expectRedirectedAndRunning(pod);
    const enrolled = pods.filter((p) => env.standIn!.pods().has(p.uid));
    await restartAgent('SIGKILL');
    await waitUntil(async () => (await readyz()) === 200, 5_000, '/readyz after the restart');
    for (const p of enrolled) await expectRedirectedAndRunning(p);
  });
});
