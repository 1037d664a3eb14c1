// The in-pod routing (fwmark ip rules, local default routes in table 100) as one rtnetlink
// sendmsg: every change in one buffer, one ack per change, read back in order.
#pragma once

#include <stdint.h>

#include <string>
#include <vector>

#include "rtnl.h"
#include "sys_error.h"

namespace ana {

enum class RoutingChangeKind { kAddFwmarkRule, kDeleteFwmarkRule, kReplaceLocalRoute, kDeleteLocalRoute };

struct RoutingChange {
  RoutingChangeKind kind = RoutingChangeKind::kAddFwmarkRule;
  FwmarkRule rule;  // rule kinds
  int family = 0;   // route kinds
  uint32_t table = 0;
  std::string dev;
  bool skip_without_ipv6 = false;  // kReplaceLocalRoute: skip when dev has no IPv6 address
};

struct RoutingOutcome {
  bool changed = false;
  bool skipped = false;
};

// Same meaning as the single Rtnl calls (adding an existing rule and deleting what is gone
// succeed with changed = false), but in one sendmsg after at most one address dump (for
// skip_without_ipv6). The first change the kernel refuses fails the call, naming it.
bool ApplyRoutingBatch(Rtnl* rtnl, const std::vector<RoutingChange>& changes, std::vector<RoutingOutcome>* out,
                       SysError* err);

}  // namespace ana
