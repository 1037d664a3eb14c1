// Opening a pod's netns from the path the container runtime gave (CNI_NETNS). The path is input
// that ends up in setns(), so only the places runtimes really use are accepted (each path is
// `<dir>/<name>` with <dir> below, or `/proc/<pid>/ns/net`), plus the directories the operator
// adds with --netns-dirs, all opened under the agent's --netns-root. Refused: anything else (`..`,
// relative, other directories), a path whose directory resolves outside --netns-root (a symlinked
// directory), a symlink where the runtime puts a bind-mounted nsfs file, a file that is not a
// network namespace (the addon checks NS_GET_NSTYPE), the agent's own namespace and the host's
// (`<proc-dir>/1/ns/net`): redirecting either would capture the node.
import { realpathSync, statSync } from 'node:fs';
import { posix } from 'node:path';
import { hasErrorCode } from '../addon/errors.js';
import { netnsPathProblem } from '../cni/fields.js';
import type { NetAddon, NetnsHandle, NetnsIdentity } from '../addon/net-addon.js';

/** containerd's CRI plugin keeps pod netns here, under its state dir, with `netns_mounts_under_state_dir = true`. */
const CRI_STATE_NETNS = 'io.containerd.grpc.v1.cri/netns';

/** Where the runtimes Istio ambient runs on create pod network namespaces. */
export const RUNTIME_NETNS_DIRS: readonly string[] = [
  // containerd (default), CRI-O, k3s, RKE2, microk8s: `ip netns`-style bind mounts.
  '/var/run/netns',
  '/run/netns',
  // Docker's libnetwork sandboxes (cri-dockerd's docker networking, minikube's docker driver).
  '/var/run/docker/netns',
  '/run/docker/netns',
  // containerd with `netns_mounts_under_state_dir = true`: <state>/io.containerd.grpc.v1.cri/netns,
  // for the state dirs of stock containerd, k3s and RKE2 (shared), and microk8s.
  `/run/containerd/${CRI_STATE_NETNS}`,
  `/var/run/containerd/${CRI_STATE_NETNS}`,
  `/run/k3s/containerd/${CRI_STATE_NETNS}`,
  `/var/snap/microk8s/common/run/containerd/${CRI_STATE_NETNS}`,
];
const PROC_NETNS = /^\/proc\/[1-9][0-9]{0,9}\/ns\/net$/;

/** The netns path is not one the agent will open (never retried: the same path fails again). */
export class NetnsPathError extends Error {
  readonly code = 'EBADNETNS';
}

/** Why `dir` cannot be an extra netns directory (--netns-dirs), or undefined. */
export function netnsDirProblem(dir: string): string | undefined {
  const problem = netnsPathProblem(dir);
  if (problem) return problem;
  if (posix.normalize(dir) !== dir || dir.endsWith('/')) return 'not a normalized path (., .., //, trailing /)';
  if (dir === '/proc' || dir.startsWith('/proc/') || dir === '/sys' || dir.startsWith('/sys/'))
    return 'a kernel filesystem, not a runtime netns directory';
  return undefined;
}

function inDirectory(path: string, dir: string): boolean {
  return path.startsWith(`${dir}/`) && !path.slice(dir.length + 1).includes('/');
}

/** Lexical checks of CNI_NETNS; returns the path to open under `netnsRoot`. */
export function podNetnsLocation(netnsRoot: string, runtimePath: string, extraDirs: readonly string[] = []): string {
  const refuse = (why: string): never => {
    throw new NetnsPathError(`refusing netns path ${JSON.stringify(runtimePath.slice(0, 200))}: ${why}`);
  };
  const problem = netnsPathProblem(runtimePath); // absolute, no NUL, PATH_MAX, no ".."
  if (problem) refuse(problem);
  if (posix.normalize(runtimePath) !== runtimePath || runtimePath.endsWith('/')) refuse('not a normalized path (., .., //)');
  const dirs = [...RUNTIME_NETNS_DIRS, ...extraDirs];
  if (!dirs.some((dir) => inDirectory(runtimePath, dir)) && !PROC_NETNS.test(runtimePath)) {
    refuse(
      `outside the runtime netns locations (${dirs.map((d) => `${d}/<name>`).join(', ')}, /proc/<pid>/ns/net; add a directory with --netns-dirs)`,
    );
  }
  return netnsRoot ? posix.join(netnsRoot, runtimePath) : runtimePath;
}

/** The namespace the agent itself runs in (the JS thread never changes it). */
export function ownNetns(path = '/proc/self/ns/net'): NetnsIdentity | undefined {
  try {
    const st = statSync(path);
    return { ino: st.ino, dev: st.dev };
  } catch {
    return undefined; // PID 1's netns may be unreadable (then only the agent's own is refused)
  }
}

export interface PodNetnsOpenerOptions {
  /** --netns-dirs: directories accepted besides RUNTIME_NETNS_DIRS. */
  extraDirs?: readonly string[];
  /** --proc-dir: the host's netns is `<procDir>/1/ns/net`. */
  procDir?: string;
  /** The agent's own netns (tests); found in /proc/self by default. */
  own?: NetnsIdentity | undefined;
  /** The node's namespace when it is not the agent's own (ALLOW_SWITCH_TO_HOST_NS). */
  host?: NetnsIdentity;
}

export class PodNetnsOpener {
  readonly #refused: Array<{ id: NetnsIdentity; what: string }> = [];
  readonly #extraDirs: readonly string[];
  readonly #root: string | undefined;

  constructor(
    private readonly addon: NetAddon,
    private readonly netnsRoot: string,
    options: PodNetnsOpenerOptions = {},
  ) {
    this.#extraDirs = options.extraDirs ?? [];
    const own = 'own' in options ? options.own : ownNetns();
    if (own) this.#refused.push({ id: own, what: "the agent's own (the host's) network namespace" });
    const host = options.procDir ? ownNetns(posix.join(options.procDir, '1/ns/net')) : undefined;
    if (host) this.#refused.push({ id: host, what: "the host's network namespace (PID 1's)" });
    // The namespace the agent switched to for its host side (ALLOW_SWITCH_TO_HOST_NS, istio#55139).
    if (options.host) this.#refused.push({ id: options.host, what: "the node's (host) network namespace" });
    // A root that does not resolve (yet) is compared as written: stricter, never skipped.
    this.#root = netnsRoot && netnsRoot !== '/' ? (realDirectory(netnsRoot) ?? posix.resolve(netnsRoot)) : undefined;
  }

  /** Opens the pod netns or throws NetnsPathError / the addon's ENOENT or EINVAL error. */
  open(runtimePath: string): NetnsHandle {
    const path = podNetnsLocation(this.netnsRoot, runtimePath, this.#extraDirs);
    const bindMounted = !PROC_NETNS.test(runtimePath);
    let handle: NetnsHandle;
    try {
      handle = bindMounted ? this.#openBindMounted(path) : this.addon.openNetns(path);
    } catch (err) {
      if (hasErrorCode(err, 'ENOENT')) throw new Error(`pod netns ${path} does not exist (the sandbox is gone?)`, { cause: err });
      if (bindMounted && hasErrorCode(err, 'ELOOP')) {
        throw new NetnsPathError(`refusing netns path ${path}: a symlink (runtimes bind-mount the namespace there)`, { cause: err });
      }
      throw err;
    }
    const refused = this.#refused.find(({ id }) => handle.ino === id.ino && handle.dev === id.dev);
    if (refused) {
      handle.close();
      throw new NetnsPathError(`refusing netns path ${path}: it is ${refused.what}`);
    }
    return handle;
  }

  /**
   * Runtimes bind-mount the nsfs file into a real directory under the root. The addon opens the
   * file in the directory it resolved (no link followed in the last step) and says where that
   * directory really is: outside the root, the handle is closed and the path refused. One call,
   * so a directory swapped for a link after a check cannot redirect it.
   */
  #openBindMounted(path: string): NetnsHandle {
    const { handle, directory } = this.addon.openNetnsInDirectory(posix.dirname(path), posix.basename(path));
    if (this.#root !== undefined && directory !== this.#root && !directory.startsWith(`${this.#root}/`)) {
      handle.close();
      throw new NetnsPathError(
        `refusing netns path ${path}: its directory resolves to ${directory}, outside --netns-root ${this.netnsRoot}`,
      );
    }
    return handle;
  }
}

/** realpath(3) itself (one call, not Node's component-by-component lstat walk in JS), once at start. */
function realDirectory(path: string): string | undefined {
  try {
    return realpathSync.native(path);
  } catch {
    return undefined; // missing: the open reports it
  }
}
