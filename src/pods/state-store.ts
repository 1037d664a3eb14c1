// The enrolled pods, persisted in the run dir so that a restarted (or crashed) agent can find each
// pod's netns again without Kubernetes. Every change rewrites the file atomically.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { writeFileAtomic } from '../util/atomic-file.js';

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

  put(pod: EnrolledPod): void {
    this.#pods.set(pod.uid, pod);
    this.#save();
  }

  remove(uid: string): void {
    if (this.#pods.delete(uid)) this.#save();
  }

  #save(): void {
    const file: StateFile = { version: 1, pods: [...this.#pods.values()] };
    writeFileAtomic(this.path, `${JSON.stringify(file, null, 2)}\n`, 0o600);
  }
}
