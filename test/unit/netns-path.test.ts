// CNI_NETNS is input that reaches setns(): only the runtimes' real locations are accepted.
import { describe, expect, it } from 'vitest';
import { netnsDirProblem, NetnsPathError, podNetnsLocation, PodNetnsOpener } from '../../src/pods/netns-path.js';
import { FakeNetAddon } from '../fakes/fake-net-addon.js';

describe('podNetnsLocation', () => {
  it.each([
    ['/var/run/netns/cni-1234', '/host/var/run/netns/cni-1234'],
    ['/run/netns/cni-1234', '/host/run/netns/cni-1234'],
    ['/var/run/netns/5f8b2ab7-7b1c-4a55-9f33-5d1c1a0d0f3e', '/host/var/run/netns/5f8b2ab7-7b1c-4a55-9f33-5d1c1a0d0f3e'], // CRI-O
    ['/var/run/docker/netns/1a2b3c4d5e6f', '/host/var/run/docker/netns/1a2b3c4d5e6f'], // Docker, cri-dockerd, minikube
    ['/run/containerd/io.containerd.grpc.v1.cri/netns/cni-1234', '/host/run/containerd/io.containerd.grpc.v1.cri/netns/cni-1234'],
    ['/run/k3s/containerd/io.containerd.grpc.v1.cri/netns/cni-1234', '/host/run/k3s/containerd/io.containerd.grpc.v1.cri/netns/cni-1234'], // k3s, RKE2
    [
      '/var/snap/microk8s/common/run/containerd/io.containerd.grpc.v1.cri/netns/cni-1',
      '/host/var/snap/microk8s/common/run/containerd/io.containerd.grpc.v1.cri/netns/cni-1',
    ],
    ['/proc/4242/ns/net', '/host/proc/4242/ns/net'],
  ])('accepts %s under the root as %s', (path, opened) => {
    expect(podNetnsLocation('/host', path)).toBe(opened);
    expect(podNetnsLocation('', path)).toBe(path);
  });

  it.each([
    ['', 'is not an absolute path'],
    ['var/run/netns/x', 'is not an absolute path'],
    ['/var/run/netns/../../../etc/shadow', 'has a ".." segment'],
    ['/var/run/netns/./x', 'not a normalized path'],
    ['/var/run/netns//x', 'not a normalized path'],
    ['/var/run/netns/x/', 'not a normalized path'],
    ['/var/run/netns/x\0y', 'NUL'],
    ['/etc/passwd', 'outside the runtime netns locations'],
    ['/var/run/netns', 'outside the runtime netns locations'],
    ['/var/run/netns/a/b', 'outside the runtime netns locations'],
    ['/proc/self/ns/net', 'outside the runtime netns locations'],
    ['/proc/1/ns/mnt', 'outside the runtime netns locations'],
    ['/proc/0/ns/net', 'outside the runtime netns locations'],
    ['/run/containerd/io.containerd.grpc.v1.cri/netns', 'outside the runtime netns locations'],
    ['/run/containerd/io.containerd.runtime.v2.task/k8s.io/abc/rootfs', 'outside the runtime netns locations'],
    ['/data/containerd/io.containerd.grpc.v1.cri/netns/cni-1', 'add a directory with --netns-dirs'],
    [`/var/run/netns/${'x'.repeat(5000)}`, 'is longer than PATH_MAX'],
  ])('refuses %j (%s)', (path, why) => {
    expect(() => podNetnsLocation('/host', path)).toThrow(NetnsPathError);
    expect(() => podNetnsLocation('/host', path)).toThrow(why);
  });

  it('accepts a directory the operator added (--netns-dirs), only one level deep', () => {
    const extra = ['/data/containerd/io.containerd.grpc.v1.cri/netns'];
    expect(podNetnsLocation('/host', '/data/containerd/io.containerd.grpc.v1.cri/netns/cni-1', extra)).toBe(
      '/host/data/containerd/io.containerd.grpc.v1.cri/netns/cni-1',
    );
    expect(() => podNetnsLocation('/host', '/data/containerd/io.containerd.grpc.v1.cri/netns/a/b', extra)).toThrow(NetnsPathError);
    expect(() => podNetnsLocation('/host', '/data/containerd/io.containerd.grpc.v1.cri/x', extra)).toThrow(NetnsPathError);
  });
});

describe('netnsDirProblem (--netns-dirs values)', () => {
  it.each([
    ['/data/containerd/io.containerd.grpc.v1.cri/netns', undefined],
    ['relative/netns', 'is not an absolute path'],
    ['/', 'not a normalized path'],
    ['/data/../etc', 'has a ".." segment'],
    ['/data/netns/', 'not a normalized path'],
    ['/proc/1/ns', 'a kernel filesystem'],
    ['/sys/fs', 'a kernel filesystem'],
  ])('%j: %s', (dir, problem) => {
    const found = netnsDirProblem(dir);
    if (problem === undefined) expect(found).toBeUndefined();
    else expect(found).toContain(problem);
  });
});

describe('PodNetnsOpener', () => {
  it("refuses the agent's own namespace and closes the handle", () => {
    const addon = new FakeNetAddon();
    const ns = addon.addNetns('/var/run/netns/hostlike');
    const opener = new PodNetnsOpener(addon, '', { own: { ino: ns.ino, dev: 4 } });
    expect(() => opener.open('/var/run/netns/hostlike')).toThrow(/agent's own \(the host's\) network namespace/);
    expect(addon.openFds).toBe(0);
  });

  it('opens a runtime file in its directory without following a link (refused as a symlink), a /proc link by following it', () => {
    const addon = new FakeNetAddon();
    addon.addNetns('/host/var/run/netns/link');
    addon.symlinks.add('/host/var/run/netns/link');
    addon.addNetns('/host/proc/42/ns/net');
    addon.symlinks.add('/host/proc/42/ns/net');
    const opener = new PodNetnsOpener(addon, '/host', { own: undefined });
    expect(() => opener.open('/var/run/netns/link')).toThrow(
      expect.objectContaining({
        code: 'EBADNETNS',
        message: 'refusing netns path /host/var/run/netns/link: a symlink (runtimes bind-mount the namespace there)',
        cause: expect.objectContaining({ code: 'ELOOP', syscall: 'openat' }),
      }),
    );
    opener.open('/proc/42/ns/net').close();
    expect(addon.opens).toEqual([
      { path: '/host/var/run/netns/link', inDirectory: true },
      { path: '/host/proc/42/ns/net', inDirectory: false },
    ]);
    expect(addon.openFds).toBe(0);
  });

  it('refuses a namespace whose directory the open found outside --netns-root, and closes it', () => {
    const addon = new FakeNetAddon();
    addon.addNetns('/host/var/run/netns/cni-1');
    addon.directoryTargets.set('/host/var/run/netns', '/var/run/netns'); // a link swapped in for the directory
    const opener = new PodNetnsOpener(addon, '/host', { own: undefined });
    expect(() => opener.open('/var/run/netns/cni-1')).toThrow(
      expect.objectContaining({
        code: 'EBADNETNS',
        message: 'refusing netns path /host/var/run/netns/cni-1: its directory resolves to /var/run/netns, outside --netns-root /host',
      }),
    );
    expect(addon.openFds).toBe(0);
    addon.directoryTargets.set('/host/var/run/netns', '/host/run/netns'); // still inside: accepted
    opener.open('/var/run/netns/cni-1').close();
    addon.directoryTargets.set('/host/var/run/netns', '/hostile/netns'); // a prefix of the root's name is not inside it
    expect(() => opener.open('/var/run/netns/cni-1')).toThrow(/outside --netns-root/);
  });

  it('compares against the root as written when it does not resolve at start (never skips the check)', () => {
    const addon = new FakeNetAddon();
    const root = `/nonexistent-root-${process.pid}/`;
    addon.addNetns(`${root}var/run/netns/cni-1`);
    addon.directoryTargets.set(`${root}var/run/netns`, '/var/run/netns');
    expect(() => new PodNetnsOpener(addon, root, { own: undefined }).open('/var/run/netns/cni-1')).toThrow(/outside --netns-root/);
    addon.directoryTargets.clear();
    new PodNetnsOpener(addon, root, { own: undefined }).open('/var/run/netns/cni-1').close();
    expect(addon.openFds).toBe(0);
  });

  it('explains a missing namespace', () => {
    const opener = new PodNetnsOpener(new FakeNetAddon(), '/host', { own: undefined });
    expect(() => opener.open('/var/run/netns/gone')).toThrow('pod netns /host/var/run/netns/gone does not exist (the sandbox is gone?)');
  });
});
