#include "netns.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/nsfs.h>
#include <linux/sockios.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ana {

int OpenNetns(const std::string& path, bool no_follow, NetnsId* id, SysError* err) {
  // O_NONBLOCK: a hostile path naming a FIFO must not block the JS thread in open().
  int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | (no_follow ? O_NOFOLLOW : 0);
  int fd = open(path.c_str(), flags);
  if (fd < 0) {
    *err = SysError::FromErrno(errno, "open", path);
    return -1;
  }
  int type = ioctl(fd, NS_GET_NSTYPE);
  if (type != CLONE_NEWNET) {
    // ENOTTY: not a namespace file at all; a namespace of another type is just as wrong.
    *err = SysError::FromErrno(EINVAL, "ioctl", path, "not a network namespace");
    close(fd);
    return -1;
  }
  if (!StatNetnsFd(fd, id, err)) {
    err->path = path;
    close(fd);
    return -1;
  }
  return fd;
}

namespace {

// 1 when `fd` is a socket, 0 when not, -1 (with *err) when it cannot be looked at.
int IsSocket(int fd, SysError* err) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    *err = SysError::FromErrno(errno, "fstat");
    return -1;
  }
  return S_ISSOCK(st.st_mode) ? 1 : 0;
}

int NamespaceOfSocket(int socket, SysError* err) {
  int fd = ioctl(socket, SIOCGSKNS);
  if (fd < 0) *err = SysError::FromErrno(errno, "ioctl", "", "SIOCGSKNS: the namespace of a socket");
  return fd;
}

}  // namespace

int NetnsFdOf(int anchor, SysError* err) {
  int socket = IsSocket(anchor, err);
  if (socket < 0) return -1;
  if (socket) return NamespaceOfSocket(anchor, err);
  int fd = fcntl(anchor, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) *err = SysError::FromErrno(errno, "fcntl", "F_DUPFD_CLOEXEC");
  return fd;
}

int PassableNetnsFd(int fd, int* made, SysError* err) {
  int socket = IsSocket(fd, err);
  if (socket <= 0) return socket < 0 ? -1 : fd;
  *made = NamespaceOfSocket(fd, err);
  return *made;
}

bool StatNetnsFd(int fd, NetnsId* id, SysError* err) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    *err = SysError::FromErrno(errno, "fstat");
    return false;
  }
  id->ino = st.st_ino;
  id->dev = st.st_dev;
  return true;
}

bool CurrentThreadNetns(NetnsId* id, SysError* err) {
  struct stat st;
  if (stat("/proc/thread-self/ns/net", &st) != 0) {
    *err = SysError::FromErrno(errno, "stat", "/proc/thread-self/ns/net");
    return false;
  }
  id->ino = st.st_ino;
  id->dev = st.st_dev;
  return true;
}

bool EnterNetns(int fd, SysError* err) {
  if (setns(fd, CLONE_NEWNET) != 0) {
    *err = SysError::FromErrno(errno, "setns");
    return false;
  }
  return true;
}

bool EnterFreshNetns(SysError* err) {
  if (unshare(CLONE_NEWNET) != 0) {
    *err = SysError::FromErrno(errno, "unshare");
    return false;
  }
  return true;
}

}  // namespace ana
