// A NETLINK_NETFILTER socket bound in the calling thread's network namespace, with a reply
// timeout so that a kernel that never answers cannot hold a netns thread forever. Shared by the
// raw nfnetlink requests: table delete, generation, the prebuilt rules batch, ip sets.
#pragma once

#include <errno.h>
#include <libmnl/libmnl.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "sys_error.h"

namespace ana {

class NetfilterSocket {
 public:
  static constexpr int kReplyTimeoutSec = 10;

  NetfilterSocket() = default;
  NetfilterSocket(const NetfilterSocket&) = delete;
  NetfilterSocket& operator=(const NetfilterSocket&) = delete;
  ~NetfilterSocket() {
    if (sock_) mnl_socket_close(sock_);
  }

  bool Open(SysError* err) {
    sock_ = mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC);
    if (!sock_) return Fail(err, "socket");
    if (mnl_socket_bind(sock_, 0, MNL_SOCKET_AUTOPID) < 0) return Fail(err, "bind");
    timeval tv{kReplyTimeoutSec, 0};
    if (setsockopt(mnl_socket_get_fd(sock_), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
      return Fail(err, "setsockopt");
    return true;
  }

  mnl_socket* get() const { return sock_; }
  unsigned port_id() const { return mnl_socket_get_portid(sock_); }

 private:
  static bool Fail(SysError* err, const char* syscall) {
    *err = SysError::FromErrno(errno, syscall, "NETLINK_NETFILTER");
    return false;
  }

  mnl_socket* sock_ = nullptr;
};

}  // namespace ana
