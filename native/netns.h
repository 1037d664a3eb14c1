// Opening network namespace files and switching the calling thread between them.
#pragma once

#include <string>

#include "sys_error.h"

namespace ana {

struct NetnsId {
  unsigned long long ino = 0;
  unsigned long long dev = 0;
};

// Opens a netns file (for example /proc/<pid>/ns/net, following the link) with O_CLOEXEC and
// checks, with NS_GET_NSTYPE, that it really is a network namespace. Returns the fd or -1.
int OpenNetns(const std::string& path, NetnsId* id, SysError* err);

// Opens the netns file `name` (one path component) inside the directory `dir`, the way runtimes
// lay them out (a bind mount in a directory): the directory is opened first (O_PATH, symlinks in
// `dir` followed) and its real path read back from that fd into `*dir_real`, then the file is
// opened relative to the same fd with O_NOFOLLOW (a symlink fails with ELOOP). The caller checks
// `*dir_real`; the file came from exactly that directory, so nothing swapped in between a check
// and the open can move it elsewhere. Returns the fd or -1.
int OpenNetnsInDirectory(const std::string& dir, const std::string& name, NetnsId* id, std::string* dir_real,
                         SysError* err);

bool StatNetnsFd(int fd, NetnsId* id, SysError* err);

// A new fd (O_CLOEXEC) of the network namespace `anchor` refers to: a namespace file is
// duplicated; a socket gives its own namespace (SIOCGSKNS, which needs CAP_NET_ADMIN there). A
// pod's namespace may be held by a netlink watch socket opened inside it instead of a namespace
// file: one fd less per pod. Returns the fd or -1.
int NetnsFdOf(int anchor, SysError* err);

// The fd to pass over SCM_RIGHTS for a pod's namespace: `fd` itself when it is a namespace file,
// else a namespace fd made from the socket (stored in `*made` too: the caller closes it after
// the send). Returns the fd to pass or -1.
int PassableNetnsFd(int fd, int* made, SysError* err);

// The network namespace of the calling thread (not the process: threads can differ).
bool CurrentThreadNetns(NetnsId* id, SysError* err);

// setns(fd, CLONE_NEWNET) for the calling thread.
bool EnterNetns(int fd, SysError* err);

// unshare(CLONE_NEWNET): moves the calling thread into a brand-new, private namespace.
bool EnterFreshNetns(SysError* err);

}  // namespace ana
