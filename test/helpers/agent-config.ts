// The configuration of an agent a test runs in its own process: everything it writes under the
// test's directory, health and metrics on ephemeral ports, pod netns paths taken as given.
import { join } from 'node:path';
import { loadAgentConfig, type AgentConfig } from '../../src/agent/config.js';

export interface TestAgentConfigOptions {
  /** Default `<dir>/z.sock`. */
  zdsSocket?: string;
  /** --netns-root; default '' (paths as the test gives them). */
  netnsRoot?: string;
  /** More `run` flags (after these). */
  flags?: readonly string[];
  env?: Record<string, string>;
}

export function testAgentConfig(dir: string, opts: TestAgentConfigOptions = {}): AgentConfig {
  return loadAgentConfig(
    [
      '--run-dir',
      join(dir, 'run'),
      '--zds-socket',
      opts.zdsSocket ?? join(dir, 'z.sock'),
      '--netns-root',
      opts.netnsRoot ?? '',
      '--health-port',
      '0',
      '--metrics-port',
      '0',
      ...(opts.flags ?? []),
    ],
    opts.env ?? {},
  );
}
