// Hostile CNI_NETNS values against the real kernel and filesystem: a symlink where the runtime
// bind-mounts the namespace, a regular file, a FIFO (must not block), the agent's own (host)
// namespace, and a path that climbs out of --netns-root. Every file is test-owned and removed.
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NativeNetAddon } from '../../src/addon/net-addon.js';
import { PodNetnsOpener } from '../../src/pods/netns-path.js';
import { createNetns, deleteAllNetns, privilegedSkipReason, requirePrivilegedInCi, type TestNetns } from '../helpers/netns.js';

requirePrivilegedInCi();
const skip = privilegedSkipReason();

describe.skipIf(skip)(`pod netns paths (real files)${skip ? ` — skipped: ${skip}` : ''}`, () => {
  let addon: NativeNetAddon;
  let pod: TestNetns;
  let root: string;
  const made: string[] = [];
  const runtimeFile = (name: string): string => {
    const path = `/var/run/netns/ana-test-${process.pid}-${name}`;
    made.push(path);
    return path;
  };

  beforeAll(() => {
    addon = new NativeNetAddon();
    pod = createNetns('paths');
    root = mkdtempSync(join(tmpdir(), 'ana-netns-root-'));
    mkdirSync(join(root, 'var', 'run', 'netns'), { recursive: true });
  });
  afterAll(() => {
    for (const path of made) rmSync(path, { force: true });
    rmSync(root, { recursive: true, force: true });
    deleteAllNetns();
  });

  it('opens a real pod namespace at the runtime location', () => {
    const handle = new PodNetnsOpener(addon, '').open(pod.path);
    expect(handle.ino).toBeGreaterThan(0);
    handle.close();
  });

  it('refuses a symlink to a namespace where the runtime bind-mounts one', () => {
    const link = runtimeFile('link');
    symlinkSync(pod.path, link);
    expect(() => new PodNetnsOpener(addon, '').open(link)).toThrow(/a symlink/);
  });

  it('refuses a symlink under --netns-root that points out of it', () => {
    symlinkSync(pod.path, join(root, 'var', 'run', 'netns', 'escape'));
    expect(() => new PodNetnsOpener(addon, root).open('/var/run/netns/escape')).toThrow(/a symlink/);
    expect(() => new PodNetnsOpener(addon, root).open('/var/run/netns/../../../../var/run/netns/x')).toThrow(/has a "\.\." segment/);
  });

  it('refuses a regular file and a FIFO (without blocking) as not a network namespace', () => {
    const file = runtimeFile('file');
    writeFileSync(file, 'not a namespace');
    expect(() => new PodNetnsOpener(addon, '').open(file)).toThrow(expect.objectContaining({ code: 'EINVAL', syscall: 'ioctl' }));
    const fifo = runtimeFile('fifo');
    execFileSync('mkfifo', [fifo]);
    expect(() => new PodNetnsOpener(addon, '').open(fifo)).toThrow(/not a network namespace/);
  });

  it("refuses the agent's own namespace (the host's, with hostNetwork)", () => {
    expect(() => new PodNetnsOpener(addon, '').open(`/proc/${process.pid}/ns/net`)).toThrow(/agent's own \(the host's\) network namespace/);
  });

  it('opens a pod namespace by /proc/<pid>/ns/net (cri-dockerd style)', async () => {
    // `ip netns exec` setns()es, then execs sleep in the same process: its pid is the sleeper's.
    const sleeper = spawn('ip', ['netns', 'exec', pod.name, 'sleep', '30'], { stdio: 'ignore' });
    try {
      const podIno = statSync(pod.path).ino;
      const procPath = `/proc/${sleeper.pid}/ns/net`;
      for (let i = 0; i < 200 && statSync(procPath).ino !== podIno; i++) await new Promise((r) => setTimeout(r, 10));
      const handle = new PodNetnsOpener(addon, '').open(procPath);
      expect(handle.ino).toBe(podIno);
      handle.close();
    } finally {
      sleeper.kill('SIGKILL');
    }
  });
});
