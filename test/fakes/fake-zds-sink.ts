// A fake of what the agent hands pods to (ZdsSink: the ZDS server's side the registry talks to),
// for fast unit tests of the state machines above it: it records every add and delete in order
// and lets a test fail or hold an add the way ztunnel does (no connection, an error ack, a slow
// ack), with the server's own error types.
import type { FdSource } from '../../src/zds/connection.js';
import type { WorkloadInfo } from '../../src/zds/codec.js';
import { ZdsError } from '../../src/zds/errors.js';
import type { ZdsSink } from '../../src/zds/server.js';

export interface SinkCall {
  op: 'add' | 'del';
  uid: string;
  info?: WorkloadInfo;
  /** Whether the fd was still open when the add was sent. */
  fdOpen?: boolean;
}

export class FakeZdsSink implements ZdsSink {
  readonly calls: SinkCall[] = [];
  /** Return an error to fail this add (undefined = ztunnel acks). */
  failAdd: (uid: string) => Error | undefined = () => undefined;
  /** Set to hold adds until release() (a slow ztunnel). */
  hold = false;
  readonly #held: Array<() => void> = [];

  static noConnection(): ZdsError {
    return new ZdsError('ZDS_NO_CONNECTION', 'no ztunnel connection', true);
  }

  static rejected(uid: string, text = 'failure to start proxy : Bind(AddrInUse)'): ZdsError {
    return new ZdsError('ZDS_ACK_ERROR', `ztunnel rejected pod ${uid}: ${text}`, true);
  }

  async podAdded(uid: string, info: WorkloadInfo, netns: FdSource): Promise<void> {
    this.calls.push({ op: 'add', uid, info, fdOpen: !netns.closed });
    if (this.hold) await new Promise<void>((resolve) => this.#held.push(resolve));
    const err = this.failAdd(uid);
    if (err) throw err;
  }

  async podDeleted(uid: string): Promise<void> {
    this.calls.push({ op: 'del', uid });
  }

  /** Lets the held adds be acked (or failed by failAdd). */
  release(): void {
    this.hold = false;
    for (const resolve of this.#held.splice(0)) resolve();
  }

  ops(): string[] {
    return this.calls.map((c) => `${c.op} ${c.uid}`);
  }
}
