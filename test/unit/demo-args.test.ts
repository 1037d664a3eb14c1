// `demo --runtime cni|containerd`: who creates the pods.
import { describe, expect, it } from 'vitest';
import { UsageError } from '../../src/util/usage-error.js';
import { parseDemoArgs } from '../../src/demo/demo-command.js';

describe('demo arguments', () => {
  it('defaults to the demo making the pods itself, and takes containerd', () => {
    expect(parseDemoArgs([])).toEqual({ runtime: 'cni' });
    expect(parseDemoArgs(['--runtime', 'cni'])).toEqual({ runtime: 'cni' });
    expect(parseDemoArgs(['--runtime', 'containerd'])).toEqual({ runtime: 'containerd' });
  });

  it('refuses an unknown runtime or flag with a usage error', () => {
    expect(() => parseDemoArgs(['--runtime', 'crio'])).toThrow(new UsageError('--runtime: expected cni or containerd, got "crio"'));
    expect(() => parseDemoArgs(['--pods', '3'])).toThrow(UsageError);
  });
});
