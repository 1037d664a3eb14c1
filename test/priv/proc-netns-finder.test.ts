// Privileged: the /proc scan against real network namespaces. The proc tree is fake (cgroup and
// stat files), but each <pid>/ns/net is a symlink to a real /var/run/netns/<name> (or to this
// process's own netns, standing in for the host's): stat follows it to the real nsfs inode, and
// the real addon opens the real namespace and lists its real addresses.
import { mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { NativeNetAddon, type NetnsTarget } from '../../src/addon/net-addon.js';
import { currentThreadNetns, fdCount } from '../helpers/netns-files.js';
import type { ResultsOf, Step } from '../../src/addon/steps.js';
import { ProcNetnsFinder } from '../../src/kube/proc-netns-finder.js';
import { createNetns, deleteAllNetns, ipIn, privilegedSkipReason, requirePrivilegedInCi, type TestNetns } from '../helpers/netns.js';

requirePrivilegedInCi();
const skip = privilegedSkipReason();

const UID_A = 'aaaaaaaa-1111-4111-8111-111111111111';
const UID_B = 'bbbbbbbb-2222-4222-8222-222222222222';
const UID_C = 'cccccccc-3333-4333-8333-333333333333';
const UID_H = 'dddddddd-4444-4444-8444-444444444444';

function cgroup(uid: string, cid: string): string {
  return `0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod${uid.replace(/-/g, '_')}.slice/cri-containerd-${cid}.scope\n`;
}

function stat(pid: number, start: number): string {
  return `${pid} (pause) S 1 ${pid} ${pid} 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 ${start} 1024000 100\n`;
}

/** The real addon, recording where each job ran. */
class RecordingAddon extends NativeNetAddon {
  readonly inspected: string[] = [];
  override run<const S extends readonly Step[]>(target: NetnsTarget, steps: S): Promise<ResultsOf<S>> {
    if (target !== 'fresh') this.inspected.push(target.path);
    return super.run(target, steps);
  }
}

/**
 * An interface holding `address`/32, inside the namespace only: a dummy, or (kernels without the
 * dummy module) one end of a veth pair whose both ends stay in the namespace.
 */
function giveAddress(ns: TestNetns, address: string): void {
  try {
    ipIn(ns.name, ['link', 'add', 'd0', 'type', 'dummy']);
  } catch {
    ipIn(ns.name, ['link', 'add', 'd0', 'type', 'veth', 'peer', 'name', 'd1']);
  }
  ipIn(ns.name, ['addr', 'add', `${address}/32`, 'dev', 'd0']);
  ipIn(ns.name, ['link', 'set', 'd0', 'up']);
}

describe.skipIf(skip)(`ProcNetnsFinder on real namespaces${skip ? ` — skipped: ${skip}` : ''}`, () => {
  afterAll(() => deleteAllNetns());

  it('finds the real netns for the right UID, rejects a netns without the pod IP, skips the host netns, leaks no fd', async () => {
    const root = mkdtempSync(join(tmpdir(), 'proc-finder-priv-'));
    const proc = join(root, 'proc');
    const addon = new RecordingAddon();
    const nsA = createNetns('pfa');
    const nsB = createNetns('pfb');
    const nsC = createNetns('pfc');
    giveAddress(nsA, '10.251.0.1'); // pod A's IP
    giveAddress(nsB, '10.251.0.99'); // NOT pod B's IP (10.251.0.2)
    giveAddress(nsC, '10.251.0.3'); // pod C's IP
    const pid = (n: number, target: string, uid: string, start: number, cid: string): void => {
      mkdirSync(join(proc, String(n), 'ns'), { recursive: true });
      symlinkSync(target, join(proc, String(n), 'ns', 'net'));
      writeFileSync(join(proc, String(n), 'cgroup'), cgroup(uid, cid));
      writeFileSync(join(proc, String(n), 'stat'), stat(n, start));
    };
    try {
      pid(11, nsA.path, UID_A, 100, 'a1');
      pid(12, nsA.path, UID_A, 150, 'a2'); // a second process of A, same netns
      pid(21, nsB.path, UID_B, 200, 'b1');
      pid(30, nsA.path, UID_C, 50, 'c0'); // an older process of pod C sitting in A's netns
      pid(31, nsC.path, UID_C, 300, 'c1');
      pid(40, '/proc/self/ns/net', UID_H, 10, 'h1'); // the host netns, with a wanted UID
      mkdirSync(join(proc, '1')); // pid 1 without readable entries

      const finder = new ProcNetnsFinder({ addon, procDir: proc, hostNetns: currentThreadNetns() });
      const before = fdCount();
      const found = await finder.find([
        { uid: UID_A, ips: ['10.251.0.1'] },
        { uid: UID_B, ips: ['10.251.0.2'] },
        { uid: UID_C, ips: ['10.251.0.3'] },
        { uid: UID_H, ips: ['10.251.0.4'] },
      ]);
      try {
        expect([...found.keys()].sort()).toEqual([UID_A, UID_C]);
        const a = found.get(UID_A)!;
        const c = found.get(UID_C)!;
        expect({ ino: a.ino, dev: a.dev }).toEqual({ ino: statSync(nsA.path).ino, dev: statSync(nsA.path).dev });
        expect(a.path).toBe(join(proc, '11', 'ns', 'net')); // the oldest process of A
        expect(c.ino).toBe(statSync(nsC.path).ino); // not A's netns, although that process was older
        expect(c.ino).not.toBe(a.ino);
        // B's netns was opened and inspected (then rejected: no 10.251.0.2 there); C's older
        // process in A's netns was inspected and rejected; the host-netns process never opened.
        expect(addon.inspected).toContain(join(proc, '21', 'ns', 'net'));
        expect(addon.inspected).toContain(join(proc, '30', 'ns', 'net'));
        expect(addon.inspected.some((p) => p.startsWith(join(proc, '40')))).toBe(false);
        // Exactly the returned handles are open; every rejected one was closed.
        expect(fdCount()).toBe(before + found.size);
        // The handle is usable: it is the namespace holding the pod IP.
        const [res] = await addon.run(a, [{ op: 'listAddresses' }] as const);
        expect(res.addresses.map((x) => x.address)).toContain('10.251.0.1');
      } finally {
        for (const h of found.values()) h.close();
      }
      expect(fdCount()).toBe(before);

      // Repeated scans do not accumulate fds either.
      for (let i = 0; i < 3; i++) {
        const again = await finder.find([
          { uid: UID_B, ips: ['10.251.0.2'] },
          { uid: UID_A, ips: ['10.251.0.1'] },
        ]);
        expect([...again.keys()]).toEqual([UID_A]);
        for (const h of again.values()) h.close();
      }
      expect(fdCount()).toBe(before);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
