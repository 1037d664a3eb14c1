#include "listeners.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

namespace zds_peer {
namespace {

constexpr uint32_t kInpodMark = 0x539;
constexpr int kBacklog = 128;

struct Listener {
  int port;
  int type;  // SOCK_STREAM / SOCK_DGRAM
  bool transparent;
  bool loopback;  // DNS binds 127.0.0.1, the proxy ports every address
};

// ztunnel's order: DNS first, then inbound, HBONE, outbound.
constexpr Listener kListeners[] = {
    {15053, SOCK_DGRAM, false, true},  {15053, SOCK_STREAM, false, true}, {15006, SOCK_STREAM, true, false},
    {15008, SOCK_STREAM, true, false}, {15001, SOCK_STREAM, true, false},
};

std::string Errno(const char* what, int port) {
  return std::string(what) + " :" + std::to_string(port) + ": " + strerror(errno);
}

int MakeListener(const Listener& l, std::string* error) {
  int fd = socket(AF_INET, l.type | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = Errno("socket", l.port);
    return -1;
  }
  int one = 1;
  uint32_t mark = kInpodMark;
  bool ok = setsockopt(fd, SOL_SOCKET, SO_MARK, &mark, sizeof(mark)) == 0 &&
            setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) == 0 &&
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
            (!l.transparent || setsockopt(fd, SOL_IP, IP_TRANSPARENT, &one, sizeof(one)) == 0);
  if (!ok) {
    *error = Errno("setsockopt", l.port);
    close(fd);
    return -1;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(l.port));
  addr.sin_addr.s_addr = htonl(l.loopback ? INADDR_LOOPBACK : INADDR_ANY);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      (l.type == SOCK_STREAM && listen(fd, kBacklog) != 0)) {
    *error = Errno(l.type == SOCK_STREAM ? "bind/listen" : "bind", l.port);
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

void CloseAll(PodSockets* sockets) {
  for (int fd : sockets->fds) close(fd);
  sockets->fds.clear();
}

int OpenHomeNetns() {
  int fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    perror("zds-peer: open /proc/thread-self/ns/net");
    exit(1);
  }
  return fd;
}

bool BindListeners(int netns_fd, int home_fd, PodSockets* out, std::string* error) {
  if (setns(netns_fd, CLONE_NEWNET) != 0) {
    *error = std::string("setns: ") + strerror(errno);
    return false;
  }
  bool ok = true;
  for (const Listener& l : kListeners) {
    int fd = MakeListener(l, error);
    if (fd < 0) {
      ok = false;
      break;
    }
    out->fds.push_back(fd);
  }
  if (setns(home_fd, CLONE_NEWNET) != 0) {
    perror("zds-peer: setns home");
    abort();
  }
  if (!ok) CloseAll(out);
  return ok;
}

}  // namespace zds_peer
