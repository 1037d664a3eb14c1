// Reads the text `nft list ruleset` prints into tables, chains and rules, so that two listings
// can be compared structurally. Listings from the same kernel and libnftables are canonical
// (the kernel normalises what we wrote), which is what drift detection relies on.

export interface ListedChain {
  /** Base-chain declaration (`type nat hook output priority dstnat; policy accept;`), or ''. */
  spec: string;
  rules: string[];
}

export interface ListedTable {
  family: string;
  name: string;
  chains: Map<string, ListedChain>;
}

export type ListedRuleset = Map<string, ListedTable>;

export function tableKey(family: string, name: string): string {
  return `${family} ${name}`;
}

const TABLE_OPEN = /^table (\S+) (\S+) \{$/;
const CHAIN_OPEN = /^chain (\S+) \{$/;
const OTHER_BLOCK_OPEN = /\{$/;

/** Parses a listing, keeping only tables whose name passes `keep`. Sets and maps are skipped. */
export function parseNftListing(text: string, keep: (name: string) => boolean = () => true): ListedRuleset {
  const ruleset: ListedRuleset = new Map();
  let table: ListedTable | undefined;
  let chain: ListedChain | undefined;
  let skipDepth = 0;
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '') continue;
    if (skipDepth > 0) {
      if (line.endsWith('{')) skipDepth++;
      if (line === '}') skipDepth--;
      continue;
    }
    const tableOpen = TABLE_OPEN.exec(line);
    if (tableOpen && !table) {
      const [, family = '', name = ''] = tableOpen;
      table = { family, name, chains: new Map() };
      if (keep(name)) ruleset.set(tableKey(family, name), table);
      continue;
    }
    const chainOpen = CHAIN_OPEN.exec(line);
    if (chainOpen && table && !chain) {
      chain = { spec: '', rules: [] };
      table.chains.set(chainOpen[1] ?? '', chain);
      continue;
    }
    if (line === '}') {
      if (chain) chain = undefined;
      else table = undefined;
      continue;
    }
    if (OTHER_BLOCK_OPEN.test(line)) {
      skipDepth = 1; // set, map, flowtable, named counter: not part of the rule comparison
      continue;
    }
    if (!chain) continue; // table-level attributes such as `flags` or `comment`
    if (chain.spec === '' && chain.rules.length === 0 && /^type \S+ hook /.test(line)) chain.spec = line;
    else chain.rules.push(line);
  }
  return ruleset;
}
