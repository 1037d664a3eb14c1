// Finds the UID the kubelet runs as, for the host probe SNAT rule's `skuid` match (Istio looks
// for kubelet, MicroK8s' kubelite and k3s in /proc, and uses the real UID from status).
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const KUBELET_COMMS = new Set(['kubelet', 'kubelite', 'k3s', 'k3s-server', 'k3s-agent']);

function readOrEmpty(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return ''; // the process exited while we looked, or its files are not readable
  }
}

function realUid(status: string): number | undefined {
  const m = /^Uid:\s+(\d+)/m.exec(status);
  return m ? Number(m[1]) : undefined;
}

function isKubelet(procDir: string, pid: string): boolean {
  const comm = readOrEmpty(join(procDir, pid, 'comm')).trim();
  if (!KUBELET_COMMS.has(comm)) return false;
  // comm `kubelet` must really be the kubelet (Istio also checks the command line).
  return comm !== 'kubelet' || readOrEmpty(join(procDir, pid, 'cmdline')).includes('kubelet');
}

/** The kubelet's real UID, or undefined when no kubelet process is visible in `procDir`. */
export function findKubeletUid(procDir = '/proc'): number | undefined {
  let entries: string[];
  try {
    entries = readdirSync(procDir);
  } catch {
    return undefined;
  }
  for (const pid of entries) {
    if (!/^\d+$/.test(pid) || !isKubelet(procDir, pid)) continue;
    const uid = realUid(readOrEmpty(join(procDir, pid, 'status')));
    if (uid !== undefined) return uid;
  }
  return undefined;
}
