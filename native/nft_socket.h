// One NETLINK_NETFILTER socket for the raw nfnetlink requests (table delete, generation, the
// prebuilt rules batch), bound to the namespace of the thread that opens it.
#pragma once

#include <errno.h>
#include <libmnl/libmnl.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "sys_error.h"

namespace ana {

class NetfilterSocket {
 public:
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
    // A kernel that never answers must not hold a netns thread forever.
    timeval tv{kReplyTimeoutSec, 0};
    if (setsockopt(mnl_socket_get_fd(sock_), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0) return Fail(err, "setsockopt");
    return true;
  }

  mnl_socket* get() const { return sock_; }

 private:
  static constexpr int kReplyTimeoutSec = 10;

  static bool Fail(SysError* err, const char* syscall) {
    *err = SysError::FromErrno(errno, syscall, "NETLINK_NETFILTER");
    return false;
  }

  mnl_socket* sock_ = nullptr;
};

// NFT_MSG_GETGEN on an open socket (see NftGeneration in nft_tables.h).
bool ReadNftGeneration(mnl_socket* sock, uint32_t* generation, SysError* err);

}  // namespace ana
