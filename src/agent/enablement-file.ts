// Keeps <run dir>/ambient-enablement.json current: the plugin reads it only when it cannot reach
// the agent, to fail ambient pods closed ("try again later") and let the others start.
import { join } from 'node:path';
import { ENABLEMENT_SNAPSHOT_FILE, type EnablementSnapshot } from '../cni/protocol.js';
import { atomicWriteFile } from '../util/atomic-file.js';

export async function writeEnablementSnapshot(
  runDir: string,
  snapshot: Omit<EnablementSnapshot, 'version' | 'generatedAt'>,
): Promise<void> {
  const file: EnablementSnapshot = { version: 1, ...snapshot, generatedAt: new Date().toISOString() };
  await atomicWriteFile(join(runDir, ENABLEMENT_SNAPSHOT_FILE), `${JSON.stringify(file)}\n`, { mode: 0o644, durable: false });
}
