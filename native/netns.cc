#include "netns.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/nsfs.h>
#include <linux/sockios.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ana {

namespace {

// The checks every opened namespace file passes; closes `fd` and returns -1 when one fails.
int CheckedNetnsFd(int fd, const std::string& path, NetnsId* id, SysError* err) {
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

// O_NONBLOCK: a hostile path naming a FIFO must not block the JS thread in open().
constexpr int kNetnsOpenFlags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;

bool IsSingleComponent(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// The path the kernel holds for an open directory (what realpath(3) would have said of it then).
bool RealPathOfFd(int fd, std::string* out, SysError* err) {
  std::string link = "/proc/self/fd/" + std::to_string(fd);
  char buf[PATH_MAX];
  ssize_t n = readlink(link.c_str(), buf, sizeof buf);
  if (n < 0 || static_cast<size_t>(n) >= sizeof buf) {
    *err = SysError::FromErrno(n < 0 ? errno : ENAMETOOLONG, "readlink", link);
    return false;
  }
  out->assign(buf, static_cast<size_t>(n));
  return true;
}

}  // namespace

int OpenNetns(const std::string& path, NetnsId* id, SysError* err) {
  int fd = open(path.c_str(), kNetnsOpenFlags);
  if (fd < 0) {
    *err = SysError::FromErrno(errno, "open", path);
    return -1;
  }
  return CheckedNetnsFd(fd, path, id, err);
}

int OpenNetnsInDirectory(const std::string& dir, const std::string& name, NetnsId* id, std::string* dir_real,
                         SysError* err) {
  std::string path = dir + "/" + name;
  if (!IsSingleComponent(name)) {
    *err = SysError::FromErrno(EINVAL, "openat", path, "the file name must be one path component");
    return -1;
  }
  int dir_fd = open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) {
    *err = SysError::FromErrno(errno, "open", dir);
    return -1;
  }
  int fd = -1;
  if (RealPathOfFd(dir_fd, dir_real, err)) {
    fd = openat(dir_fd, name.c_str(), kNetnsOpenFlags | O_NOFOLLOW);
    if (fd < 0) *err = SysError::FromErrno(errno, "openat", path);
  }
  close(dir_fd);
  return fd < 0 ? -1 : CheckedNetnsFd(fd, path, id, err);
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
