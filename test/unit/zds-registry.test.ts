import { describe, expect, it } from 'vitest';
import { parseZdsArgs } from '../../src/cli/zds-command.js';
import { UsageError } from '../../src/util/usage-error.js';
import type { NetnsHandle } from '../../src/addon/net-addon.js';
import { ZdsError } from '../../src/zds/errors.js';
import { PodRegistry } from '../../src/zds/registry.js';
import type { ZdsSink } from '../../src/zds/server.js';

function handle(ino: number): NetnsHandle & { closes: number } {
  let closes = 0;
  return {
    fd: 100 + ino,
    ino,
    dev: 4,
    path: `/ns/${ino}`,
    get closed() {
      return closes > 0;
    },
    get closes() {
      return closes;
    },
    close() {
      closes++;
    },
  } as NetnsHandle & { closes: number };
}

class RecordingSink implements ZdsSink {
  readonly calls: string[] = [];
  failAdds: ZdsError | undefined;
  async podAdded(uid: string, _info: unknown, netns: { fd: number }): Promise<void> {
    this.calls.push(`add ${uid} fd=${netns.fd}`);
    if (this.failAdds) throw this.failAdds;
  }
  async podDeleted(uid: string): Promise<void> {
    this.calls.push(`del ${uid}`);
  }
}

const pod = { uid: 'u1', name: 'p', namespace: 'ns', serviceAccount: 'sa' };

describe('PodRegistry', () => {
  it('registers first, then waits for ztunnel; a retryable failure keeps the pod for the next snapshot', async () => {
    const sink = new RecordingSink();
    sink.failAdds = new ZdsError('ZDS_NO_CONNECTION', 'no ztunnel connection', true);
    const registry = new PodRegistry(sink);
    const h = handle(1);
    await expect(registry.add(pod, h)).rejects.toThrow('no ztunnel connection');
    expect(registry.snapshot()).toEqual([{ uid: 'u1', workloadInfo: { name: 'p', namespace: 'ns', serviceAccount: 'sa' }, netns: h }]);
    expect(h.closed).toBe(false);
  });

  it('closes every handle exactly once: duplicates, replacements, deletes and close()', async () => {
    const sink = new RecordingSink();
    const registry = new PodRegistry(sink);
    const a = handle(1);
    const aAgain = handle(1);
    const b = handle(2);
    await registry.add(pod, a);
    await registry.add(pod, aAgain); // same namespace: the new fd is closed, the old one stays
    await registry.add(pod, b); // new sandbox: the old fd is closed
    await registry.delete('u1');
    await registry.delete('u1'); // unknown now: still fine, ztunnel is told again (idempotent)
    const c = handle(3);
    await registry.add({ ...pod, uid: 'u2' }, c);
    registry.close();
    expect([a.closes, aAgain.closes, b.closes, c.closes]).toEqual([1, 1, 1, 1]);
    expect(sink.calls).toEqual(['add u1 fd=101', 'add u1 fd=101', 'add u1 fd=102', 'del u1', 'del u1', 'add u2 fd=103']);
  });

  it('keeps a pod without a netns (sent as keep) and sends nothing for it', async () => {
    const sink = new RecordingSink();
    const registry = new PodRegistry(sink);
    await registry.add(pod);
    expect(sink.calls).toEqual([]);
    expect(registry.snapshot()).toEqual([{ uid: 'u1', workloadInfo: { name: 'p', namespace: 'ns', serviceAccount: 'sa' } }]);
  });

  it('rejects a pod without a uid and closes the handle it was given', async () => {
    const registry = new PodRegistry(new RecordingSink());
    const h = handle(9);
    await expect(registry.add({ ...pod, uid: '' }, h)).rejects.toThrow('pod uid is required');
    expect(h.closes).toBe(1);
  });
});

describe('zds serve arguments', () => {
  it('parses pods with and without a netns', () => {
    expect(parseZdsArgs(['serve', '--socket', '/s', '--pod', 'shop/web/sa/u1=/run/netns/a', '--pod', 'shop/db/sa/u2'])).toEqual({
      socket: '/s',
      mode: 0o600,
      pods: [
        { pod: { uid: 'u1', name: 'web', namespace: 'shop', serviceAccount: 'sa' }, netns: '/run/netns/a' },
        { pod: { uid: 'u2', name: 'db', namespace: 'shop', serviceAccount: 'sa' } },
      ],
    });
  });

  it.each([[['serve', '--pod', 'shop/web/u1']], [['serve', '--mode', '999']], [['serve', '--bogus']], [['listen']]])(
    'rejects %j with a usage error',
    (args) => {
      expect(() => parseZdsArgs(args)).toThrow(UsageError);
    },
  );
});
