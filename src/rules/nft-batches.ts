// Prebuilt nf_tables batches for the in-pod rules, one per distinct transaction text (that is,
// per distinct rule model: settings x pod overrides). The text rendered from the model stays the
// single source of truth: it is loaded by libnftables into a fresh private namespace, and the
// addon compiles what the kernel holds there into netlink messages. A pod then costs one
// sendmsg instead of parsing and evaluating the text again.
import type { NetAddon } from '../addon/net-addon.js';
import { NFT_FAMILY } from './constants.js';

export class NftBatches {
  readonly #ready = new Map<string, Uint8Array>();
  readonly #pending = new Map<string, Promise<Uint8Array>>();
  /** Scripts whose compile failed: peek() does not try again per pod (the text serves them). */
  readonly #failed = new Set<string>();

  constructor(private readonly addon: NetAddon) {}

  /** The batch for `script` if it is compiled already; otherwise starts compiling it (once). */
  peek(script: string, tables: readonly string[]): Uint8Array | undefined {
    const batch = this.#ready.get(script);
    if (!batch && !this.#failed.has(script)) {
      this.get(script, tables).catch(() => this.#failed.add(script)); // the text path serves meanwhile
    }
    return batch;
  }

  /** The batch for `script`, compiled once; a failed compile is not remembered. */
  get(script: string, tables: readonly string[]): Promise<Uint8Array> {
    const ready = this.#ready.get(script);
    if (ready) return Promise.resolve(ready);
    let pending = this.#pending.get(script);
    if (!pending) {
      pending = this.#compile(script, tables).finally(() => this.#pending.delete(script));
      this.#pending.set(script, pending);
    }
    return pending;
  }

  get size(): number {
    return this.#ready.size;
  }

  async #compile(script: string, tables: readonly string[]): Promise<Uint8Array> {
    const [, compiled] = await this.addon.run('fresh', [
      { op: 'nft', script },
      { op: 'nftCompile', family: NFT_FAMILY, tables: [...tables] },
    ] as const);
    this.#ready.set(script, compiled.batch);
    return compiled.batch;
  }
}
