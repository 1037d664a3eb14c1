// CNI_NETNS is input that reaches setns(): only the runtimes' real locations are accepted.
import { describe, expect, it } from 'vitest';
import { NetnsPathError, podNetnsLocation, PodNetnsOpener } from '../../src/pods/netns-path.js';
import { FakeNetAddon } from '../fakes/fake-net-addon.js';

describe('podNetnsLocation', () => {
  it.each([
    ['/var/run/netns/cni-1234', '/host/var/run/netns/cni-1234'],
    ['/run/netns/cni-1234', '/host/run/netns/cni-1234'],
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
    [`/var/run/netns/${'x'.repeat(5000)}`, 'is longer than PATH_MAX'],
  ])('refuses %j (%s)', (path, why) => {
    expect(() => podNetnsLocation('/host', path)).toThrow(NetnsPathError);
    expect(() => podNetnsLocation('/host', path)).toThrow(why);
  });
});

describe('PodNetnsOpener', () => {
  it("refuses the agent's own namespace and closes the handle", () => {
    const addon = new FakeNetAddon();
    const ns = addon.addNetns('/var/run/netns/hostlike');
    const opener = new PodNetnsOpener(addon, '', { ino: ns.ino, dev: 4 });
    expect(() => opener.open('/var/run/netns/hostlike')).toThrow(/agent's own \(the host's\) network namespace/);
    expect(addon.openFds).toBe(0);
  });

  it('explains a missing namespace', () => {
    const opener = new PodNetnsOpener(new FakeNetAddon(), '/host', undefined);
    expect(() => opener.open('/var/run/netns/gone')).toThrow('pod netns /host/var/run/netns/gone does not exist (the sandbox is gone?)');
  });
});
