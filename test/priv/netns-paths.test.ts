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

  it('decides "symlink" in the open itself (O_NOFOLLOW: ELOOP), for a dangling link too', () => {
    const link = runtimeFile('link-raw');
    symlinkSync(pod.path, link);
    expect(() => addon.openNetns(link, { noFollow: true })).toThrow(
      expect.objectContaining({ code: 'ELOOP', syscall: 'open', path: link }),
    );
    addon.openNetns(link).close(); // following it reaches the namespace: only the flag refuses it
    const dangling = runtimeFile('dangling');
    symlinkSync(`/var/run/netns/ana-test-${process.pid}-nothing-here`, dangling);
    expect(() => new PodNetnsOpener(addon, '').open(dangling)).toThrow(
      expect.objectContaining({ code: 'EBADNETNS', cause: expect.objectContaining({ code: 'ELOOP' }) }),
    );
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

  it("opens a netns bind-mounted under containerd's state dir (netns_mounts_under_state_dir), under --netns-root", () => {
    const dir = join(root, 'run', 'containerd', 'io.containerd.grpc.v1.cri', 'netns');
    mkdirSync(dir, { recursive: true });
    const file = join(dir, 'cni-state');
    writeFileSync(file, '');
    execFileSync('mount', ['--bind', pod.path, file]);
    try {
      const handle = new PodNetnsOpener(addon, root).open('/run/containerd/io.containerd.grpc.v1.cri/netns/cni-state');
      expect(handle.ino).toBe(statSync(pod.path).ino);
      handle.close();
    } finally {
      execFileSync('umount', [file]);
    }
  });

  it('refuses a path whose directory is a symlink leading out of --netns-root', () => {
    mkdirSync(join(root, 'var', 'run', 'docker'), { recursive: true });
    symlinkSync('/var/run/netns', join(root, 'var', 'run', 'docker', 'netns')); // absolute: resolves outside the root
    const name = pod.path.split('/').at(-1)!;
    expect(() => new PodNetnsOpener(addon, root).open(`/var/run/docker/netns/${name}`)).toThrow(
      /its directory resolves to \/(var\/)?run\/netns, outside --netns-root/,
    );
  });

  it("refuses the host's namespace (<proc-dir>/1/ns/net) even when the agent runs elsewhere", () => {
    const proc = join(root, 'proc');
    mkdirSync(join(proc, '1', 'ns'), { recursive: true });
    writeFileSync(join(proc, '1', 'ns', 'net'), '');
    execFileSync('mount', ['--bind', pod.path, join(proc, '1', 'ns', 'net')]); // this test's stand-in for the host
    try {
      expect(() => new PodNetnsOpener(addon, '', { procDir: proc }).open(pod.path)).toThrow(/it is the host's network namespace/);
    } finally {
      execFileSync('umount', [join(proc, '1', 'ns', 'net')]);
    }
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
