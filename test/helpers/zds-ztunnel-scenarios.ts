// The agent's ZDS server (registry + server, real SOCK_SEQPACKET sockets) against a ztunnel-like
// client, written once and run against two clients: the project's own (test/helpers/fake-ztunnel.ts,
// in every `npm test`) and, opt-in, an independent one given by its path
// (test/conformance/, `ZDS_CONFORMANCE_CLIENT=... npm run test:conformance`).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PodRegistry } from '../../src/zds/registry.js';
import { ZdsServer } from '../../src/zds/server.js';
import { openOwnNamespace } from './netns-files.js';

/** One request as the client received it, in the client's own words. */
export interface ReceivedRequest {
  kind: 'add' | 'keep' | 'del' | 'snapshot_sent';
  uid: string;
  /** name, namespace, service account of an add's workload_info. */
  workload?: [string, string, string];
  /** Whether an fd came with it, and whether that fd is a network namespace. */
  fd: 'none' | 'netns' | 'other';
  inode?: number;
  /** The ack the client sent ('' = success), undefined when it did not answer. */
  ack?: string;
}

export interface ClientBehaviour {
  /** Answer requests of these kinds with this error text. */
  ackError?: { text: string; kinds: ReceivedRequest['kind'][] };
  /** Never answer. */
  noAck?: boolean;
}

export interface ZtunnelUnderTest {
  received(): ReceivedRequest[];
  /** Resolves when `predicate` holds for what was received so far, rejects after `ms`. */
  waitFor(predicate: (received: ReceivedRequest[]) => boolean, ms?: number): Promise<void>;
  /** Whether the client is running a proxy for this pod now. */
  isRunning(uid: string): boolean;
  /** Resolves once the client has ended, true when it ended cleanly on the server's EOF. */
  endedOnEof(): Promise<boolean>;
  kill(): void;
}

export type StartClient = (socketPath: string, behaviour?: ClientBehaviour) => Promise<ZtunnelUnderTest>;

const snapshotSent = (received: ReceivedRequest[]): boolean => received.some((r) => r.kind === 'snapshot_sent');

export function zdsZtunnelScenarios(title: string, startClient: StartClient): void {
  describe(title, () => {
    let dir: string;
    let socketPath: string;
    let server: ZdsServer;
    let registry: PodRegistry;
    let client: ZtunnelUnderTest | undefined;

    const startServer = (ackMs?: number): void => {
      server = new ZdsServer({ socketPath, snapshot: () => registry.snapshot(), ...(ackMs ? { timeouts: { ackMs } } : {}) });
      registry = new PodRegistry(server);
      server.start();
    };

    beforeEach(() => {
      dir = mkdtempSync(join(tmpdir(), 'zds-scenario-'));
      socketPath = join(dir, 'ztunnel.sock');
      client = undefined;
      startServer();
    });

    afterEach(() => {
      client?.kill();
      server.close();
      registry.close();
      rmSync(dir, { recursive: true, force: true });
    });

    it('done-when: one add per pod with its netns and identity, then snapshot_sent; live add and del; ends cleanly on EOF', async () => {
      const pods = [
        { uid: '11111111-aaaa', name: 'web-0', namespace: 'shop', serviceAccount: 'web' },
        { uid: '22222222-bbbb', name: 'db-0', namespace: 'shop', serviceAccount: 'db' },
      ];
      for (const p of pods) await registry.add(p, openOwnNamespace()).catch(() => {}); // no ztunnel yet
      await registry.add({ uid: '33333333-cccc', name: 'lost', namespace: 'shop', serviceAccount: 'x' }); // no netns: keep
      client = await startClient(socketPath);
      await client.waitFor(snapshotSent);
      const view = (r: ReceivedRequest): unknown[] => [r.kind, r.uid, r.workload, r.fd, r.ack];
      expect(client.received().map(view)).toEqual([
        ['add', '11111111-aaaa', ['web-0', 'shop', 'web'], 'netns', ''],
        ['add', '22222222-bbbb', ['db-0', 'shop', 'db'], 'netns', ''],
        ['keep', '33333333-cccc', undefined, 'none', ''],
        ['snapshot_sent', '', undefined, 'none', ''],
      ]);
      expect(client.received()[0]!.inode).toBe(registry.netnsOf('11111111-aaaa')!.ino);
      expect(client.isRunning('11111111-aaaa') && client.isRunning('22222222-bbbb')).toBe(true);

      await registry.add({ uid: '44444444-dddd', name: 'live', namespace: 'shop', serviceAccount: 'live' }, openOwnNamespace());
      await registry.delete('22222222-bbbb');
      await client.waitFor((received) => received.some((r) => r.kind === 'del'));
      expect(
        client
          .received()
          .slice(4)
          .map((r) => [r.kind, r.uid, r.ack]),
      ).toEqual([
        ['add', '44444444-dddd', ''],
        ['del', '22222222-bbbb', ''],
      ]);
      expect([client.isRunning('44444444-dddd'), client.isRunning('22222222-bbbb')]).toEqual([true, false]);

      server.close(); // EOF for the client
      expect(await client.endedOnEof()).toBe(true);
    });

    it("turns the client's error ack into a retryable error carrying its text", async () => {
      client = await startClient(socketPath, { ackError: { text: 'failure to start proxy : Bind(AddrInUse)', kinds: ['add'] } });
      await client.waitFor(snapshotSent);
      await expect(registry.add({ uid: 'u1', name: 'n', namespace: 'ns', serviceAccount: 'sa' }, openOwnNamespace())).rejects.toMatchObject(
        {
          code: 'ZDS_ACK_ERROR',
          retryable: true,
          message: 'ztunnel rejected pod u1: failure to start proxy : Bind(AddrInUse)',
        },
      );
    });

    it('drops a client that never acks (the handshake fails) and then has no connection for an add', async () => {
      server.close();
      registry.close();
      startServer(300);
      client = await startClient(socketPath, { noAck: true });
      await client.waitFor(snapshotSent);
      // snapshot_sent was never acked either: the handshake failed and the connection is gone
      await new Promise((r) => setTimeout(r, 400));
      expect(server.connections()).toHaveLength(0);
      await expect(registry.add({ uid: 'u', name: 'n', namespace: 'ns', serviceAccount: 'sa' }, openOwnNamespace())).rejects.toMatchObject({
        code: 'ZDS_NO_CONNECTION',
      });
    });
  });
}
