// The /proc scan that finds already-running pods' network namespaces, without root: a fake
// proc tree in a temp dir, where each <pid>/ns/net is a plain file (hard links share one inode,
// like processes sharing a namespace) and the FakeNetAddon opens those paths.
import { linkSync, mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { NetnsHandle } from '../../src/addon/net-addon.js';
import {
  canonicalIp,
  parseCgroupPodUid,
  parseProcStatStartTime,
  podIdsFromCgroupPath,
  ProcNetnsFinder,
} from '../../src/kube/proc-netns-finder.js';
import { FakeNetAddon } from '../fakes/fake-net-addon.js';

const CID = '9bca8d63d5fa610783847915bcff0ecac1273e5b4bed3f6fa1b07350e0135961';
const CID2 = 'a55d9ac3b312d8a2627824b6d6dd8af66fbec439bf4e0ec22d6d9945ad337a38';

describe('parseProcStatStartTime', () => {
  const tail = 'S 1 10 10 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 70298968 12345 100 18446744073709551615';

  it('reads field 22', () => {
    expect(parseProcStatStartTime(`10 (pause) ${tail}\n`)).toBe(70298968);
  });

  it('counts fields after the last ")" (comm may contain spaces and parentheses)', () => {
    expect(parseProcStatStartTime(`10 (a) b (c)) d) ${tail}`)).toBe(70298968);
    expect(parseProcStatStartTime(`10 (my app 1 2 3) ${tail}`)).toBe(70298968);
  });

  it('rejects malformed content', () => {
    expect(() => parseProcStatStartTime('10 pause S 1 2')).toThrow(/no "\)"/);
    expect(() => parseProcStatStartTime('10 (pause) S 1 2 3')).toThrow(/not enough fields/);
    expect(() => parseProcStatStartTime(`10 (pause) ${tail.replace('70298968', '7x')}`)).toThrow(/invalid starttime/);
    expect(() => parseProcStatStartTime(`10 (pause) ${tail.replace('70298968', '99999999999999999999')}`)).toThrow(/out of range/);
    expect(() => parseProcStatStartTime('')).toThrow();
  });
});

describe('cgroup parsing (Istio/SPIRE regexes)', () => {
  const UID = '2c48913c-b29f-11e7-9350-020968147796';

  it.each([
    ['cgroupfs', `/kubepods/burstable/pod${UID}/${CID}`, UID, CID],
    [
      'cgroupfs inside docker',
      `/docker/8d461fa5765781bcf5f7eb192f101bc3103d4b932e26236f43feecfa20664f96/kubepods/besteffort/pod${UID}/${CID}`,
      UID,
      CID,
    ],
    ['systemd driver, dashes', `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod${UID}.slice/docker-${CID}.scope`, UID, CID],
    [
      'systemd driver, underscores',
      `/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod${UID.replace(/-/g, '_')}.slice/cri-containerd-${CID}.scope`,
      UID,
      CID,
    ],
    [
      'containerd systemd colons',
      `/kubepods-besteffort-pod72f7f152_440c_66ac_9084_e0fc1d8a910c.slice:cri-containerd:${CID}`,
      '72f7f152-440c-66ac-9084-e0fc1d8a910c',
      CID,
    ],
    ['cgroup namespace relative path', `/../../pod${UID}/${CID}`, UID, CID],
    [
      'CRI-O inside a pod slice',
      `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod${UID.replace(/-/g, '_')}.slice/crio-${CID}.scope`,
      UID,
      CID,
    ],
    ['CRI-O without a pod UID (KubeEdge)', `/../crio-${CID}.scope`, '', CID],
    ['pod-level cgroup', `/kubepods.slice/kubepods-pod${UID.replace(/-/g, '_')}.slice`, UID, 'slice'],
  ])('%s', (_name, path, uid, cid) => {
    expect(podIdsFromCgroupPath(path)).toEqual({ podUid: uid, containerId: cid });
  });

  it.each([['/user.slice'], ['/'], [''], ['/system.slice/containerd.service'], [`/kubepods/pod${UID.slice(0, 30)}/${CID}`]])(
    'no pod in %j',
    (path) => {
      expect(podIdsFromCgroupPath(path)).toBeUndefined();
    },
  );

  it('a path matching both patterns is ambiguous and ignored, as in Istio', () => {
    expect(podIdsFromCgroupPath(`/kubepods/pod${UID.replace(/-/g, '')}/crio-${CID}`)).toBeUndefined();
  });

  it('cgroup v1 file: one line per hierarchy, same path', () => {
    const text = [
      `12:pids:/kubepods/burstable/pod${UID}/${CID}`,
      `11:memory:/kubepods/burstable/pod${UID}/${CID}`,
      `4:cpu,cpuacct:/kubepods/burstable/pod${UID}/${CID}`,
      `1:name=systemd:/kubepods/burstable/pod${UID}/${CID}`,
      '0::/',
      '',
    ].join('\n');
    expect(parseCgroupPodUid(text)).toEqual({ podUid: UID, containerId: CID });
  });

  it('cgroup v2 file: the single 0:: line', () => {
    expect(parseCgroupPodUid(`0::/kubepods.slice/kubepods-pod${UID.replace(/-/g, '_')}.slice/cri-containerd-${CID}.scope\n`)).toEqual({
      podUid: UID,
      containerId: CID,
    });
  });

  it('no container: empty ids', () => {
    expect(parseCgroupPodUid('')).toEqual({ podUid: '', containerId: '' });
    expect(parseCgroupPodUid('0::/user.slice/user-0.slice/session-1.scope\n')).toEqual({ podUid: '', containerId: '' });
  });

  it('errors like Istio: malformed line, two containers, two pods', () => {
    expect(() => parseCgroupPodUid('0::/\ngarbage\n')).toThrow(/hierarchy-ID:controller-list:cgroup-path/);
    expect(() => parseCgroupPodUid('0::/\n\n1:x:/\n')).toThrow(/hierarchy-ID/);
    expect(() =>
      parseCgroupPodUid(`1:a:/user.slice\n2:b:/kubepods/pod${UID}/${CID}\n3:c:/kubepods/kubepods/besteffort/pod${UID}/${CID2}\n`),
    ).toThrow(`multiple container IDs found in cgroups (${CID}, ${CID2})`);
    expect(() =>
      parseCgroupPodUid(
        `1:a:/kubepods/pod11111111-b29f-11e7-9350-020968147796/${CID}\n2:b:/kubepods/pod22222222-b29f-11e7-9350-020968147796/${CID}\n`,
      ),
    ).toThrow('multiple pod UIDs found in cgroups (11111111-b29f-11e7-9350-020968147796, 22222222-b29f-11e7-9350-020968147796)');
  });

  it('stays fast on long crafted paths', () => {
    const started = performance.now();
    for (const p of [
      `/${'a'.repeat(4000)}-crio-x`,
      `/crio${'a'.repeat(4000)}-`,
      `/pod${UID}/${'a'.repeat(4000)}-`,
      `/${'a/'.repeat(2000)}crio-x`,
    ]) {
      podIdsFromCgroupPath(p);
    }
    expect(performance.now() - started).toBeLessThan(200);
  });

  it('agrees with a direct port of the Go regexes on generated paths', () => {
    // The Go patterns, verbatim in JS syntax (exponential on long runs, so the inputs are short).
    const P = '[!-\\/:-@\\[-`{-~]';
    const NP = '[^!-\\/:-@\\[-`{-~]';
    const X = '[0-9A-Fa-f]';
    const U = `${X}{8}${P}?${X}{4}${P}?${X}{4}${P}?${X}{4}${P}?${X}{12}`;
    const re1 = new RegExp(`${P}pod(${U})${P}(?:${NP}+${P})*(${NP}+)$`);
    const re2 = new RegExp(`()(pod${U}${P})?(?:${NP}*/*)*crio${P}(${NP}+)$`);
    const reference = (path: string): { podUid: string; containerId: string } | undefined => {
      const p = path.endsWith('.scope') ? path.slice(0, -6) : path;
      let out: { podUid: string; containerId: string } | undefined;
      const m1 = re1.exec(p);
      if (m1) out = { podUid: (m1[1] as string).replace(/[!"#%&'()*,\-./:;?@[\\\]_{}]/g, '-'), containerId: m1[2] as string };
      const m2 = re2.exec(p);
      if (m2 && m2[2] === undefined) {
        if (out) return undefined;
        out = { podUid: '', containerId: m2[3] as string };
      }
      return out;
    };
    const podTokens = [`pod${UID}`, `pod${UID.replace(/-/g, '_')}`, `pod${UID.replace(/-/g, '.')}`, 'crio'];
    const tokens = [...podTokens, 'a', 'x1', 'pod', 'cri-containerd', 'b29f', '020968147796', '.scope', 'slice', '..'];
    const seps = ['/', '/', '-', '_', '.', ':', '+', ''];
    let seed = 12345;
    const rnd = (n: number): number => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed % n;
    };
    let compared = 0;
    const seen = { pod: 0, crio: 0, ambiguous: 0, none: 0 };
    while (compared < 2500) {
      let s = '';
      const n = 1 + rnd(8);
      for (let i = 0; i < n; i++) s += (seps[rnd(seps.length)] as string) + (tokens[rnd(tokens.length)] as string);
      const tail = rnd(3);
      if (tail === 0) s += `${seps[rnd(3)] as string}crio${seps[rnd(seps.length)] as string}${CID.slice(0, 1 + rnd(12))}`;
      else if (tail === 1) s += `/${CID.slice(0, 1 + rnd(12))}${rnd(2) ? '.scope' : ''}`;
      if (/[^!-.:-@[-`{-~]{15,}/.test(s)) continue; // keep the Go-shaped regex from blowing up
      const want = reference(s);
      expect(podIdsFromCgroupPath(s), s).toEqual(want);
      compared++;
      const p = s.endsWith('.scope') ? s.slice(0, -6) : s;
      if (want?.podUid) seen.pod++;
      else if (want) seen.crio++;
      else if (re1.test(p) || re2.test(p)) seen.ambiguous++;
      else seen.none++;
    }
    // Each outcome was exercised (ambiguous paths need a 32-digit run: tested above).
    expect(seen.pod).toBeGreaterThan(100);
    expect(seen.crio).toBeGreaterThan(100);
    expect(seen.none).toBeGreaterThan(100);
  });
});

describe('canonicalIp', () => {
  it('one spelling per address', () => {
    expect(canonicalIp('10.1.2.3')).toBe('10.1.2.3');
    expect(canonicalIp('10.1.2.3/24')).toBe('10.1.2.3');
    expect(canonicalIp('FD00::A')).toBe(canonicalIp('fd00:0:0:0:0:0:0:a'));
    expect(canonicalIp('fe80::1%eth0')).toBe(canonicalIp('fe80::1'));
    expect(canonicalIp('::ffff:10.0.0.1')).toBe(canonicalIp('::ffff:a00:1'));
    expect(canonicalIp('::')).toBe('0000:0000:0000:0000:0000:0000:0000:0000');
    expect(canonicalIp('not-an-ip')).toBeUndefined();
    expect(canonicalIp('')).toBeUndefined();
  });
});

// ---------------------------------------------------------------------------------------------

const UID_A = '11111111-aaaa-4aaa-8aaa-aaaaaaaaaaaa';
const UID_B = '22222222-bbbb-4bbb-8bbb-bbbbbbbbbbbb';
const UID_C = '33333333-cccc-4ccc-8ccc-cccccccccccc';
const UID_D = '44444444-dddd-4ddd-8ddd-dddddddddddd';

type CgroupStyle = 'systemd-v2' | 'cgroupfs-v1' | 'crio-v2' | 'relative-v2';

function cgroupText(uid: string, style: CgroupStyle, cid = CID): string {
  const us = uid.replace(/-/g, '_');
  switch (style) {
    case 'systemd-v2':
      return `0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod${us}.slice/cri-containerd-${cid}.scope\n`;
    case 'cgroupfs-v1':
      return [
        `12:pids:/kubepods/burstable/pod${uid}/${cid}`,
        `7:memory:/kubepods/burstable/pod${uid}/${cid}`,
        `1:name=systemd:/kubepods/burstable/pod${uid}/${cid}`,
        '0::/',
        '',
      ].join('\n');
    case 'crio-v2':
      return `0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod${us}.slice/crio-${cid}.scope\n`;
    case 'relative-v2':
      return `0::/../../kubepods-besteffort-pod${us}.slice/cri-containerd-${cid}.scope\n`;
  }
}

function statText(pid: number, start: number, comm = 'pause'): string {
  return `${pid} (${comm}) S 1 ${pid} ${pid} 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 ${start} 1024000 100 18446744073709551615\n`;
}

/** A fake /proc: namespaces are files under <root>/netns, each pid's ns/net a hard link to one. */
class FakeProc {
  readonly root = mkdtempSync(join(tmpdir(), 'proc-netns-finder-'));
  readonly proc = join(this.root, 'proc');
  readonly addon = new FakeNetAddon();
  readonly #addresses = new Map<string, string[]>();

  constructor() {
    mkdirSync(this.proc);
    mkdirSync(join(this.root, 'netns'));
    this.netns('host', ['192.168.0.10']);
  }

  get hostNetns(): { ino: number; dev: number } {
    const st = statSync(join(this.root, 'netns', 'host'));
    return { ino: st.ino, dev: st.dev };
  }

  netns(name: string, addresses: string[]): void {
    writeFileSync(join(this.root, 'netns', name), '');
    this.#addresses.set(name, addresses);
  }

  /** A process: its cgroup, its start time, and the namespace it sits in. */
  pid(pid: number, opts: { netns: string; cgroup?: string; start?: number; comm?: string; openable?: boolean }): string {
    const dir = join(this.proc, String(pid));
    mkdirSync(join(dir, 'ns'), { recursive: true });
    const nsPath = join(dir, 'ns', 'net');
    linkSync(join(this.root, 'netns', opts.netns), nsPath);
    if (opts.cgroup !== undefined) writeFileSync(join(dir, 'cgroup'), opts.cgroup);
    writeFileSync(join(dir, 'stat'), statText(pid, opts.start ?? pid * 10, opts.comm));
    if (opts.openable !== false) {
      const ns = this.addon.addNetns(nsPath);
      ns.addresses = (this.#addresses.get(opts.netns) ?? []).map((address) => ({
        family: address.includes(':') ? 6 : 4,
        address,
        prefixLen: address.includes(':') ? 128 : 32,
        dev: 'eth0',
      }));
    }
    return nsPath;
  }

  finder(): ProcNetnsFinder {
    return new ProcNetnsFinder({ addon: this.addon, procDir: this.proc, hostNetns: this.hostNetns });
  }

  /** Paths the finder ran listAddresses in (each one was opened). */
  inspected(): string[] {
    return this.addon.runs.map((r) => r.target);
  }

  cleanup(): void {
    rmSync(this.root, { recursive: true, force: true });
  }
}

function paths(found: Map<string, NetnsHandle>): Record<string, string> {
  return Object.fromEntries([...found].map(([uid, h]) => [uid, h.path]));
}

function closeAll(found: Map<string, NetnsHandle>): void {
  for (const h of found.values()) h.close();
}

describe('ProcNetnsFinder', () => {
  let fp: FakeProc;
  beforeEach(() => {
    fp = new FakeProc();
  });
  afterEach(() => fp.cleanup());

  it('finds pods in every cgroup layout: systemd and cgroupfs drivers, v1 and v2, CRI-O, cgroupns-relative', async () => {
    fp.netns('a', ['10.0.0.1']);
    fp.netns('b', ['10.0.0.2']);
    fp.netns('c', ['10.0.0.3']);
    fp.netns('d', ['fd00::4', '10.0.0.4']);
    const a = fp.pid(101, { netns: 'a', cgroup: cgroupText(UID_A, 'systemd-v2') });
    const b = fp.pid(102, { netns: 'b', cgroup: cgroupText(UID_B, 'cgroupfs-v1') });
    const c = fp.pid(103, { netns: 'c', cgroup: cgroupText(UID_C, 'crio-v2') });
    const d = fp.pid(104, { netns: 'd', cgroup: cgroupText(UID_D, 'relative-v2') });
    const found = await fp.finder().find([
      { uid: UID_A, ips: ['10.0.0.1'] },
      { uid: UID_B, ips: ['10.0.0.2'] },
      { uid: UID_C, ips: ['10.0.0.3'] },
      { uid: UID_D, ips: ['fd00:0::4'] },
    ]);
    expect(paths(found)).toEqual({ [UID_A]: a, [UID_B]: b, [UID_C]: c, [UID_D]: d });
    expect(fp.addon.openFds).toBe(4);
    for (const h of found.values()) expect(h.closed).toBe(false);
    closeAll(found);
    expect(fp.addon.openFds).toBe(0);
  });

  it('skips the host netns even when a process there carries a wanted pod UID (istio#55139)', async () => {
    fp.pid(50, { netns: 'host', cgroup: cgroupText(UID_A, 'systemd-v2') });
    const found = await fp.finder().find([{ uid: UID_A, ips: ['192.168.0.10'] }]);
    expect(found.size).toBe(0);
    expect(fp.inspected()).toEqual([]);
    expect(fp.addon.openFds).toBe(0);
  });

  it('a missing or unreadable pid 1 and vanished pids are not fatal', async () => {
    fp.netns('a', ['10.0.0.1']);
    // pid 1: ns/net cannot be resolved (a dangling link stands in for EACCES/ENOENT).
    mkdirSync(join(fp.proc, '1', 'ns'), { recursive: true });
    symlinkSync(join(fp.root, 'nowhere'), join(fp.proc, '1', 'ns', 'net'));
    writeFileSync(join(fp.proc, '1', 'cgroup'), '0::/init.scope\n');
    // Vanished between readdir and the reads: an empty dir, a dir without cgroup, one without stat.
    mkdirSync(join(fp.proc, '7'));
    fp.pid(8, { netns: 'a' }); // no cgroup file
    fp.pid(9, { netns: 'a', cgroup: cgroupText(UID_A, 'systemd-v2') });
    rmSync(join(fp.proc, '9', 'stat'));
    const a = fp.pid(10, { netns: 'a', cgroup: cgroupText(UID_A, 'systemd-v2') });
    // Not processes: non-numeric names, numeric plain files.
    mkdirSync(join(fp.proc, 'self'));
    mkdirSync(join(fp.proc, 'sys'));
    writeFileSync(join(fp.proc, '12345'), '');
    const found = await fp.finder().find([{ uid: UID_A, ips: ['10.0.0.1'] }]);
    expect(paths(found)).toEqual({ [UID_A]: a });
    closeAll(found);
    expect(fp.addon.openFds).toBe(0);
  });

  it('a process that exits between the scan and the open: another process of the same netns is used', async () => {
    fp.netns('a', ['10.0.0.1']);
    fp.pid(20, { netns: 'a', cgroup: cgroupText(UID_A, 'systemd-v2'), start: 100, openable: false }); // oldest, gone
    const later = fp.pid(21, { netns: 'a', cgroup: cgroupText(UID_A, 'systemd-v2'), start: 200 });
    const found = await fp.finder().find([{ uid: UID_A, ips: ['10.0.0.1'] }]);
    expect(paths(found)).toEqual({ [UID_A]: later });
    closeAll(found);
  });

  it('several netns for one pod: the oldest process wins, not the lowest pid', async () => {
    fp.netns('old', ['10.0.0.1']);
    fp.netns('new', ['10.0.0.1']);
    fp.pid(200, { netns: 'new', cgroup: cgroupText(UID_A, 'systemd-v2'), start: 9000 });
    const old = fp.pid(300, { netns: 'old', cgroup: cgroupText(UID_A, 'systemd-v2', CID2), start: 500 });
    fp.pid(301, { netns: 'old', cgroup: cgroupText(UID_A, 'systemd-v2', CID2), start: 9500 });
    const found = await fp.finder().find([{ uid: UID_A, ips: ['10.0.0.1'] }]);
    expect(paths(found)).toEqual({ [UID_A]: old });
    expect(fp.inspected()).toEqual([old]); // the oldest was proven first; nothing else opened
    expect(fp.addon.openFds).toBe(1);
    closeAll(found);
  });

  it('a process sitting in another pod netns (without the pod IP) is rejected and the search goes on', async () => {
    fp.netns('a', ['10.0.0.1']);
    fp.netns('b', ['10.0.0.2']);
    // netns a holds pod A's sandbox, and an OLDER-looking process of pod B that joined it.
    const aPath = fp.pid(40, { netns: 'a', cgroup: cgroupText(UID_A, 'systemd-v2'), start: 100 });
    const foreign = fp.pid(41, { netns: 'a', cgroup: cgroupText(UID_B, 'systemd-v2'), start: 50 });
    const bPath = fp.pid(60, { netns: 'b', cgroup: cgroupText(UID_B, 'systemd-v2'), start: 300 });
    const found = await fp.finder().find([
      { uid: UID_A, ips: ['10.0.0.1'] },
      { uid: UID_B, ips: ['10.0.0.2'] },
    ]);
    expect(paths(found)).toEqual({ [UID_A]: aPath, [UID_B]: bPath });
    expect(fp.inspected()).toContain(foreign);
    expect(fp.addon.openFds).toBe(2); // the rejected handle was closed
    closeAll(found);
    expect(fp.addon.openFds).toBe(0);
  });

  it('a pod whose only netns lacks its IP is not found, and nothing stays open', async () => {
    fp.netns('x', ['10.9.9.9']);
    const x = fp.pid(70, { netns: 'x', cgroup: cgroupText(UID_A, 'cgroupfs-v1') });
    const found = await fp.finder().find([{ uid: UID_A, ips: ['10.0.0.1'] }]);
    expect(found.size).toBe(0);
    expect(fp.inspected()).toEqual([x]);
    expect(fp.addon.openFds).toBe(0);
  });

  it('pods without IPs are deferred: not opened, not returned', async () => {
    fp.netns('a', ['10.0.0.1']);
    fp.pid(80, { netns: 'a', cgroup: cgroupText(UID_A, 'systemd-v2') });
    const found = await fp.finder().find([{ uid: UID_A, ips: [] }]);
    expect(found.size).toBe(0);
    expect(fp.inspected()).toEqual([]);
    expect(fp.addon.openFds).toBe(0);
  });

  it('unknown pod UIDs and processes outside pods are ignored', async () => {
    fp.netns('a', ['10.0.0.1']);
    fp.netns('other', ['10.0.0.9']);
    fp.netns('plain', []);
    fp.pid(90, { netns: 'other', cgroup: cgroupText(UID_C, 'systemd-v2') });
    fp.pid(91, { netns: 'plain', cgroup: '0::/system.slice/containerd.service\n' });
    fp.pid(92, { netns: 'plain', cgroup: `1:a:/kubepods/pod${UID_A}/${CID}\n2:b:/kubepods/pod${UID_B}/${CID}\n` }); // two pods: unusable
    const a = fp.pid(93, { netns: 'a', cgroup: cgroupText(UID_A, 'systemd-v2') });
    const found = await fp.finder().find([{ uid: UID_A, ips: ['10.0.0.1'] }]);
    expect(paths(found)).toEqual({ [UID_A]: a });
    expect(fp.inspected()).toEqual([a]);
    closeAll(found);
  });

  it('a netns whose inspection fails is closed and skipped', async () => {
    fp.netns('a', ['10.0.0.1']);
    fp.netns('a2', ['10.0.0.1']);
    const broken = fp.pid(100, { netns: 'a', cgroup: cgroupText(UID_A, 'systemd-v2'), start: 1 });
    const good = fp.pid(101, { netns: 'a2', cgroup: cgroupText(UID_A, 'systemd-v2', CID2), start: 2 });
    fp.addon.failOn = (_step, target) => (target === broken ? new Error('netns vanished') : undefined);
    const found = await fp.finder().find([{ uid: UID_A, ips: ['10.0.0.1'] }]);
    expect(paths(found)).toEqual({ [UID_A]: good });
    expect(fp.addon.openFds).toBe(1);
    closeAll(found);
  });

  it('every handle not returned is closed (many pods, many rejects)', async () => {
    const pods: Array<{ uid: string; ips: string[] }> = [];
    for (let i = 0; i < 30; i++) {
      const uid = `${String(i).padStart(8, '0')}-0000-4000-8000-000000000000`;
      const ip = `10.1.0.${i + 1}`;
      fp.netns(`p${i}`, i % 3 === 0 ? ['10.2.0.1'] : [ip]); // every third netns lacks its IP
      fp.pid(1000 + i, { netns: `p${i}`, cgroup: cgroupText(uid, i % 2 ? 'systemd-v2' : 'cgroupfs-v1') });
      fp.pid(2000 + i, { netns: `p${i}`, cgroup: cgroupText(uid, 'systemd-v2') }); // same netns, second process
      pods.push({ uid, ips: i % 5 === 0 ? [] : [ip] });
    }
    const found = await fp.finder().find(pods);
    const expected = pods.filter((_p, i) => i % 3 !== 0 && i % 5 !== 0).map((p) => p.uid);
    expect([...found.keys()].sort()).toEqual(expected.sort());
    expect(fp.addon.openFds).toBe(found.size);
    closeAll(found);
    expect(fp.addon.openFds).toBe(0);
  });

  it('a scan of the real /proc (unreadable entries, processes exiting meanwhile) completes without opening anything', async () => {
    const finder = new ProcNetnsFinder({ addon: fp.addon, procDir: '/proc', hostNetns: fp.hostNetns });
    const found = await finder.find([{ uid: '99999999-9999-4999-8999-999999999999', ips: ['10.0.0.1'] }]);
    expect(found.size).toBe(0);
    expect(fp.addon.openFds).toBe(0);
  });

  it('nothing to look for: no scan at all; an unlistable proc dir is an error', async () => {
    const missing = new ProcNetnsFinder({ addon: fp.addon, procDir: join(fp.root, 'absent'), hostNetns: fp.hostNetns });
    await expect(missing.find([])).resolves.toEqual(new Map());
    await expect(missing.find([{ uid: UID_A, ips: ['10.0.0.1'] }])).rejects.toThrow(/cannot list .*absent/);
  });
});
