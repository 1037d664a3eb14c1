#include "rtnl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <libmnl/libmnl.h>
#include <linux/fib_rules.h>
#include <linux/if_addr.h>
#include <linux/if_link.h>
#include <linux/ipv6.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/socket.h>
#include <time.h>

#include <vector>

namespace ana {
namespace {

constexpr size_t kBufSize = 32768;  // MNL_SOCKET_BUFFER_SIZE is page-sized; dumps need room

// Every namespace's loopback device is registered first, with the kernel's fixed
// LOOPBACK_IFINDEX (include/net/flow.h): no SIOCGIFINDEX round trip (a socket, an ioctl and a
// close) for the device every in-pod step is about.
constexpr int kLoopbackIfindex = 1;

int Ifindex(const std::string& dev, SysError* err) {
  if (dev == "lo") return kLoopbackIfindex;
  unsigned idx = if_nametoindex(dev.c_str());
  if (idx == 0) *err = SysError::FromErrno(errno ? errno : ENODEV, "if_nametoindex", dev);
  return static_cast<int>(idx);
}

std::string AddressText(int family, const void* addr) {
  char buf[INET6_ADDRSTRLEN] = {0};
  inet_ntop(family, addr, buf, sizeof(buf));
  return buf;
}

// libmnl's mnl_attr_for_each macro does not compile as C++ (void* to const nlattr*).
template <typename F>
void ForEachAttr(const nlmsghdr* nlh, size_t header_len, F visit) {
  auto* attr = static_cast<const nlattr*>(mnl_nlmsg_get_payload_offset(nlh, header_len));
  auto* tail = static_cast<const char*>(mnl_nlmsg_get_payload_tail(nlh));
  while (mnl_attr_ok(attr, static_cast<int>(tail - reinterpret_cast<const char*>(attr)))) {
    visit(attr);
    attr = mnl_attr_next(attr);
  }
}

template <typename F>
void ForEachNested(const nlattr* nest, F visit) {
  auto* attr = static_cast<const nlattr*>(mnl_attr_get_payload(nest));
  int left = static_cast<int>(mnl_attr_get_payload_len(nest));
  while (mnl_attr_ok(attr, left)) {
    visit(attr);
    left -= static_cast<int>(MNL_ALIGN(attr->nla_len));
    attr = mnl_attr_next(attr);
  }
}

}  // namespace

bool RtnlIsGone(int kernel_errno) {
  return kernel_errno == ENOENT || kernel_errno == ESRCH || kernel_errno == EADDRNOTAVAIL;
}

nlmsghdr* PutFwmarkRuleMessage(char* buf, uint16_t type, uint16_t flags, const FwmarkRule& rule) {
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = type;
  nlh->nlmsg_flags = NLM_F_REQUEST | flags;
  auto* frh = static_cast<fib_rule_hdr*>(mnl_nlmsg_put_extra_header(nlh, sizeof(fib_rule_hdr)));
  frh->family = static_cast<uint8_t>(rule.family);
  frh->action = FR_ACT_TO_TBL;
  frh->table = rule.table < 256 ? static_cast<uint8_t>(rule.table) : static_cast<uint8_t>(RT_TABLE_UNSPEC);
  mnl_attr_put_u32(nlh, FRA_FWMARK, rule.mark);
  mnl_attr_put_u32(nlh, FRA_FWMASK, rule.mask);
  mnl_attr_put_u32(nlh, FRA_PRIORITY, rule.priority);
  mnl_attr_put_u32(nlh, FRA_TABLE, rule.table);
  return nlh;
}

nlmsghdr* PutLocalRouteMessage(char* buf, uint16_t type, uint16_t flags, int family, uint32_t table, int ifindex) {
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = type;
  nlh->nlmsg_flags = NLM_F_REQUEST | flags;
  auto* rtm = static_cast<rtmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(rtmsg)));
  rtm->rtm_family = static_cast<uint8_t>(family);
  rtm->rtm_dst_len = 0;
  rtm->rtm_table = table < 256 ? static_cast<uint8_t>(table) : static_cast<uint8_t>(RT_TABLE_UNSPEC);
  rtm->rtm_protocol = RTPROT_BOOT;
  rtm->rtm_scope = type == RTM_DELROUTE ? RT_SCOPE_NOWHERE : RT_SCOPE_HOST;
  rtm->rtm_type = RTN_LOCAL;
  mnl_attr_put_u32(nlh, RTA_TABLE, table);
  mnl_attr_put_u32(nlh, RTA_OIF, static_cast<uint32_t>(ifindex));
  return nlh;
}

int RtnlIfindex(const std::string& dev, SysError* err) { return Ifindex(dev, err); }

Rtnl::~Rtnl() {
  if (sock_) mnl_socket_close(sock_);
}

bool Rtnl::Open(SysError* err) {
  sock_ = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
  if (!sock_) {
    *err = SysError::FromErrno(errno, "socket", "NETLINK_ROUTE");
    return false;
  }
  if (mnl_socket_bind(sock_, 0, MNL_SOCKET_AUTOPID) < 0) {
    *err = SysError::FromErrno(errno, "bind", "NETLINK_ROUTE");
    return false;
  }
  // Strict checking makes the kernel filter route dumps by table instead of sending them all.
  int one = 1;
  mnl_socket_setsockopt(sock_, NETLINK_GET_STRICT_CHK, &one, sizeof(one));
  port_id_ = mnl_socket_get_portid(sock_);
  seq_ = static_cast<uint32_t>(time(nullptr));
  return true;
}

bool Rtnl::SendAndReceive(nlmsghdr* nlh, std::vector<char>* buf, ssize_t* n, SysError* err) {
  nlh->nlmsg_seq = ++seq_;
  if (mnl_socket_sendto(sock_, nlh, nlh->nlmsg_len) < 0) {
    *err = SysError::FromErrno(errno, "sendto", "NETLINK_ROUTE");
    return false;
  }
  buf->resize(kBufSize);
  *n = mnl_socket_recvfrom(sock_, buf->data(), buf->size());
  if (*n < 0) {
    *err = SysError::FromErrno(errno, "recvfrom", "NETLINK_ROUTE");
    return false;
  }
  return true;
}

bool Rtnl::Transact(nlmsghdr* nlh, int* kernel_errno, SysError* err) {
  nlh->nlmsg_flags |= NLM_F_ACK;
  std::vector<char> buf;
  ssize_t n = 0;
  if (!SendAndReceive(nlh, &buf, &n, err)) return false;
  errno = 0;
  int rc = mnl_cb_run(buf.data(), n, nlh->nlmsg_seq, port_id_, nullptr, nullptr);
  *kernel_errno = rc < 0 ? errno : 0;
  return true;
}

bool Rtnl::Dump(nlmsghdr* nlh, int (*cb)(const nlmsghdr*, void*), void* data, SysError* err) {
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  nlh->nlmsg_seq = ++seq_;
  if (mnl_socket_sendto(sock_, nlh, nlh->nlmsg_len) < 0) {
    *err = SysError::FromErrno(errno, "sendto", "NETLINK_ROUTE");
    return false;
  }
  std::vector<char> buf(kBufSize);
  for (;;) {
    ssize_t n = mnl_socket_recvfrom(sock_, buf.data(), buf.size());
    if (n < 0) {
      *err = SysError::FromErrno(errno, "recvfrom", "NETLINK_ROUTE");
      return false;
    }
    int rc = mnl_cb_run(buf.data(), n, nlh->nlmsg_seq, port_id_, cb, data);
    if (rc == MNL_CB_STOP) return true;
    if (rc < 0) {
      *err = SysError::FromErrno(errno, "recvfrom", "NETLINK_ROUTE dump");
      return false;
    }
  }
}

bool Rtnl::FwmarkRuleRequest(uint16_t type, uint16_t flags, const FwmarkRule& rule, int* kernel_errno, SysError* err) {
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  return Transact(PutFwmarkRuleMessage(buf.data(), type, flags, rule), kernel_errno, err);
}

bool Rtnl::AddFwmarkRule(const FwmarkRule& rule, bool* changed, SysError* err) {
  int kerr = 0;
  // NLM_F_EXCL makes the kernel refuse a duplicate instead of stacking a second copy.
  if (!FwmarkRuleRequest(RTM_NEWRULE, NLM_F_CREATE | NLM_F_EXCL, rule, &kerr, err)) return false;
  *changed = kerr == 0;
  if (kerr != 0 && kerr != EEXIST) {
    *err = SysError::FromErrno(kerr, "RTM_NEWRULE", rule.family == AF_INET6 ? "ipv6" : "ipv4");
    return false;
  }
  return true;
}

bool Rtnl::DeleteFwmarkRule(const FwmarkRule& rule, bool* changed, SysError* err) {
  int kerr = 0;
  if (!FwmarkRuleRequest(RTM_DELRULE, 0, rule, &kerr, err)) return false;
  *changed = kerr == 0;
  if (kerr != 0 && !RtnlIsGone(kerr)) {
    *err = SysError::FromErrno(kerr, "RTM_DELRULE", rule.family == AF_INET6 ? "ipv6" : "ipv4");
    return false;
  }
  return true;
}

bool Rtnl::LocalRouteRequest(uint16_t type, uint16_t flags, int family, uint32_t table, const std::string& dev,
                             int* kernel_errno, SysError* err) {
  int ifindex = Ifindex(dev, err);
  if (ifindex == 0) return false;
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  return Transact(PutLocalRouteMessage(buf.data(), type, flags, family, table, ifindex), kernel_errno, err);
}

bool Rtnl::ReplaceLocalDefaultRoute(int family, uint32_t table, const std::string& dev, SysError* err) {
  int kerr = 0;
  if (!LocalRouteRequest(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE, family, table, dev, &kerr, err)) {
    return false;
  }
  if (kerr != 0) {
    *err = SysError::FromErrno(kerr, "RTM_NEWROUTE", family == AF_INET6 ? "::/0" : "0.0.0.0/0");
    return false;
  }
  return true;
}

bool Rtnl::DeleteLocalDefaultRoute(int family, uint32_t table, const std::string& dev, bool* changed, SysError* err) {
  int kerr = 0;
  if (!LocalRouteRequest(RTM_DELROUTE, 0, family, table, dev, &kerr, err)) return false;
  *changed = kerr == 0;
  if (kerr != 0 && !RtnlIsGone(kerr)) {
    *err = SysError::FromErrno(kerr, "RTM_DELROUTE", family == AF_INET6 ? "::/0" : "0.0.0.0/0");
    return false;
  }
  return true;
}

namespace {

struct RuleDump {
  int family;
  std::vector<FwmarkRule>* out;
};

int CollectRule(const nlmsghdr* nlh, void* data) {
  auto* dump = static_cast<RuleDump*>(data);
  auto* frh = static_cast<const fib_rule_hdr*>(mnl_nlmsg_get_payload(nlh));
  if (frh->family != dump->family) return MNL_CB_OK;
  FwmarkRule rule;
  rule.family = frh->family;
  rule.table = frh->table;
  ForEachAttr(nlh, sizeof(*frh), [&rule](const nlattr* attr) {
    switch (mnl_attr_get_type(attr)) {
      case FRA_FWMARK: rule.mark = mnl_attr_get_u32(attr); break;
      case FRA_FWMASK: rule.mask = mnl_attr_get_u32(attr); break;
      case FRA_PRIORITY: rule.priority = mnl_attr_get_u32(attr); break;
      case FRA_TABLE: rule.table = mnl_attr_get_u32(attr); break;
      default: break;
    }
  });
  dump->out->push_back(rule);
  return MNL_CB_OK;
}

struct RouteDump {
  uint32_t table;
  std::vector<RouteEntry>* out;
};

int CollectRoute(const nlmsghdr* nlh, void* data) {
  auto* dump = static_cast<RouteDump*>(data);
  auto* rtm = static_cast<const rtmsg*>(mnl_nlmsg_get_payload(nlh));
  RouteEntry route;
  route.family = rtm->rtm_family;
  route.dst_len = rtm->rtm_dst_len;
  route.type = rtm->rtm_type;
  route.table = rtm->rtm_table;
  route.dst = rtm->rtm_family == AF_INET6 ? "::" : "0.0.0.0";
  ForEachAttr(nlh, sizeof(*rtm), [&route, rtm](const nlattr* attr) {
    switch (mnl_attr_get_type(attr)) {
      case RTA_TABLE: route.table = mnl_attr_get_u32(attr); break;
      case RTA_DST: route.dst = AddressText(rtm->rtm_family, mnl_attr_get_payload(attr)); break;
      case RTA_OIF: {
        char name[IF_NAMESIZE] = {0};
        if (if_indextoname(mnl_attr_get_u32(attr), name)) route.dev = name;
        break;
      }
      default: break;
    }
  });
  if (route.table == dump->table) dump->out->push_back(route);
  return MNL_CB_OK;
}

struct AddrList {
  std::vector<AddressEntry>* out;
};

int CollectAddress(const nlmsghdr* nlh, void* data) {
  auto* list = static_cast<AddrList*>(data);
  auto* ifa = static_cast<const ifaddrmsg*>(mnl_nlmsg_get_payload(nlh));
  AddressEntry entry;
  entry.family = ifa->ifa_family;
  entry.prefix_len = ifa->ifa_prefixlen;
  char name[IF_NAMESIZE] = {0};
  if (if_indextoname(ifa->ifa_index, name)) entry.dev = name;
  ForEachAttr(nlh, sizeof(*ifa), [&entry, ifa](const nlattr* attr) {
    // IFA_LOCAL is the interface's own address on point-to-point links; IFA_ADDRESS otherwise.
    int type = mnl_attr_get_type(attr);
    if (type == IFA_LOCAL || (type == IFA_ADDRESS && entry.address.empty())) {
      entry.address = AddressText(ifa->ifa_family, mnl_attr_get_payload(attr));
    }
  });
  if (!entry.address.empty()) list->out->push_back(entry);
  return MNL_CB_OK;
}

}  // namespace

bool Rtnl::ListAddresses(std::vector<AddressEntry>* out, SysError* err) {
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf.data());
  nlh->nlmsg_type = RTM_GETADDR;
  auto* ifa = static_cast<ifaddrmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifaddrmsg)));
  ifa->ifa_family = AF_UNSPEC;
  AddrList list{out};
  return Dump(nlh, CollectAddress, &list, err);
}

bool Rtnl::ListFwmarkRules(int family, std::vector<FwmarkRule>* out, SysError* err) {
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf.data());
  nlh->nlmsg_type = RTM_GETRULE;
  auto* frh = static_cast<fib_rule_hdr*>(mnl_nlmsg_put_extra_header(nlh, sizeof(fib_rule_hdr)));
  frh->family = static_cast<uint8_t>(family);
  RuleDump dump{family, out};
  return Dump(nlh, CollectRule, &dump, err);
}

bool Rtnl::ListRoutes(int family, uint32_t table, std::vector<RouteEntry>* out, SysError* err) {
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf.data());
  nlh->nlmsg_type = RTM_GETROUTE;
  auto* rtm = static_cast<rtmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(rtmsg)));
  rtm->rtm_family = static_cast<uint8_t>(family);
  rtm->rtm_table = table < 256 ? static_cast<uint8_t>(table) : static_cast<uint8_t>(RT_TABLE_UNSPEC);
  mnl_attr_put_u32(nlh, RTA_TABLE, table);
  RouteDump dump{table, out};
  return Dump(nlh, CollectRoute, &dump, err);
}

bool Rtnl::Query(nlmsghdr* nlh, const char* what, int (*cb)(const nlmsghdr*, void*), void* data, SysError* err) {
  nlh->nlmsg_flags = NLM_F_REQUEST;
  std::vector<char> buf;
  ssize_t n = 0;
  if (!SendAndReceive(nlh, &buf, &n, err)) return false;
  if (mnl_cb_run(buf.data(), n, nlh->nlmsg_seq, port_id_, cb, data) < 0) {
    *err = SysError::FromErrno(errno, what);
    return false;
  }
  return true;
}

namespace {

// IFLA_AF_SPEC > AF_INET6 > IFLA_INET6_CONF holds the device's IPv6 sysctls as an s32 array
// indexed by DEVCONF_*; no AF_INET6 entry at all means IPv6 is off in the kernel.
bool Ipv6EnabledIn(const nlattr* af_spec) {
  bool enabled = false;
  ForEachNested(af_spec, [&enabled](const nlattr* af) {
    if (mnl_attr_get_type(af) != AF_INET6) return;
    enabled = true;
    ForEachNested(af, [&enabled](const nlattr* a) {
      if (mnl_attr_get_type(a) != IFLA_INET6_CONF) return;
      if (mnl_attr_get_payload_len(a) < (DEVCONF_DISABLE_IPV6 + 1) * sizeof(int32_t)) return;
      auto* conf = static_cast<const int32_t*>(mnl_attr_get_payload(a));
      enabled = conf[DEVCONF_DISABLE_IPV6] == 0;
    });
  });
  return enabled;
}

int ReadLink(const nlmsghdr* nlh, void* data) {
  auto* link = static_cast<LinkState*>(data);
  auto* ifi = static_cast<const ifinfomsg*>(mnl_nlmsg_get_payload(nlh));
  link->flags = ifi->ifi_flags;
  ForEachAttr(nlh, sizeof(*ifi), [link](const nlattr* attr) {
    if (mnl_attr_get_type(attr) == IFLA_AF_SPEC) link->ipv6_enabled = Ipv6EnabledIn(attr);
  });
  return MNL_CB_OK;
}

}  // namespace

bool Rtnl::GetLink(const std::string& dev, LinkState* out, SysError* err) {
  int ifindex = Ifindex(dev, err);
  if (ifindex == 0) return false;
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf.data());
  nlh->nlmsg_type = RTM_GETLINK;
  auto* ifi = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  ifi->ifi_family = AF_UNSPEC;
  ifi->ifi_index = ifindex;
  *out = LinkState{};
  out->index = ifindex;
  return Query(nlh, "RTM_GETLINK", ReadLink, out, err);
}

bool Rtnl::CachedLink(const std::string& dev, LinkState** out, SysError* err) {
  if (cached_dev_.empty() || cached_dev_ != dev) {
    LinkState fresh;
    if (!GetLink(dev, &fresh, err)) return false;
    cached_link_ = fresh;
    cached_dev_ = dev;
  }
  *out = &cached_link_;
  return true;
}

bool Rtnl::DeviceIpv6Enabled(const std::string& dev, bool* enabled, SysError* err) {
  LinkState* link = nullptr;
  if (!CachedLink(dev, &link, err)) return false;
  *enabled = link->ipv6_enabled;
  return true;
}

bool Rtnl::SetLinkUp(const std::string& dev, bool* changed, SysError* err) {
  LinkState* link = nullptr;
  if (!CachedLink(dev, &link, err)) return false;
  *changed = (link->flags & IFF_UP) == 0;
  if (!*changed) return true;
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf.data());
  nlh->nlmsg_type = RTM_NEWLINK;
  nlh->nlmsg_flags = NLM_F_REQUEST;
  auto* ifi = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  ifi->ifi_family = AF_UNSPEC;
  ifi->ifi_index = link->index;
  ifi->ifi_flags = IFF_UP;
  ifi->ifi_change = IFF_UP;
  int kerr = 0;
  if (!Transact(nlh, &kerr, err)) return false;
  if (kerr != 0) {
    *err = SysError::FromErrno(kerr, "RTM_NEWLINK", dev + " up");
    return false;
  }
  link->flags |= IFF_UP;
  return true;
}

}  // namespace ana
