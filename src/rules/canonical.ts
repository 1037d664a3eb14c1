// The kernel rewrites rules on the way in (`mark and 0xfff` lists as `meta mark & 0x00000fff`),
// so drift cannot be found by comparing our text with a listing. Instead the expected rules are
// loaded once into a fresh, private network namespace and listed back: that listing is exactly
// what a correctly configured pod shows on this kernel with this libnftables.
import type { NetAddon } from '../addon/net-addon.js';
import { parseNftListing, type ListedRuleset } from './nft-listing.js';

export const LIST_RULESET = 'list ruleset';

/** Listings for comparison are stateless (no counter values), so traffic does not look like drift. */
export const LIST_RULESET_STEP = { op: 'nft', script: LIST_RULESET, stateless: true } as const;

export interface CanonicalListing {
  /** The listing as the kernel gave it: a pod whose listing is this same text is in sync. */
  text: string;
  parsed: ListedRuleset;
}

export function isAmbientTable(name: string): boolean {
  return name.startsWith('istio-ambient-');
}

export class CanonicalListings {
  readonly #cache = new Map<string, Promise<CanonicalListing>>();

  constructor(private readonly addon: NetAddon) {}

  /** The canonical listing of `script`, computed once per distinct script. */
  get(script: string): Promise<CanonicalListing> {
    let listing = this.#cache.get(script);
    if (!listing) {
      listing = this.#compute(script);
      this.#cache.set(script, listing);
      listing.catch(() => this.#cache.delete(script)); // a failure is not remembered
    }
    return listing;
  }

  async #compute(script: string): Promise<CanonicalListing> {
    const [, listed] = await this.addon.run('fresh', [{ op: 'nft', script }, LIST_RULESET_STEP] as const);
    return { text: listed.output, parsed: parseNftListing(listed.output, isAmbientTable) };
  }
}
