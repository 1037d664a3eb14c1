// Binding the ZDS socket, apart from the server (which pulls in protobufjs), so that `run` can
// bind it first thing after a restart.
import type { RawAddon } from '../addon/binding.js';
import { SeqpacketListener } from '../addon/seqpacket.js';

/** Binds without accepting: connections wait in the backlog until the server resumes it. */
export function bindZdsSocket(socketPath: string, mode = 0o600, raw?: RawAddon): SeqpacketListener {
  return SeqpacketListener.listen(socketPath, (s) => s.close(), { mode, paused: true }, raw);
}
