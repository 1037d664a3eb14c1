// rtnetlink requests for the in-pod routing that goes with the redirection rules: the fwmark
// ip rule and the local default route in a dedicated table. Each Rtnl is opened in (and stays
// bound to) the namespace of the thread that opens it; one lives for one netns visit.
#pragma once

#include <stdint.h>

#include <string>
#include <vector>

#include "sys_error.h"

struct mnl_socket;
struct nlmsghdr;

namespace ana {

struct FwmarkRule {
  int family = 0;  // AF_INET or AF_INET6
  uint32_t mark = 0;
  uint32_t mask = 0;
  uint32_t priority = 0;
  uint32_t table = 0;
};

struct RouteEntry {
  int family = 0;
  std::string dst;  // textual address, "0.0.0.0" or "::" for the default route
  unsigned dst_len = 0;
  unsigned type = 0;  // RTN_* value
  std::string dev;    // output interface name, "" when none
  uint32_t table = 0;
};

struct AddressEntry {
  int family = 0;
  std::string address;
  unsigned prefix_len = 0;
  std::string dev;
};

struct LinkState {
  int index = 0;
  unsigned flags = 0;         // IFF_*
  bool ipv6_enabled = false;  // IPv6 in the kernel and net.ipv6.conf.<dev>.disable_ipv6 == 0
};

class Rtnl {
 public:
  Rtnl() = default;
  ~Rtnl();
  Rtnl(const Rtnl&) = delete;
  Rtnl& operator=(const Rtnl&) = delete;

  bool Open(SysError* err);

  // Idempotent: adding what exists or deleting what is gone succeeds with *changed = false.
  // (Istio treats "already gone" as an error and retries forever, istio/istio#58293.)
  bool AddFwmarkRule(const FwmarkRule& rule, bool* changed, SysError* err);
  bool DeleteFwmarkRule(const FwmarkRule& rule, bool* changed, SysError* err);
  bool ReplaceLocalDefaultRoute(int family, uint32_t table, const std::string& dev, SysError* err);
  bool DeleteLocalDefaultRoute(int family, uint32_t table, const std::string& dev, bool* changed, SysError* err);

  bool ListFwmarkRules(int family, std::vector<FwmarkRule>* out, SysError* err);
  bool ListRoutes(int family, uint32_t table, std::vector<RouteEntry>* out, SysError* err);
  bool GetLink(const std::string& dev, LinkState* out, SysError* err);
  // Istio's test (net.ipv6.conf.<dev>.disable_ipv6), read over rtnetlink: true even while the
  // device is down and has no IPv6 address yet.
  bool DeviceIpv6Enabled(const std::string& dev, bool* enabled, SysError* err);
  // Drops what CachedLink remembers, so the next question asks the kernel.
  void ForgetLinks() { cached_dev_.clear(); }
  // Idempotent: *changed is false when the device was up already.
  bool SetLinkUp(const std::string& dev, bool* changed, SysError* err);
  // Every interface address in the namespace (both families).
  bool ListAddresses(std::vector<AddressEntry>* out, SysError* err);

  // Several requests in one sendmsg (rtnl_batch.cc): each message's kernel errno (0 on
  // success) lands in (*kernel_errnos)[i], in order.
  bool TransactBatch(const std::vector<nlmsghdr*>& messages, std::vector<int>* kernel_errnos, SysError* err);

 private:
  // Sends one request (a fresh sequence number) and reads one reply datagram into buf.
  bool SendAndReceive(nlmsghdr* nlh, std::vector<char>* buf, ssize_t* n, SysError* err);
  // Sends one request and reads its ack; the kernel's errno (0 on success) goes to *kernel_errno.
  bool Transact(nlmsghdr* nlh, int* kernel_errno, SysError* err);
  // Sends one request and handles its single answer (no ack); a kernel error fails it as `what`.
  bool Query(nlmsghdr* nlh, const char* what, int (*cb)(const nlmsghdr*, void*), void* data, SysError* err);
  bool Dump(nlmsghdr* nlh, int (*cb)(const nlmsghdr*, void*), void* data, SysError* err);
  bool FwmarkRuleRequest(uint16_t type, uint16_t flags, const FwmarkRule& rule, int* kernel_errno, SysError* err);
  bool LocalRouteRequest(uint16_t type, uint16_t flags, int family, uint32_t table, const std::string& dev,
                         int* kernel_errno, SysError* err);
  // GetLink for the device asked about last, once per Rtnl: an ADD's visit asks about lo up to
  // three times (up? up? IPv6?), and an RTM_GETLINK answer is ~1.5 KB of counters and sysctls the
  // kernel fills for every request.
  bool CachedLink(const std::string& dev, LinkState** out, SysError* err);

  std::string cached_dev_;
  LinkState cached_link_;

  mnl_socket* sock_ = nullptr;
  uint32_t port_id_ = 0;
  uint32_t seq_ = 0;
};

// Request builders shared by the single requests and the batch (buf: MNL_SOCKET_BUFFER_SIZE).
nlmsghdr* PutFwmarkRuleMessage(char* buf, uint16_t type, uint16_t flags, const FwmarkRule& rule);
nlmsghdr* PutLocalRouteMessage(char* buf, uint16_t type, uint16_t flags, int family, uint32_t table, int ifindex);
// if_nametoindex with the error reported as ENODEV when the device is missing; 0 on failure.
int RtnlIfindex(const std::string& dev, SysError* err);
// ENOENT/ESRCH/EADDRNOTAVAIL: what the kernel says when the rule or route to delete is gone.
bool RtnlIsGone(int kernel_errno);

}  // namespace ana
