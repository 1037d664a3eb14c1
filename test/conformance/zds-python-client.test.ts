// Opt-in conformance run: the ZDS scenarios of test/helpers/zds-ztunnel-scenarios.ts against an
// independent ztunnel stand-in written in Python (a zds_client.py that prints one JSON line per
// event), given by its path in ZDS_CONFORMANCE_CLIENT. Run by `npm run test:conformance`
// (vitest.conformance.config.ts); the same scenarios run in every `npm test` against the project's
// own client.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { conformanceClient } from '../conformance-client.js';
import { zdsZtunnelScenarios, type ReceivedRequest, type StartClient } from '../helpers/zds-ztunnel-scenarios.js';

/** The client's JSON lines (`event` for connection events, `type` for requests). */
interface Line {
  event?: string;
  action?: string;
  type?: ReceivedRequest['kind'];
  uid?: string;
  name?: string | null;
  namespace?: string | null;
  service_account?: string | null;
  fd?: boolean;
  netns?: boolean | null;
  inode?: number | null;
  ack?: string | null;
}

const CLIENT = conformanceClient();

class PythonZtunnel {
  readonly lines: Line[] = [];
  readonly exited: Promise<number | null>;
  #child: ChildProcessWithoutNullStreams;
  #buffer = '';

  constructor(socketPath: string, extraArgs: string[]) {
    this.#child = spawn('python3', [CLIENT, '--socket', socketPath, '--timeout', '10', ...extraArgs]);
    this.#child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      this.#buffer += chunk;
      const parts = this.#buffer.split('\n');
      this.#buffer = parts.pop() ?? '';
      for (const p of parts) if (p.trim()) this.lines.push(JSON.parse(p) as Line);
    });
    this.exited = new Promise((resolve) => this.#child.on('exit', (code) => resolve(code)));
  }

  received(): ReceivedRequest[] {
    return this.lines.filter((l) => l.type !== undefined).map(toReceived);
  }

  /** Whether the last thing the client did for this pod started (or replaced) its proxy. */
  isRunning(uid: string): boolean {
    const last = this.lines.filter((l) => l.uid === uid && l.action !== undefined).at(-1)?.action;
    return last === 'started' || last === 'replaced' || last === 'unchanged';
  }

  async waitFor(predicate: (received: ReceivedRequest[]) => boolean, ms = 5000): Promise<void> {
    const deadline = Date.now() + ms;
    while (!predicate(this.received())) {
      if (Date.now() > deadline) throw new Error(`${CLIENT}: condition not met; output: ${JSON.stringify(this.lines)}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  kill(): void {
    this.#child.kill('SIGKILL');
  }
}

function toReceived(l: Line): ReceivedRequest {
  return {
    kind: l.type!,
    uid: l.uid ?? '',
    ...(l.type === 'add' ? { workload: [l.name ?? '', l.namespace ?? '', l.service_account ?? ''] as [string, string, string] } : {}),
    fd: !l.fd ? 'none' : l.netns ? 'netns' : 'other',
    ...(typeof l.inode === 'number' ? { inode: l.inode } : {}),
    ...(typeof l.ack === 'string' ? { ack: l.ack } : {}),
  };
}

const startPython: StartClient = async (socketPath, behaviour = {}) => {
  const args = [
    ...(behaviour.ackError ? ['--ack-error', behaviour.ackError.text, '--ack-error-types', behaviour.ackError.kinds.join(',')] : []),
    ...(behaviour.noAck ? ['--no-ack'] : []),
  ];
  const client = new PythonZtunnel(socketPath, args);
  return {
    received: () => client.received(),
    waitFor: (predicate, ms) => client.waitFor(predicate, ms),
    isRunning: (uid) => client.isRunning(uid),
    endedOnEof: async () => (await client.exited) === 0 && client.lines.at(-1)?.event === 'eof',
    kill: () => client.kill(),
  };
};

zdsZtunnelScenarios(`ZDS server against ${CLIENT}`, startPython);
