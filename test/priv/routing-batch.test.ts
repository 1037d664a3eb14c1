// The in-pod routing as one rtnetlink sendmsg: the same effects as the single requests (add is
// idempotent, deleting what is gone succeeds, the IPv6 route only when lo has IPv6), and a
// refused change fails the step naming it.
import { afterAll, describe, expect, it } from 'vitest';
import { NativeNetAddon } from '../../src/addon/net-addon.js';
import { routingApplySteps, routingDeleteSteps } from '../../src/rules/routing.js';
import { createNetns, deleteAllNetns, deleteNetns, execIn, privilegedSkipReason, requirePrivilegedInCi } from '../helpers/netns.js';

requirePrivilegedInCi();
const skip = privilegedSkipReason();

const rules = (ns: string, family: 4 | 6): string[] =>
  execIn(ns, ['ip', `-${family}`, 'rule'])
    .split('\n')
    .filter((l) => l.includes('fwmark 0x111/0xfff lookup 100'));
const routes = (ns: string, family: 4 | 6): string => execIn(ns, ['ip', `-${family}`, 'route', 'show', 'table', '100']).trim();

describe.skipIf(skip)(`routing in one rtnetlink batch${skip ? ` — skipped: ${skip}` : ''}`, () => {
  const addon = skip ? (undefined as never) : new NativeNetAddon();
  afterAll(() => deleteAllNetns());

  it('adds both families in one step; again changes nothing; delete twice leaves nothing', async () => {
    const pod = createNetns('rt');
    const ns = addon.openNetns(pod.path);
    try {
      const [first] = await addon.run(ns, routingApplySteps(true));
      expect(first!.changes).toEqual([
        { changed: true, skipped: false },
        { changed: true, skipped: false },
        { changed: true, skipped: false },
        { changed: true, skipped: false },
      ]);
      const [again] = await addon.run(ns, routingApplySteps(true));
      expect(again!.changes.map((c) => c.changed)).toEqual([true, false, true, false]); // replace, then EEXIST
      expect(rules(pod.name, 4)).toHaveLength(1);
      expect(rules(pod.name, 6)).toHaveLength(1);
      expect(routes(pod.name, 4)).toBe('local default dev lo scope host');
      expect(routes(pod.name, 6)).toContain('local default dev lo');
      const [removed] = await addon.run(ns, routingDeleteSteps(true));
      expect(removed!.changes.every((c) => c.changed)).toBe(true);
      const [gone] = await addon.run(ns, routingDeleteSteps(true));
      expect(gone!.changes.every((c) => !c.changed)).toBe(true);
      expect(rules(pod.name, 4)).toEqual([]);
      expect(routes(pod.name, 4)).toBe('');
    } finally {
      ns.close();
      deleteNetns(pod);
    }
  });

  it('skips the IPv6 route when lo has no IPv6 address, but still adds the IPv6 rule', async () => {
    const pod = createNetns('rt6');
    execIn(pod.name, ['sysctl', '-q', '-w', 'net.ipv6.conf.lo.disable_ipv6=1']);
    const ns = addon.openNetns(pod.path);
    try {
      const [r] = await addon.run(ns, routingApplySteps(true));
      expect(r!.changes.map((c) => c.skipped)).toEqual([false, false, true, false]);
      expect(rules(pod.name, 6)).toHaveLength(1);
      expect(routes(pod.name, 4)).toBe('local default dev lo scope host');
    } finally {
      ns.close();
      deleteNetns(pod);
    }
  });

  it('a change the kernel refuses fails the step with its errno and names it', async () => {
    const pod = createNetns('rtbad');
    const ns = addon.openNetns(pod.path);
    try {
      // lo without IPv6 cannot take an IPv6 route: the kernel refuses the second change.
      execIn(pod.name, ['sysctl', '-q', '-w', 'net.ipv6.conf.lo.disable_ipv6=1']);
      const refused = addon.run(ns, [
        {
          op: 'routing',
          changes: [
            { kind: 'addFwmarkRule', family: 4, mark: 0x111, mask: 0xfff, priority: 32764, table: 100 },
            { kind: 'replaceLocalRoute', family: 6, table: 100, dev: 'lo' },
          ],
        },
      ]);
      await expect(refused).rejects.toMatchObject({ syscall: 'RTM_NEWROUTE', path: '::/0' });
      await expect(
        addon.run(ns, [{ op: 'routing', changes: [{ kind: 'replaceLocalRoute', family: 4, table: 100, dev: 'nosuchdev0' }] }]),
      ).rejects.toMatchObject({ code: 'ENODEV' });
    } finally {
      ns.close();
      deleteNetns(pod);
    }
  });
});
