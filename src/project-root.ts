// The package root (the folder with package.json), found from this module's location so that it
// works both from src/ (tests) and from dist/src/ (compiled).
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export function projectRoot(from = import.meta.url): string {
  let dir = dirname(fileURLToPath(from));
  while (!existsSync(join(dir, 'package.json')) && dirname(dir) !== dir) dir = dirname(dir);
  return dir;
}
