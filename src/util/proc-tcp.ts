// The TCP sockets a process can see, from /proc/<pid>/net/tcp{,6} (the bench and the fault tests
// tell the agent's listening ports and keep-alive connections apart by socket inode).
import { readFileSync } from 'node:fs';

/** /proc's `st` column: 01 established, 0A listening. */
export const TCP_ESTABLISHED = '01';
export const TCP_LISTEN = '0A';

export interface ProcTcpSocket {
  inode: string;
  localPort: number;
  state: string;
}

export function procTcpSockets(pid: number): ProcTcpSocket[] {
  const sockets: ProcTcpSocket[] = [];
  for (const file of ['tcp', 'tcp6']) {
    let text: string;
    try {
      text = readFileSync(`/proc/${pid}/net/${file}`, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
      const cols = line.trim().split(/\s+/);
      if (cols.length < 10) continue;
      sockets.push({ inode: cols[9] ?? '', localPort: parseInt((cols[1] ?? '').split(':')[1] ?? '', 16), state: cols[3] ?? '' });
    }
  }
  return sockets;
}
