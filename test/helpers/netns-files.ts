// Netns handles without root: the process's own namespace files (/proc/self/ns/*) are real
// nsfs fds that any user may open, which is all the ZDS transport needs.
import { closeSync, fstatSync, openSync, readdirSync } from 'node:fs';
import type { NetnsHandle } from '../../src/addon/net-addon.js';

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

export function fdCount(): number {
  return readdirSync('/proc/self/fd').length;
}
