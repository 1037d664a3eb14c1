// Opening a pod's netns from the path the container runtime gave (CNI_NETNS). The path is input
// that ends up in setns(), so only the places runtimes really use are accepted, under the
// agent's --netns-root: `/var/run/netns/<name>`, `/run/netns/<name>` (containerd, CRI-O) and
// `/proc/<pid>/ns/net` (cri-dockerd). Refused: anything else (`..`, relative, other
// directories), a symlink where the runtime puts a bind-mounted nsfs file, a file that is not a
// network namespace (the addon checks NS_GET_NSTYPE), and the agent's own namespace, which is
// the host's (the DaemonSet runs with hostNetwork): redirecting it would capture the node.
import { lstatSync, statSync } from 'node:fs';
import { posix } from 'node:path';
import { hasErrorCode } from '../addon/errors.js';
import { netnsPathProblem } from '../cni/fields.js';
import type { NetAddon, NetnsHandle, NetnsIdentity } from '../addon/net-addon.js';

const RUNTIME_NETNS_DIRS = ['/var/run/netns/', '/run/netns/'];
const PROC_NETNS = /^\/proc\/[1-9][0-9]{0,9}\/ns\/net$/;

/** The netns path is not one the agent will open (never retried: the same path fails again). */
export class NetnsPathError extends Error {
  readonly code = 'EBADNETNS';
}

/** Lexical checks of CNI_NETNS; returns the path to open under `netnsRoot`. */
export function podNetnsLocation(netnsRoot: string, runtimePath: string): string {
  const refuse = (why: string): never => {
    throw new NetnsPathError(`refusing netns path ${JSON.stringify(runtimePath.slice(0, 200))}: ${why}`);
  };
  const problem = netnsPathProblem(runtimePath); // absolute, no NUL, PATH_MAX, no ".."
  if (problem) refuse(problem);
  if (posix.normalize(runtimePath) !== runtimePath || runtimePath.endsWith('/')) refuse('not a normalized path (., .., //)');
  const inRuntimeDir = RUNTIME_NETNS_DIRS.some((dir) => runtimePath.startsWith(dir) && !runtimePath.slice(dir.length).includes('/'));
  if (!inRuntimeDir && !PROC_NETNS.test(runtimePath)) {
    refuse(`outside the runtime netns locations (${RUNTIME_NETNS_DIRS.map((d) => `${d}<name>`).join(', ')}, /proc/<pid>/ns/net)`);
  }
  return netnsRoot ? posix.join(netnsRoot, runtimePath) : runtimePath;
}

/** The namespace the agent itself runs in (the JS thread never changes it). */
export function ownNetns(path = '/proc/self/ns/net'): NetnsIdentity | undefined {
  try {
    const st = statSync(path);
    return { ino: st.ino, dev: st.dev };
  } catch {
    return undefined;
  }
}

export class PodNetnsOpener {
  readonly #own: NetnsIdentity | undefined;
  readonly #host: NetnsIdentity | undefined;

  /** `host`: the node's namespace when it is not the agent's own (ALLOW_SWITCH_TO_HOST_NS). */
  constructor(
    private readonly addon: NetAddon,
    private readonly netnsRoot: string,
    own: NetnsIdentity | undefined = ownNetns(),
    host?: NetnsIdentity,
  ) {
    this.#own = own;
    this.#host = host;
  }

  /** Opens the pod netns or throws NetnsPathError / the addon's ENOENT or EINVAL error. */
  open(runtimePath: string): NetnsHandle {
    const path = podNetnsLocation(this.netnsRoot, runtimePath);
    if (!PROC_NETNS.test(runtimePath) && isSymlink(path)) {
      throw new NetnsPathError(`refusing netns path ${path}: a symlink (runtimes bind-mount the namespace there)`);
    }
    let handle: NetnsHandle;
    try {
      handle = this.addon.openNetns(path);
    } catch (err) {
      if (hasErrorCode(err, 'ENOENT')) throw new Error(`pod netns ${path} does not exist (the sandbox is gone?)`, { cause: err });
      throw err;
    }
    if (this.#own && handle.ino === this.#own.ino && handle.dev === this.#own.dev) {
      handle.close();
      throw new NetnsPathError(`refusing netns path ${path}: it is the agent's own (the host's) network namespace`);
    }
    if (this.#host && handle.ino === this.#host.ino && handle.dev === this.#host.dev) {
      handle.close();
      throw new NetnsPathError(`refusing netns path ${path}: it is the node's (host) network namespace`);
    }
    return handle;
  }
}

function isSymlink(path: string): boolean {
  try {
    return lstatSync(path).isSymbolicLink();
  } catch {
    return false; // missing: the open reports it
  }
}
