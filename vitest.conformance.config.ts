// npm run test:conformance: the ZDS scenarios against the independent client named by
// ZDS_CONFORMANCE_CLIENT (the "conformance" project of vitest.config.ts, alone).
import { defineConfig } from 'vitest/config';
import { conformanceClient } from './test/conformance-client.ts';
import base from './vitest.config.ts';

conformanceClient(); // a clear error when the variable is unset or names no file

interface ProjectLike {
  test?: { name?: string };
}

const projects = ((base.test?.projects ?? []) as ProjectLike[]).filter((p) => p.test?.name === 'conformance');

export default defineConfig({ test: { ...base.test, projects } });
