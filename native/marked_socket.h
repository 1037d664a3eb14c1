// Sockets created inside a network namespace (a socket keeps the namespace it was born in),
// optionally with SO_MARK: ztunnel marks its own sockets 0x539 so the in-pod rules let them by.
#pragma once

#include <stdint.h>

#include <string>

#include "sys_error.h"

namespace ana {

struct SocketSpec {
  int family = 0;        // AF_INET or AF_INET6
  int type = 0;          // SOCK_STREAM or SOCK_DGRAM
  bool set_mark = false;
  uint32_t mark = 0;
  std::string bind_address;  // empty: no bind
  uint16_t bind_port = 0;
  int listen_backlog = -1;   // < 0: no listen
  std::string connect_address;  // empty: no connect
  uint16_t connect_port = 0;
  int connect_timeout_ms = 5000;
};

// Returns a non-blocking, close-on-exec fd, or -1 with *err set.
int CreateSocket(const SocketSpec& spec, SysError* err);

}  // namespace ana
