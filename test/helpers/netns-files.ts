// Netns handles without root: the process's own namespace files (/proc/self/ns/*) are real
// nsfs fds that any user may open, which is all the ZDS transport needs.
import { closeSync, fstatSync, openSync, readdirSync, statSync } from 'node:fs';
import type { NetnsHandle, NetnsIdentity } from '../../src/addon/net-addon.js';

export function openOwnNamespace(kind: 'net' | 'uts' | 'ipc' = 'net'): NetnsHandle {
  const path = `/proc/self/ns/${kind}`;
  const fd = openSync(path, 'r');
  const st = fstatSync(fd);
  let closed = false;
  return {
    fd,
    ino: st.ino,
    dev: st.dev,
    path,
    get closed() {
      return closed;
    },
    close() {
      if (closed) return;
      closed = true;
      closeSync(fd);
    },
  };
}

/** The namespace of the calling JS thread; it must never change (the addon's threads do setns). */
export function currentThreadNetns(): NetnsIdentity {
  const st = statSync('/proc/thread-self/ns/net');
  return { ino: st.ino, dev: st.dev };
}

/** How many fds this process holds (leak checks). */
export function fdCount(): number {
  return readdirSync('/proc/self/fd').length;
}

const NETLINK_NETFILTER = 12;
/** NFNLGRP_NFTABLES is group 7: bit 0x40 of /proc/net/netlink's Groups column. */
export const NFNLGRP_NFTABLES_BIT = 1 << (7 - 1);

/**
 * The Groups bitmask of every NETLINK_NETFILTER socket in a /proc/net/netlink listing (of the
 * namespace the reader ran in). One with NFNLGRP_NFTABLES_BIT set anywhere makes every nf_tables
 * commit on the machine build notifications.
 */
export function netfilterSocketGroups(procNetNetlink: string): number[] {
  return procNetNetlink
    .split('\n')
    .slice(1)
    .map((line) => line.trim().split(/\s+/))
    .filter((cols) => Number(cols[1]) === NETLINK_NETFILTER)
    .map((cols) => parseInt(cols[3] ?? '0', 16));
}
