// The ZDS scenarios of test/helpers/zds-ztunnel-scenarios.ts against the project's own ztunnel-like
// client. The same scenarios run against an independent client in the opt-in conformance run
// (test/conformance/zds-python-client.test.ts).
import { requestKind, type RequestKind } from '../../src/zds/codec.js';
import { FakeZtunnel, type ReceivedMessage } from '../helpers/fake-ztunnel.js';
import { zdsZtunnelScenarios, type ReceivedRequest, type StartClient } from '../helpers/zds-ztunnel-scenarios.js';

const KINDS = { add: 'add', keep: 'keep', del: 'del', snapshotSent: 'snapshot_sent' } as const satisfies Record<
  RequestKind,
  ReceivedRequest['kind']
>;

function received(m: ReceivedMessage): ReceivedRequest {
  return {
    kind: KINDS[m.kind],
    uid: m.uid ?? '',
    ...(m.info ? { workload: [m.info.name, m.info.namespace, m.info.serviceAccount] as [string, string, string] } : {}),
    fd: m.fds === 0 ? 'none' : m.netns ? 'netns' : 'other',
    ...(m.inode !== undefined ? { inode: m.inode } : {}),
    ack: m.ack,
  };
}

const startFake: StartClient = async (socketPath, behaviour = {}) => {
  const { ackError, noAck } = behaviour;
  const client = await FakeZtunnel.connect(socketPath, {
    ...(ackError ? { ackError: (req) => (ackError.kinds.includes(KINDS[requestKind(req)]) ? ackError.text : undefined) } : {}),
    ...(noAck ? { silent: () => true } : {}),
  });
  return {
    received: () => client.messages.map(received).map((r) => (noAck ? { ...r, ack: undefined } : r)),
    waitFor: (predicate, ms) => client.waitFor(() => predicate(client.messages.map(received)), ms),
    isRunning: (uid) => client.running.has(uid),
    endedOnEof: async () => {
      await client.waitFor(() => client.closed, 5000);
      return client.protocolError === undefined;
    },
    kill: () => client.close(),
  };
};

zdsZtunnelScenarios("ZDS server against the project's ztunnel-like client", startFake);
