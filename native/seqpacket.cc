#include "seqpacket.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

namespace ana {
namespace {

bool FillAddress(const std::string& path, sockaddr_un* addr, SysError* err) {
  memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr->sun_path)) {
    *err = SysError::FromErrno(ENAMETOOLONG, "bind", path, "socket path must be 1-107 bytes");
    return false;
  }
  memcpy(addr->sun_path, path.c_str(), path.size());
  return true;
}

bool MakeParentDirs(const std::string& path, unsigned mode, SysError* err) {
  for (size_t pos = path.find('/', 1); pos != std::string::npos; pos = path.find('/', pos + 1)) {
    std::string dir = path.substr(0, pos);
    if (mkdir(dir.c_str(), mode) != 0 && errno != EEXIST) {
      *err = SysError::FromErrno(errno, "mkdir", dir);
      return false;
    }
  }
  return true;
}

// A stale socket from a previous agent is removed; any other kind of file is left alone.
bool RemoveStaleSocket(const std::string& path, SysError* err) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return true;
  if (!S_ISSOCK(st.st_mode)) {
    *err = SysError::FromErrno(EEXIST, "bind", path, "exists and is not a socket");
    return false;
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    *err = SysError::FromErrno(errno, "unlink", path);
    return false;
  }
  return true;
}

int NewSocket(SysError* err) {
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) *err = SysError::FromErrno(errno, "socket", "AF_UNIX SOCK_SEQPACKET");
  return fd;
}

}  // namespace

int SeqpacketListen(const ListenOptions& opts, SysError* err) {
  sockaddr_un addr;
  if (!FillAddress(opts.path, &addr, err) || !MakeParentDirs(opts.path, opts.dir_mode, err) ||
      !RemoveStaleSocket(opts.path, err)) {
    return -1;
  }
  int fd = NewSocket(err);
  if (fd < 0) return -1;
  const char* failed = nullptr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    failed = "bind";
  else if (chmod(opts.path.c_str(), opts.mode) != 0)
    failed = "chmod";
  else if (listen(fd, opts.backlog) != 0)
    failed = "listen";
  if (failed) {
    *err = SysError::FromErrno(errno, failed, opts.path);
    close(fd);
    return -1;
  }
  return fd;
}

int SeqpacketAccept(int listen_fd, SysError* err) {
  int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd >= 0) return fd;
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED || errno == EINTR) return -2;
  *err = SysError::FromErrno(errno, "accept4");
  return -1;
}

int SeqpacketConnect(const std::string& path, SysError* err) {
  sockaddr_un addr;
  if (!FillAddress(path, &addr, err)) return -1;
  int fd = NewSocket(err);
  if (fd < 0) return -1;
  // Unix-socket connects complete (or fail) at once; EAGAIN means the backlog is full.
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    *err = SysError::FromErrno(errno, "connect", path);
    close(fd);
    return -1;
  }
  return fd;
}

int SeqpacketSend(int fd, const unsigned char* data, size_t len, int pass_fd, SysError* err) {
  iovec iov{const_cast<unsigned char*>(data), len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (pass_fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cmsg), &pass_fd, sizeof(int));
  }
  ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n >= 0) return 1;
  if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
  *err = SysError::FromErrno(errno, "sendmsg");
  return -1;
}

int SeqpacketRecv(int fd, Datagram* out, SysError* err) {
  unsigned char buf[kZdsMaxDatagram];
  // Room for a few fds: a peer that sends any is misbehaving, and every one must be closed.
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
  iovec iov{buf, sizeof(buf)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n = recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    *err = SysError::FromErrno(errno, "recvmsg");
    return -1;
  }
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; i++) {
      int received;
      memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      out->fds.push_back(received);
    }
  }
  out->data.assign(buf, buf + (n < static_cast<ssize_t>(sizeof(buf)) ? n : sizeof(buf)));
  out->truncated = (msg.msg_flags & MSG_TRUNC) != 0;
  out->control_truncated = (msg.msg_flags & MSG_CTRUNC) != 0;
  out->eof = n == 0;
  return 1;
}

}  // namespace ana
