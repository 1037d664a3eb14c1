#include "netlink_watch.h"

#include <errno.h>
#include <libmnl/libmnl.h>
#include <linux/fib_rules.h>
#include <linux/rtnetlink.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <initializer_list>

namespace ana {
namespace {

// Small on purpose: a watcher needs to know *that* something changed, not every message, and an
// overflow is reported as `overrun` (a full check) instead of costing memory per pod.
constexpr int kRecvBufBytes = 32 * 1024;

bool Subscribe(int fd, std::initializer_list<int> groups, SysError* err) {
  for (int group : groups) {
    if (setsockopt(fd, SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, &group, sizeof(group)) < 0) {
      *err = SysError::FromErrno(errno, "setsockopt", "NETLINK_ADD_MEMBERSHIP", "group " + std::to_string(group));
      return false;
    }
  }
  return true;
}

// The table a route or rule message is about: RTA_TABLE / FRA_TABLE when present (tables above
// 255), else the 8-bit header field.
uint32_t TableOf(const nlmsghdr* m, size_t header_len, uint8_t header_table) {
  static_assert(static_cast<int>(RTA_TABLE) == static_cast<int>(FRA_TABLE), "one attribute number for both");
  auto* nlh = const_cast<nlmsghdr*>(m);  // libmnl's iteration macros take non-const pointers
  for (auto* attr = static_cast<nlattr*>(mnl_nlmsg_get_payload_offset(nlh, header_len));
       mnl_attr_ok(attr, static_cast<char*>(mnl_nlmsg_get_payload_tail(nlh)) - reinterpret_cast<char*>(attr));
       attr = mnl_attr_next(attr)) {
    if (mnl_attr_get_type(attr) == RTA_TABLE && mnl_attr_get_payload_len(attr) >= sizeof(uint32_t)) {
      return mnl_attr_get_u32(attr);
    }
  }
  return header_table;
}

void Count(const nlmsghdr* m, uint32_t table, WatchEvents* out) {
  switch (m->nlmsg_type) {
    case RTM_NEWROUTE:
    case RTM_DELROUTE:
      if (m->nlmsg_len >= NLMSG_LENGTH(sizeof(rtmsg))) {
        auto* rt = static_cast<const rtmsg*>(NLMSG_DATA(m));
        if (TableOf(m, sizeof(rtmsg), rt->rtm_table) == table) out->routes++;
      }
      break;
    case RTM_NEWRULE:
    case RTM_DELRULE:
      if (m->nlmsg_len >= NLMSG_LENGTH(sizeof(fib_rule_hdr))) {
        auto* fr = static_cast<const fib_rule_hdr*>(NLMSG_DATA(m));
        if (TableOf(m, sizeof(fib_rule_hdr), fr->table) == table) out->rules++;
      }
      break;
    case RTM_NEWADDR:
    case RTM_DELADDR: out->addresses++; break;
    default: break;
  }
}

}  // namespace

int OpenNetlinkWatch(WatchKind kind, SysError* err) {
  int protocol = kind == WatchKind::kNftables ? NETLINK_NETFILTER : NETLINK_ROUTE;
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, protocol);
  if (fd < 0) {
    *err = SysError::FromErrno(errno, "socket", kind == WatchKind::kNftables ? "NETLINK_NETFILTER" : "NETLINK_ROUTE");
    return -1;
  }
  int rcvbuf = kRecvBufBytes;
  sockaddr_nl addr{};
  addr.nl_family = AF_NETLINK;
  bool ok = setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)) == 0 &&
            bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  if (!ok) {
    *err = SysError::FromErrno(errno, "bind", "netlink watch");
  } else if (kind == WatchKind::kRouting) {
    ok = Subscribe(fd,
                   {RTNLGRP_IPV4_RULE, RTNLGRP_IPV6_RULE, RTNLGRP_IPV4_ROUTE, RTNLGRP_IPV6_ROUTE, RTNLGRP_IPV4_IFADDR,
                    RTNLGRP_IPV6_IFADDR},
                   err);
  }
  if (!ok) {
    close(fd);
    return -1;
  }
  return fd;
}

bool DrainNetlinkWatch(int fd, uint32_t table, WatchEvents* out, SysError* err) {
  alignas(nlmsghdr) char buf[16384];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      if (errno == ENOBUFS) {
        out->overrun = true;  // the kernel dropped messages; the socket stays usable
        continue;
      }
      *err = SysError::FromErrno(errno, "recv", "netlink watch");
      return false;
    }
    if (n == 0) return true;
    int len = static_cast<int>(n);
    for (auto* m = reinterpret_cast<const nlmsghdr*>(buf); mnl_nlmsg_ok(m, len); m = mnl_nlmsg_next(m, &len)) {
      Count(m, table, out);
    }
  }
}

}  // namespace ana
