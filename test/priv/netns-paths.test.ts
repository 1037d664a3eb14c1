// Hostile CNI_NETNS values against the real kernel and filesystem: a symlink where the runtime
// bind-mounts the namespace, a regular file, a FIFO (must not block), the agent's own (host)
// namespace, and a path that climbs out of --netns-root. Every file is test-owned and removed.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, realpathSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
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
    expect(() => addon.openNetnsInDirectory('/var/run/netns', basename(link))).toThrow(
      expect.objectContaining({ code: 'ELOOP', syscall: 'openat', path: link }),
    );
    addon.openNetns(link).close(); // following it reaches the namespace: only the flag refuses it
    const dangling = runtimeFile('dangling');
    symlinkSync(`/var/run/netns/ana-test-${process.pid}-nothing-here`, dangling);
    expect(() => new PodNetnsOpener(addon, '').open(dangling)).toThrow(
      expect.objectContaining({ code: 'EBADNETNS', cause: expect.objectContaining({ code: 'ELOOP' }) }),
    );
  });

  it('opens in a directory only one path component, and reports where the directory really is', () => {
    for (const name of ['', '.', '..', 'a/b', 'a\0b']) {
      expect(() => addon.openNetnsInDirectory('/var/run/netns', name)).toThrow(
        expect.objectContaining({ code: 'EINVAL', syscall: 'openat', message: expect.stringContaining('one path component') }),
      );
    }
    const linked = join(root, 'linked-netns');
    symlinkSync('/var/run/netns', linked);
    const { handle, directory } = addon.openNetnsInDirectory(linked, basename(pod.path));
    expect(directory).toBe(realpathSync('/var/run/netns'));
    expect(handle.ino).toBe(statSync(pod.path).ino);
    handle.close();
    expect(() => addon.openNetnsInDirectory(join(root, 'no-such-dir'), 'x')).toThrow(
      expect.objectContaining({ code: 'ENOENT', syscall: 'open' }),
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

  it('never opens a namespace out of --netns-root while its directory link is flipped to another one', async () => {
    // A child flips <root>/var/run/netns, a symlink, between a directory inside the root (the
    // pod's namespace) and one outside it holding another namespace under the same name, each
    // flip one atomic rename. Checking the directory and then opening the path lets the outside
    // one through now and then; the open in the directory it resolved never does.
    const outsider = createNetns('outsider');
    const base = mkdtempSync(join(tmpdir(), 'ana-netns-race-'));
    const raceRoot = join(base, 'root');
    const run = join(raceRoot, 'var', 'run');
    const dirs = { inside: join(run, 'netns.inside'), outside: join(base, 'outside') };
    const mounts = [join(dirs.inside, 'cni-race'), join(dirs.outside, 'cni-race')];
    const seen = { opened: 0, refused: 0, escaped: 0 };
    let flipper: ReturnType<typeof spawn> | undefined;
    try {
      for (const [i, ns] of [pod.path, outsider.path].entries()) {
        mkdirSync(dirname(mounts[i]!), { recursive: true });
        writeFileSync(mounts[i]!, '');
        execFileSync('mount', ['--bind', ns, mounts[i]!]);
      }
      symlinkSync(dirs.inside, join(run, 'netns'));
      flipper = spawn(process.execPath, ['-e', FLIP_LOOP, run, dirs.inside, dirs.outside], { stdio: 'ignore' });
      const opener = new PodNetnsOpener(addon, raceRoot, { own: undefined });
      const podIno = statSync(pod.path).ino;
      const deadline = Date.now() + 5000;
      while (Date.now() < deadline && (seen.opened < 200 || seen.refused < 200)) {
        for (let i = 0; i < 100; i++) tryOpen(opener, podIno, seen);
        await new Promise((resolve) => setImmediate(resolve));
      }
    } finally {
      if (flipper?.exitCode === null) {
        flipper.kill('SIGKILL');
        await new Promise((resolve) => flipper!.once('exit', resolve));
      }
      for (const file of mounts) spawnSync('umount', [file], { stdio: 'ignore' }); // those not mounted just fail
      rmSync(base, { recursive: true, force: true });
    }
    expect(seen.escaped).toBe(0);
    expect(seen.opened).toBeGreaterThanOrEqual(200); // both link targets were really hit
    expect(seen.refused).toBeGreaterThanOrEqual(200);
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

/** The child's loop: <run>/netns, a symlink, renamed over with one to the other directory. */
const FLIP_LOOP = `
const { renameSync, symlinkSync } = require('node:fs');
const [run, inside, outside] = process.argv.slice(1);
for (;;) for (const dir of [outside, inside]) { symlinkSync(dir, run + '/netns.next'); renameSync(run + '/netns.next', run + '/netns'); }
`;

function tryOpen(opener: PodNetnsOpener, podIno: number, seen: Record<'opened' | 'refused' | 'escaped', number>): void {
  try {
    const handle = opener.open('/var/run/netns/cni-race');
    seen[handle.ino === podIno ? 'opened' : 'escaped']++;
    handle.close();
  } catch (err) {
    if (err instanceof Error && /outside --netns-root/.test(err.message)) seen.refused++;
    else throw err;
  }
}
