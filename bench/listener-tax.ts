// What one nf_tables listener anywhere on the node costs our rule batch. The kernel keeps one
// listener mask per netlink protocol for the whole machine (netlink_has_listeners), so while any
// socket in any namespace is a member of NFNLGRP_NFTABLES, every nf_tables commit everywhere
// builds a notification for each table, chain and rule it adds (nf_tables_rule_notify) and
// offers it to every member socket. This project's pod watches used to be such members; they now
// ask for the generation instead (native/netlink_watch.h). Here the listener is `nft monitor` in
// a scratch namespace. Blocks with and without it alternate; each sample is the prebuilt batch in
// a fresh namespace, timed by this process's CPU (user + kernel, all threads).
import type { NetAddon, NetnsHandle } from '../src/addon/net-addon.js';
import type { NftBatchStep } from '../src/addon/steps.js';
import { netfilterSocketGroups, NFNLGRP_NFTABLES_BIT } from '../test/helpers/netns-files.js';
import { inRoundOfNamespaces, timeMs, type BenchNetns, type NetnsPool } from './support.js';

export const LISTENER_ROWS = {
  withoutCpu: 'nft batch, CPU: no nf_tables listener on the node (as the agent runs now)',
  withCpu: 'nft batch, CPU: one nf_tables listener in another netns (`nft monitor`; the old pod watches)',
  withoutWall: 'nft batch, wall: no nf_tables listener on the node',
  withWall: 'nft batch, wall: one nf_tables listener in another netns',
} as const;

/** How long each block's `nft monitor` lives (killed by the exec step's timeout): the block takes ~0.1 s. */
const LISTEN_MS = 1_500;

/** Whether a socket in the namespace `cat` ran in is a member of NFNLGRP_NFTABLES (/proc/net/netlink). */
function hasNftablesListener(procNetNetlink: string): boolean {
  return netfilterSocketGroups(procNetNetlink).some((groups) => (groups & NFNLGRP_NFTABLES_BIT) !== 0);
}

/** Runs `work` while `nft monitor` listens in the scratch namespace. */
async function withListener<T>(addon: NetAddon, scratch: NetnsHandle, work: () => Promise<T>): Promise<T> {
  let ended = false;
  const monitor = addon.run(scratch, [{ op: 'exec', argv: ['nft', 'monitor'], timeoutMs: LISTEN_MS }] as const);
  const done = monitor.then(
    () => void (ended = true),
    () => void (ended = true),
  );
  for (let tries = 0; ; tries++) {
    const [listing] = await addon.run(scratch, [{ op: 'exec', argv: ['cat', '/proc/net/netlink'], timeoutMs: 5_000 }] as const);
    if (hasNftablesListener(listing.stdout)) break;
    if (ended || tries > 100) throw new Error('nft monitor never joined NFNLGRP_NFTABLES');
    await new Promise((r) => setTimeout(r, 5));
  }
  const result = await work();
  if (ended) throw new Error(`nft monitor ended before its block did (raise LISTEN_MS above ${LISTEN_MS})`);
  await done;
  return result;
}

async function sample(
  addon: NetAddon,
  namespaces: readonly BenchNetns[],
  batch: NftBatchStep,
  into: { cpu: number[]; wall: number[] },
): Promise<void> {
  for (const ns of namespaces) {
    const handle = addon.openNetns(ns.path);
    try {
      const before = process.cpuUsage();
      into.wall.push(await timeMs(() => addon.run(handle, [batch])));
      const used = process.cpuUsage(before);
      into.cpu.push((used.user + used.system) / 1000);
    } finally {
      handle.close();
    }
  }
}

/**
 * `rounds` rounds of 2 x `perBlock` fresh namespaces (all created before the round's first
 * sample): the first half without the listener, the second half with it.
 */
export async function measureListenerTax(
  addon: NetAddon,
  pool: NetnsPool,
  batch: NftBatchStep,
  perBlock = 25,
  rounds = 4,
): Promise<Map<string, number[]>> {
  const without = { cpu: [] as number[], wall: [] as number[] };
  const withOne = { cpu: [] as number[], wall: [] as number[] };
  const scratchNs = await pool.create();
  const scratch = addon.openNetns(scratchNs.path);
  try {
    for (let i = 0; i < rounds; i++) {
      await inRoundOfNamespaces(pool, 2 * perBlock, async (namespaces) => {
        await sample(addon, namespaces.slice(0, perBlock), batch, without);
        await withListener(addon, scratch, () => sample(addon, namespaces.slice(perBlock), batch, withOne));
      });
    }
  } finally {
    scratch.close();
    await pool.destroy(scratchNs);
  }
  return new Map([
    [LISTENER_ROWS.withoutCpu, without.cpu],
    [LISTENER_ROWS.withCpu, withOne.cpu],
    [LISTENER_ROWS.withoutWall, without.wall],
    [LISTENER_ROWS.withWall, withOne.wall],
  ]);
}
