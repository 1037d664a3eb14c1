// The opt-in ZDS conformance run (npm run test:conformance): an independent ztunnel-like client,
// named by its path in ZDS_CONFORMANCE_CLIENT (e.g. a zds_client.py). Off by default: `npm test`
// then says so in its closing lines (test/summary-reporter.ts).
import { existsSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';

export const CONFORMANCE_ENV = 'ZDS_CONFORMANCE_CLIENT';

export const CONFORMANCE_SKIPPED =
  `ZDS conformance run against an independent client: not run (off by default). ` +
  `Opt in with ${CONFORMANCE_ENV}=/path/to/zds_client.py npm run test:conformance`;

/** The client's absolute path, or undefined when the run is off. Throws when it names no file. */
export function conformanceClient(): string;
export function conformanceClient(optional: true): string | undefined;
export function conformanceClient(optional = false): string | undefined {
  const value = process.env[CONFORMANCE_ENV];
  if (!value) {
    if (optional) return undefined;
    throw new Error(`the ZDS conformance run needs ${CONFORMANCE_ENV}=<path of the client, e.g. zds_client.py>`);
  }
  const path = isAbsolute(value) ? value : resolve(value);
  if (!existsSync(path)) throw new Error(`${CONFORMANCE_ENV}=${value}: no such file`);
  return path;
}
