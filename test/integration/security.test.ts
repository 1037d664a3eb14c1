// The agent's attack surface on the node: every Unix socket it serves (plugin events, plugin
// logs, debug, ZDS) and every file it keeps is root-only, and an unprivileged local process cannot
// connect. Run as root (CI), the unprivileged side is a child process with uid/gid 65534.
import { execFile } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Agent } from '../../src/agent/agent.js';
import { StandaloneMode } from '../../src/standalone/standalone-mode.js';
import type { AgentConfig } from '../../src/agent/config.js';
import { FakeNetAddon } from '../fakes/fake-net-addon.js';
import { FakeZtunnel } from '../helpers/fake-ztunnel.js';
import { postUnix } from '../helpers/unix-http.js';
import { testAgentConfig } from '../helpers/agent-config.js';

const isRoot = process.getuid?.() === 0;
const NOBODY = 65534;

/** Connects to a Unix socket as uid/gid 65534 and prints the outcome (argv only, no shell). */
async function connectAsNobody(path: string, type: 'stream' | 'seqpacket'): Promise<string> {
  const script =
    type === 'stream'
      ? `require('net').connect(process.argv[1]).on('connect',()=>{console.log('connected');process.exit(0)}).on('error',e=>{console.log(e.code);process.exit(0)})`
      : `try{require('fs').accessSync(process.argv[1],require('fs').constants.W_OK);console.log('writable')}catch(e){console.log(e.code)}`;
  const { stdout } = await promisify(execFile)(process.execPath, ['-e', script, path], { uid: NOBODY, gid: NOBODY });
  return stdout.trim();
}

describe('agent sockets and files are root-only', () => {
  let dir: string;
  let config: AgentConfig;
  let agent: Agent;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'agent-sec-'));
    chmodSync(dir, 0o755); // only the agent's own modes may keep others out
    config = testAgentConfig(dir, { zdsSocket: join(dir, 'ztunnel', 'z.sock'), netnsRoot: '/host' });
    const addon = new FakeNetAddon({ realFds: true });
    addon.addNetns('/host/var/run/netns/web');
    agent = new Agent(config, { addon, makeMode: (d) => new StandaloneMode(d) });
    await agent.start();
    const z = await FakeZtunnel.connect(config.zdsSocket);
    await z.waitFor(() => z.snapshotSent);
    const add = { Netns: '/var/run/netns/web', PodName: 'web', PodNamespace: 'shop', PodUID: 'uid-web', IPs: [] };
    expect((await postUnix(join(config.runDir, 'pluginevent.sock'), '/cmdadd', add)).status).toBe(200);
    z.close();
  });
  afterAll(async () => {
    await agent?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('creates the sockets 0600, the run dir 0750 and the pod state 0700/0600', () => {
    const mode = (p: string): string => (statSync(p).mode & 0o7777).toString(8);
    expect(mode(config.runDir)).toBe('750');
    expect(mode(join(config.runDir, 'pluginevent.sock'))).toBe('600');
    expect(mode(join(config.runDir, 'log.sock'))).toBe('600');
    expect(mode(join(config.runDir, 'debug.sock'))).toBe('600');
    expect(mode(config.zdsSocket)).toBe('600');
    expect(mode(join(config.runDir, 'pods'))).toBe('700');
    expect(mode(join(config.runDir, 'pods', 'uid-web.json'))).toBe('600');
  });

  it.skipIf(!isRoot)('refuses an unprivileged local process on every socket', async () => {
    expect(await connectAsNobody(join(config.runDir, 'pluginevent.sock'), 'stream')).toBe('EACCES');
    expect(await connectAsNobody(join(config.runDir, 'log.sock'), 'stream')).toBe('EACCES');
    expect(await connectAsNobody(join(config.runDir, 'debug.sock'), 'stream')).toBe('EACCES');
    // Node cannot open SOCK_SEQPACKET; connecting to any Unix socket needs write permission on it.
    expect(await connectAsNobody(config.zdsSocket, 'seqpacket')).toBe('EACCES');
  });
});
