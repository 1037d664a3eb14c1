// The one ADD deadline (ADD_ANSWER_MS, below the plugin's own timeout) lives in the plugin-event
// server: an ADD still running when it passes is answered 500 naming what it waits for, the work
// carries on, and DEL and CHECK are not bounded by it.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PluginEventServer } from '../../src/agent/plugin-event-server.js';
import { ADD_ANSWER_MS, PLUGIN_AGENT_TIMEOUT_MS, type PluginAddEvent } from '../../src/cni/protocol.js';
import { postUnix } from '../helpers/unix-http.js';

const ADD: PluginAddEvent = { Netns: '/var/run/netns/a', PodName: 'a', PodNamespace: 'shop', PodUID: 'uid-a', ContainerID: 'c', IPs: [] };

describe('plugin-event server: the ADD answer deadline', () => {
  let dir: string;
  let server: PluginEventServer | undefined;
  let release: () => void = () => {};
  let finished = false;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'add-deadline-'));
    finished = false;
  });

  afterEach(async () => {
    release();
    await server?.close(100);
    rmSync(dir, { recursive: true, force: true });
  });

  async function start(pendingAdd?: (e: PluginAddEvent) => string | undefined): Promise<string> {
    const socket = join(dir, 'pluginevent.sock');
    const slow = (): Promise<void> =>
      new Promise<void>((resolve) => {
        release = () => {
          finished = true;
          resolve();
        };
      });
    server = new PluginEventServer(
      socket,
      {
        add: slow,
        del: async () => new Promise((r) => setTimeout(r, 120)),
        check: async () => undefined,
        ...(pendingAdd ? { pendingAdd } : {}),
      },
      undefined,
      { addAnswerMs: 60 },
    );
    await server.start();
    return socket;
  }

  it('is below the plugin timeout', () => {
    expect(ADD_ANSWER_MS).toBeLessThan(PLUGIN_AGENT_TIMEOUT_MS);
  });

  it('answers a running ADD with what it waits for; the work carries on', async () => {
    const socket = await start((e) => `${e.PodName}: ztunnel has not acknowledged it`);
    const res = await postUnix(socket, '/cmdadd', ADD);
    expect(res).toEqual({ status: 500, body: 'pod shop/a not enrolled within 60 ms: a: ztunnel has not acknowledged it' });
    expect(finished).toBe(false);
    release();
    expect(finished).toBe(true);
  });

  it('says the ADD is in progress when the source cannot tell more', async () => {
    const socket = await start(() => undefined);
    expect(await postUnix(socket, '/cmdadd', ADD)).toEqual({
      status: 500,
      body: 'pod shop/a not enrolled within 60 ms: it is still in progress',
    });
  });

  it('does not bound DEL (it always succeeds for the runtime)', async () => {
    const socket = await start();
    expect(await postUnix(socket, '/cmddel', ADD)).toEqual({ status: 200, body: '' });
  });
});
