// Structured logs with pino: JSON lines, one per event, with child loggers per component/pod.
import { pino, type Logger } from 'pino';

export type { Logger };

export function createLogger(options: { level?: string; name?: string } = {}): Logger {
  return pino({
    name: options.name ?? 'ambient-node-agent',
    level: options.level ?? process.env['LOG_LEVEL'] ?? 'info',
    base: undefined, // no pid/hostname noise; the DaemonSet pod already identifies the node
    timestamp: pino.stdTimeFunctions.isoTime,
  });
}

/** For tests and library use: drops everything. */
export const silentLogger: Logger = pino({ level: 'silent' });
