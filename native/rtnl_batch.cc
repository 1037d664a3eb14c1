#include "rtnl_batch.h"

#include <errno.h>
#include <libmnl/libmnl.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <memory>

namespace ana {
namespace {

constexpr size_t kRecvBufSize = 16384;  // acks only
constexpr size_t kMessageRoom = 256;    // a rule or route request is under 100 bytes

const char* ChangeName(RoutingChangeKind kind) {
  switch (kind) {
    case RoutingChangeKind::kAddFwmarkRule: return "RTM_NEWRULE";
    case RoutingChangeKind::kDeleteFwmarkRule: return "RTM_DELRULE";
    case RoutingChangeKind::kReplaceLocalRoute: return "RTM_NEWROUTE";
    case RoutingChangeKind::kDeleteLocalRoute: return "RTM_DELROUTE";
  }
  return "rtnetlink";
}

const char* ChangeObject(const RoutingChange& c) {
  bool rule = c.kind == RoutingChangeKind::kAddFwmarkRule || c.kind == RoutingChangeKind::kDeleteFwmarkRule;
  if (rule) return c.rule.family == AF_INET6 ? "ipv6" : "ipv4";
  return c.family == AF_INET6 ? "::/0" : "0.0.0.0/0";
}

nlmsghdr* Build(char* buf, const RoutingChange& c, int ifindex) {
  switch (c.kind) {
    // NLM_F_EXCL makes the kernel refuse a duplicate instead of stacking a second copy.
    case RoutingChangeKind::kAddFwmarkRule:
      return PutFwmarkRuleMessage(buf, RTM_NEWRULE, NLM_F_CREATE | NLM_F_EXCL, c.rule);
    case RoutingChangeKind::kDeleteFwmarkRule: return PutFwmarkRuleMessage(buf, RTM_DELRULE, 0, c.rule);
    case RoutingChangeKind::kReplaceLocalRoute:
      return PutLocalRouteMessage(buf, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE, c.family, c.table, ifindex);
    case RoutingChangeKind::kDeleteLocalRoute:
      return PutLocalRouteMessage(buf, RTM_DELROUTE, 0, c.family, c.table, ifindex);
  }
  return nullptr;
}

// What the kernel's answer means for one change: done, a no-op, or a failure.
bool Judge(const RoutingChange& c, int kerr, RoutingOutcome* o, SysError* err) {
  o->changed = kerr == 0;
  if (kerr == 0) return true;
  bool tolerated =
      (c.kind == RoutingChangeKind::kAddFwmarkRule && kerr == EEXIST) ||
      ((c.kind == RoutingChangeKind::kDeleteFwmarkRule || c.kind == RoutingChangeKind::kDeleteLocalRoute) &&
       RtnlIsGone(kerr));
  if (tolerated) return true;
  *err = SysError::FromErrno(kerr, ChangeName(c.kind), ChangeObject(c));
  return false;
}

}  // namespace

// Only the last message asks for an ack: the kernel answers every failing message anyway
// (netlink_rcv_skb acks on error whatever the flags) and handles them in order within the one
// sendmsg, so the last ack comes after every earlier error, and one recvmsg is enough when all
// went through.
bool Rtnl::TransactBatch(const std::vector<nlmsghdr*>& messages, std::vector<int>* kernel_errnos, SysError* err) {
  kernel_errnos->assign(messages.size(), 0);
  if (messages.empty()) return true;
  std::vector<char> out;
  uint32_t first = seq_ + 1;
  for (nlmsghdr* nlh : messages) {
    bool last = nlh == messages.back();
    nlh->nlmsg_flags = static_cast<uint16_t>((nlh->nlmsg_flags & ~NLM_F_ACK) | (last ? NLM_F_ACK : 0));
    nlh->nlmsg_seq = ++seq_;
    const char* p = reinterpret_cast<const char*>(nlh);
    out.insert(out.end(), p, p + NLMSG_ALIGN(nlh->nlmsg_len));
  }
  if (mnl_socket_sendto(sock_, out.data(), out.size()) < 0) {
    *err = SysError::FromErrno(errno, "sendmsg", "NETLINK_ROUTE");
    return false;
  }
  std::unique_ptr<char[]> buf(new char[kRecvBufSize]);  // not cleared: only what recv wrote is read
  for (bool last_answered = false; !last_answered;) {
    ssize_t n = mnl_socket_recvfrom(sock_, buf.get(), kRecvBufSize);
    if (n < 0) {
      *err = SysError::FromErrno(errno, "recvfrom", "NETLINK_ROUTE");
      return false;
    }
    int len = static_cast<int>(n);
    for (auto* nlh = reinterpret_cast<const nlmsghdr*>(buf.get()); mnl_nlmsg_ok(nlh, len);
         nlh = mnl_nlmsg_next(nlh, &len)) {
      if (nlh->nlmsg_type != NLMSG_ERROR || nlh->nlmsg_pid != port_id_) continue;
      auto* e = static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(nlh));
      uint32_t i = e->msg.nlmsg_seq - first;
      if (i >= messages.size()) continue;  // not one of ours
      (*kernel_errnos)[i] = -e->error;
      if (i + 1 == messages.size()) last_answered = true;
    }
  }
  return true;
}

bool ApplyRoutingBatch(Rtnl* rtnl, const std::vector<RoutingChange>& changes, std::vector<RoutingOutcome>* out,
                       SysError* err) {
  out->assign(changes.size(), RoutingOutcome{});
  std::vector<char> storage(changes.size() * kMessageRoom);
  std::vector<nlmsghdr*> messages;
  std::vector<size_t> sent;  // index into changes of each message
  for (size_t i = 0; i < changes.size(); i++) {
    const RoutingChange& c = changes[i];
    int ifindex = 0;
    bool route = c.kind == RoutingChangeKind::kReplaceLocalRoute || c.kind == RoutingChangeKind::kDeleteLocalRoute;
    if (route) {
      ifindex = RtnlIfindex(c.dev, err);
      if (ifindex == 0) return false;
    }
    if (c.skip_without_ipv6) {
      bool has = false;
      if (!rtnl->DeviceIpv6Enabled(c.dev, &has, err)) return false;  // disable_ipv6, as Istio
      if (!has) {
        (*out)[i].skipped = true;
        continue;
      }
    }
    messages.push_back(Build(storage.data() + messages.size() * kMessageRoom, c, ifindex));
    sent.push_back(i);
  }
  std::vector<int> kernel_errnos;
  if (!rtnl->TransactBatch(messages, &kernel_errnos, err)) return false;
  for (size_t m = 0; m < messages.size(); m++) {
    if (!Judge(changes[sent[m]], kernel_errnos[m], &(*out)[sent[m]], err)) return false;
  }
  return true;
}

}  // namespace ana
