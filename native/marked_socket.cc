#include "marked_socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter_ipv4.h>
#include <linux/netfilter_ipv6/ip6_tables.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace ana {
namespace {

bool FillAddress(int family, const std::string& text, uint16_t port, sockaddr_storage* ss, socklen_t* len,
                 SysError* err) {
  std::memset(ss, 0, sizeof(*ss));
  if (family == AF_INET6) {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(ss);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(port);
    *len = sizeof(*sin6);
    if (inet_pton(AF_INET6, text.c_str(), &sin6->sin6_addr) == 1) return true;
  } else {
    auto* sin = reinterpret_cast<sockaddr_in*>(ss);
    sin->sin_family = AF_INET;
    sin->sin_port = htons(port);
    *len = sizeof(*sin);
    if (inet_pton(AF_INET, text.c_str(), &sin->sin_addr) == 1) return true;
  }
  *err = SysError::FromErrno(EINVAL, "inet_pton", text);
  return false;
}

bool ConnectWithDeadline(int fd, const SocketSpec& spec, SysError* err) {
  sockaddr_storage ss;
  socklen_t len;
  std::string where = spec.connect_address + ":" + std::to_string(spec.connect_port);
  if (!FillAddress(spec.family, spec.connect_address, spec.connect_port, &ss, &len, err)) {
    return false;
  }
  if (connect(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0) return true;
  if (errno != EINPROGRESS) {
    *err = SysError::FromErrno(errno, "connect", where);
    return false;
  }
  pollfd pfd{fd, POLLOUT, 0};
  int ready = poll(&pfd, 1, spec.connect_timeout_ms);
  if (ready == 0) {
    *err = SysError::FromErrno(ETIMEDOUT, "connect", where);
    return false;
  }
  int soerr = 0;
  socklen_t soerr_len = sizeof(soerr);
  if (ready < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &soerr_len) != 0 || soerr != 0) {
    *err = SysError::FromErrno(ready < 0 ? errno : soerr, "connect", where);
    return false;
  }
  return true;
}

bool SetFlag(int fd, int level, int name, const char* what, SysError* err) {
  int one = 1;
  if (setsockopt(fd, level, name, &one, sizeof(one)) == 0) return true;
  *err = SysError::FromErrno(errno, "setsockopt", what);
  return false;
}

bool MakeTransparent(int fd, int family, SysError* err) {
  if (family == AF_INET6) {
    return SetFlag(fd, SOL_IPV6, IPV6_TRANSPARENT, "IPV6_TRANSPARENT", err) &&
           SetFlag(fd, SOL_IPV6, IPV6_FREEBIND, "IPV6_FREEBIND", err);
  }
  return SetFlag(fd, SOL_IP, IP_TRANSPARENT, "IP_TRANSPARENT", err) &&
         SetFlag(fd, SOL_IP, IP_FREEBIND, "IP_FREEBIND", err);
}

bool Configure(int fd, const SocketSpec& spec, SysError* err) {
  if (spec.transparent && !MakeTransparent(fd, spec.family, err)) return false;
  if (spec.reuse_port && !SetFlag(fd, SOL_SOCKET, SO_REUSEPORT, "SO_REUSEPORT", err)) return false;
  if (spec.set_mark && setsockopt(fd, SOL_SOCKET, SO_MARK, &spec.mark, sizeof(spec.mark)) != 0) {
    *err = SysError::FromErrno(errno, "setsockopt", "SO_MARK");
    return false;
  }
  if (!spec.bind_address.empty()) {
    // TCP only: on UDP, SO_REUSEADDR would let two sockets share a port silently.
    if (spec.type == SOCK_STREAM && !SetFlag(fd, SOL_SOCKET, SO_REUSEADDR, "SO_REUSEADDR", err)) return false;
    sockaddr_storage ss;
    socklen_t len;
    if (!FillAddress(spec.family, spec.bind_address, spec.bind_port, &ss, &len, err)) return false;
    if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
      *err = SysError::FromErrno(errno, "bind", spec.bind_address + ":" + std::to_string(spec.bind_port));
      return false;
    }
  }
  if (spec.listen_backlog >= 0 && listen(fd, spec.listen_backlog) != 0) {
    *err = SysError::FromErrno(errno, "listen");
    return false;
  }
  if (!spec.connect_address.empty()) return ConnectWithDeadline(fd, spec, err);
  return true;
}

}  // namespace

bool OriginalDestination(int fd, SocketAddress* out, SysError* err) {
  sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  char text[INET6_ADDRSTRLEN] = {0};
  if (getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &ss, &len) == 0) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &sin->sin_addr, text, sizeof(text));
    out->address = text;
    out->port = ntohs(sin->sin_port);
    return true;
  }
  len = sizeof(ss);
  if (getsockopt(fd, SOL_IPV6, IP6T_SO_ORIGINAL_DST, &ss, &len) == 0) {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &sin6->sin6_addr, text, sizeof(text));
    out->address = text;
    out->port = ntohs(sin6->sin6_port);
    return true;
  }
  *err = SysError::FromErrno(errno, "getsockopt", "SO_ORIGINAL_DST");
  return false;
}

int CreateSocket(const SocketSpec& spec, SysError* err) {
  int fd = socket(spec.family, spec.type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    *err = SysError::FromErrno(errno, "socket");
    return -1;
  }
  if (!Configure(fd, spec, err)) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace ana
