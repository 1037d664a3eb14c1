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
