// The native ZDS peer (native/zds_peer, build/Release/zds-peer) as a child process: it connects
// to a ZDS socket like ztunnel and acks each add after binding ztunnel's in-pod listeners in the
// pod's netns. Its status lines (see main.cc) are mirrored here: connections, snapshot, pods,
// and its own add->ack time per pod.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

import { projectRoot } from '../src/project-root.js';

export interface PeerPod {
  namespace: string;
  name: string;
}

export function zdsPeerBinary(): string {
  return join(projectRoot(), 'build', 'Release', 'zds-peer');
}

export class NativeZdsPeer {
  connectionCount = 0;
  /** The current connection has received its snapshot (snapshot_sent acked). */
  ready = false;
  readonly pods = new Map<string, PeerPod>();
  /** The peer's own time from receiving each add to having sent its ack, in ms. */
  readonly addAckMs: number[] = [];
  readonly nacks: string[] = [];
  #seenThisConnection = new Set<string>();
  #exited: Promise<void>;

  private constructor(private readonly child: ChildProcess) {
    this.#exited = new Promise((resolve) => child.once('exit', () => resolve()));
    createInterface({ input: child.stdout! }).on('line', (line) => this.#onLine(line));
  }

  static start(socketPath: string): NativeZdsPeer {
    const binary = zdsPeerBinary();
    if (!existsSync(binary)) throw new Error(`${binary} is missing: npx node-gyp build`);
    return new NativeZdsPeer(spawn(binary, [socketPath], { stdio: ['ignore', 'pipe', 'inherit'] }));
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  #onLine(line: string): void {
    const [kind, a, b, c] = line.split(' ');
    switch (kind) {
      case 'connected':
        this.connectionCount = Number(a);
        this.ready = false;
        this.#seenThisConnection = new Set();
        break;
      case 'snapshot':
        for (const uid of [...this.pods.keys()]) if (!this.#seenThisConnection.has(uid)) this.pods.delete(uid);
        this.ready = true;
        break;
      case 'add': {
        const [namespace = '', name = ''] = (b ?? '').split('/');
        this.pods.set(a ?? '', { namespace, name });
        this.#seenThisConnection.add(a ?? '');
        this.addAckMs.push(Number(c) / 1000);
        break;
      }
      case 'del':
        this.pods.delete(a ?? '');
        break;
      case 'nack':
        this.nacks.push(line);
        break;
    }
  }

  async waitFor(condition: () => boolean, timeoutMs: number, what: string): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!condition()) {
      if (Date.now() > deadline) throw new Error(`zds-peer: timed out after ${timeoutMs} ms waiting for ${what}`);
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
  }

  async stop(): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGTERM');
    await this.#exited;
  }
}
