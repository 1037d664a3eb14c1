// The enrolled pods, persisted in the run dir so that a restarted (or crashed) agent can find each
// pod's netns again without Kubernetes. Every change rewrites the file atomically.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { atomicWriteFile } from '../util/atomic-file.js';

export const STATE_FILE = 'enrolled-pods.json';

export interface EnrolledPod {
  uid: string;
  name: string;
  namespace: string;
  serviceAccount: string;
  /** The netns path as the runtime gave it (without the agent's --netns-root prefix). */
  netnsPath: string;
  /** Identity of that namespace when it was enrolled: a reused path must not adopt a new pod. */
  netnsIno: number;
  netnsDev: number;
  ips: string[];
  containerId: string;
}

interface StateFile {
  version: 1;
  pods: EnrolledPod[];
}

export class PodStateStore {
  readonly path: string;
  readonly #pods = new Map<string, EnrolledPod>();
  #saving: Promise<void> = Promise.resolve();

  constructor(runDir: string) {
    this.path = join(runDir, STATE_FILE);
  }

  /** Loads the file; a missing file is an empty state, a corrupt one is an error with the path. */
  load(): EnrolledPod[] {
    let text: string;
    try {
      text = readFileSync(this.path, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw err;
    }
    let parsed: StateFile;
    try {
      parsed = JSON.parse(text) as StateFile;
    } catch (err) {
      throw new Error(`${this.path}: not valid JSON (${(err as Error).message})`);
    }
    if (parsed.version !== 1 || !Array.isArray(parsed.pods)) throw new Error(`${this.path}: unknown state format`);
    this.#pods.clear();
    for (const pod of parsed.pods) this.#pods.set(pod.uid, pod);
    return [...this.#pods.values()];
  }

  get(uid: string): EnrolledPod | undefined {
    return this.#pods.get(uid);
  }

  list(): EnrolledPod[] {
    return [...this.#pods.values()];
  }

  put(pod: EnrolledPod): Promise<void> {
    this.#pods.set(pod.uid, pod);
    return this.#save();
  }

  async remove(uid: string): Promise<void> {
    if (this.#pods.delete(uid)) await this.#save();
  }

  /** Saves are chained so that an older snapshot never overwrites a newer one. */
  #save(): Promise<void> {
    const file: StateFile = { version: 1, pods: [...this.#pods.values()] };
    const text = `${JSON.stringify(file, null, 2)}\n`;
    this.#saving = this.#saving.catch(() => undefined).then(() => atomicWriteFile(this.path, text, { mode: 0o600, durable: false }));
    return this.#saving;
  }
}
