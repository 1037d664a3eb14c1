// A `loopback` CNI plugin that always loses containerd's race: containerd sets the pod's lo up
// (its loopback network) concurrently with the pod's CNI chain, and when the chain wins the agent
// finds lo down. This one answers like the real plugin and leaves lo alone, so the agent sees lo
// down on every sandbox. The test installs it as `loopback` with a `#!<node>` line in front.
import { readFileSync } from 'node:fs';

const command = process.env.CNI_COMMAND ?? '';
/** The network config on stdin; anything unreadable counts as empty (the plugin never fails). */
function readConf() {
  try {
    return JSON.parse(readFileSync(0, 'utf8') || '{}');
  } catch {
    return {};
  }
}
const conf = readConf();
const cniVersion = typeof conf.cniVersion === 'string' ? conf.cniVersion : '1.0.0';
if (command === 'VERSION') {
  process.stdout.write(JSON.stringify({ cniVersion, supportedVersions: ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'] }));
} else if (command === 'ADD') {
  process.stdout.write(JSON.stringify({ cniVersion, interfaces: [{ name: 'lo', sandbox: process.env.CNI_NETNS ?? '' }], ips: [] }));
}
// DEL, CHECK, STATUS, GC: success without output.
