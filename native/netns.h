// Opening network namespace files and switching the calling thread between them.
#pragma once

#include <string>

#include "sys_error.h"

namespace ana {

struct NetnsId {
  unsigned long long ino = 0;
  unsigned long long dev = 0;
};

// Opens a netns file (for example /var/run/netns/x or /proc/<pid>/ns/net) with O_CLOEXEC and
// checks, with NS_GET_NSTYPE, that it really is a network namespace. Returns the fd or -1.
// `no_follow`: a symlink as the last component fails with ELOOP (O_NOFOLLOW), decided by the same
// open that yields the fd, so the file cannot be swapped for a link between a check and the open.
// /proc/<pid>/ns/net is a link itself and is opened with no_follow false.
int OpenNetns(const std::string& path, bool no_follow, NetnsId* id, SysError* err);

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
