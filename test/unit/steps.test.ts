import { describe, expect, it } from 'vitest';
import { assertValidSteps, type Step } from '../../src/addon/steps.js';
import { addonCandidates, loadAddonFrom } from '../../src/addon/binding.js';

describe('assertValidSteps', () => {
  const bad: [Step, string][] = [
    [
      { op: 'socket', family: 4, type: 'tcp', connectAddress: '10.0.0.1', connectPort: 65536 },
      'connectPort must be an integer from 0 to 65535',
    ],
    [{ op: 'socket', family: 4, type: 'tcp', bindAddress: '0.0.0.0', bindPort: -1 }, 'bindPort must be an integer'],
    [{ op: 'socket', family: 4, type: 'tcp', bindPort: 80 }, 'bindPort needs bindAddress'],
    [{ op: 'socket', family: 4, type: 'tcp', connectAddress: '10.0.0.1' }, 'connectAddress and connectPort go together'],
    [{ op: 'socket', family: 4, type: 'tcp', connectAddress: '10.0.0.1', connectPort: 80, timeoutMs: 1.5 }, 'timeoutMs must be an integer'],
    [{ op: 'socket', family: 4, type: 'udp', mark: 2 ** 32 }, 'mark must be an integer'],
    [{ op: 'exec', argv: [] }, 'argv must not be empty'],
    [{ op: 'exec', argv: ['true'], timeoutMs: 2 ** 31 * 1000 }, 'timeoutMs must be an integer'],
  ];
  it.each(bad)('rejects %j', (step, message) => {
    expect(() => assertValidSteps([step])).toThrow(message);
  });

  it('accepts well-formed steps', () => {
    expect(() =>
      assertValidSteps([
        { op: 'socket', family: 6, type: 'tcp', mark: 0x539, bindAddress: '::', bindPort: 15001, listen: 128 },
        { op: 'exec', argv: ['iptables-restore', '--noflush'], input: '', timeoutMs: 30000 },
        { op: 'nft', script: 'list ruleset' },
      ]),
    ).not.toThrow();
  });
});

describe('addon loader', () => {
  it('lists each candidate with why it failed, plus a hint', () => {
    let message = '';
    try {
      loadAddonFrom(['/nonexistent/a.node', '/etc/hostname']);
    } catch (err) {
      message = (err as Error).message;
    }
    const lines = message.split('\n');
    expect(lines[0]).toBe('could not load the ambient-node-agent native addon.');
    expect(lines[1]).toBe('  tried /nonexistent/a.node: not found');
    expect(lines[2]).toMatch(/^ {2}tried \/etc\/hostname: .+/);
    expect(lines[2]).not.toContain('not found');
  });

  it('explains every place it looked when the addon cannot be loaded', () => {
    const saved = process.env['AMBIENT_NATIVE_ADDON'];
    process.env['AMBIENT_NATIVE_ADDON'] = '/nonexistent/ambient_native.node';
    try {
      expect(addonCandidates('/nowhere')).toEqual([
        '/nonexistent/ambient_native.node',
        '/nowhere/build/Release/ambient_native.node',
        '/nowhere/build/Debug/ambient_native.node',
      ]);
    } finally {
      if (saved === undefined) delete process.env['AMBIENT_NATIVE_ADDON'];
      else process.env['AMBIENT_NATIVE_ADDON'] = saved;
    }
  });
});
