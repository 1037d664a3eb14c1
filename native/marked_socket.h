// Sockets created inside a network namespace (a socket keeps the namespace it was born in),
// optionally with SO_MARK: ztunnel marks its own sockets 0x539 so the in-pod rules let them by.
#pragma once

#include <stdint.h>

#include <string>

#include "sys_error.h"

namespace ana {

struct SocketSpec {
  int family = 0;  // AF_INET or AF_INET6
  int type = 0;    // SOCK_STREAM or SOCK_DGRAM
  bool set_mark = false;
  uint32_t mark = 0;
  std::string bind_address;  // empty: no bind
  uint16_t bind_port = 0;
  int listen_backlog = -1;      // < 0: no listen
  std::string connect_address;  // empty: no connect
  uint16_t connect_port = 0;
  int connect_timeout_ms = 5000;
  // IP_TRANSPARENT + IP_FREEBIND (or the IPv6 pair): bind to a foreign address, as ztunnel does
  // to connect to the app from the original client IP.
  bool transparent = false;
  bool reuse_port = false;  // SO_REUSEPORT, as ztunnel's listeners
};

struct SocketAddress {
  std::string address;
  uint16_t port = 0;
};

// The destination a REDIRECTed connection was originally sent to (SO_ORIGINAL_DST, or
// IP6T_SO_ORIGINAL_DST for IPv6). Returns false with *err set when there is none.
bool OriginalDestination(int fd, SocketAddress* out, SysError* err);

// Returns a non-blocking, close-on-exec fd, or -1 with *err set.
int CreateSocket(const SocketSpec& spec, SysError* err);

}  // namespace ana
