// The operations a job can perform inside one network namespace, in order. TypeScript decides
// what to do and in which order (policy); this file only carries it out (mechanism).
#pragma once

#include <stdint.h>

#include <string>
#include <vector>

#include "ipset.h"
#include "marked_socket.h"
#include "netlink_watch.h"
#include "netns.h"
#include "rtnl.h"
#include "rtnl_batch.h"
#include "spawn.h"
#include "sys_error.h"

namespace ana {

enum class StepOp {
  kNft,  // run an nft script (transaction or list command)
  kAddFwmarkRule,
  kDeleteFwmarkRule,
  kReplaceLocalRoute,
  kDeleteLocalRoute,
  kListFwmarkRules,
  kListRoutes,
  kDeviceHasIpv6,
  kListAddresses,
  kSocket,
  kExec,
  kNetnsId,          // report the namespace the step runs in
  kDeleteNftTables,  // delete whole tables with a raw nfnetlink batch (no libnftables lock)
  kNftGeneration,    // the namespace's nftables ruleset generation
  kIpsetCreate,      // ip sets (ipset.h): hash:ip with comments
  kIpsetDestroy,
  kIpsetFlush,
  kIpsetList,
  kIpsetAdd,
  kIpsetDel,
  kSetLinkUp,     // bring a device up (idempotent): the pod's lo before its rules
  kNetlinkWatch,  // a netlink socket subscribed to this namespace's changes (netlink_watch.h)
  kNftBatch,      // send a prebuilt nf_tables batch; the script is the fallback if refused
  kNftCompile,    // build a batch from tables already in the namespace (see nft_batch.h)
  kRoutingBatch,  // fwmark rules and local routes in one rtnetlink sendmsg
};

struct Step {
  StepOp op = StepOp::kNft;
  std::string name;       // the op's name as TypeScript spelled it, for error reports
  std::string script;     // kNft
  bool stateless = true;  // kNft: omit counter values from listings
  bool json = false;      // kNft: list in libnftables' JSON format
  FwmarkRule rule;        // fwmark rule ops (family in rule.family)
  int family = 0;         // route/list ops
  uint32_t table = 0;
  std::string dev;
  bool skip_without_ipv6 = false;  // kReplaceLocalRoute: skip when IPv6 is disabled on dev
  SocketSpec socket;
  std::vector<std::string> argv;  // kExec
  std::string input;
  int timeout_ms = 30000;
  bool replace_env = false;                // kExec: run with exactly `env`
  std::vector<std::string> env;            // "NAME=value"
  uint8_t nft_family = 0;                  // kDeleteNftTables: NFPROTO_*
  std::vector<std::string> tables;         // kDeleteNftTables, kNftCompile
  std::string set_name;                    // kIpset*
  std::string ip;                          // kIpsetAdd, kIpsetDel
  std::string comment;                     // kIpsetAdd
  bool replace = true;                     // kIpsetAdd
  WatchKind watch = WatchKind::kNftables;  // kNetlinkWatch
  std::vector<char> batch;                 // kNftBatch: messages from kNftCompile (script = fallback text)
  std::vector<RoutingChange> routing;      // kRoutingBatch
};

struct StepResult {
  bool changed = false;
  bool skipped = false;
  bool flag = false;   // kDeviceHasIpv6: IPv6 enabled on the device
  std::string output;  // kNft
  int fd = -1;         // kSocket, kNetlinkWatch
  std::vector<FwmarkRule> rules;
  std::vector<RouteEntry> routes;
  std::vector<AddressEntry> addresses;
  SpawnResult spawn;
  NetnsId netns;
  uint32_t generation = 0;              // kNftGeneration; kNftBatch: its commit's, if has_generation
  uint32_t generation_before = 0;       // kNftBatch, when fallback: the generation before the text ran
  IpsetListing ipset;                   // kIpsetList
  bool has_generation = false;          // kNftBatch: the kernel echoed it, or (fallback) the one after the text
  bool fallback = false;                // kNftBatch: the kernel refused the batch, the script was applied
  std::string fallback_reason;          // kNftBatch: the kernel's refusal, when fallback
  std::vector<char> batch;              // kNftCompile
  std::vector<RoutingOutcome> routing;  // kRoutingBatch, one per change
};

// One rtnetlink socket for every step list of one netns visit, opened at the first routing or
// link step: a visit with only nft steps never pays for it, and the pod's lo, asked about by
// both halves of an ADD, is looked up once (Rtnl caches it).
class LazyRtnl {
 public:
  Rtnl* Get(SysError* err);
  // After a step that may have changed a device behind our back (an exec'd process).
  void ForgetLinks() { rtnl_.ForgetLinks(); }

 private:
  Rtnl rtnl_;
  bool opened_ = false;
};

// Runs the steps in order on the calling thread, stopping at the first failure. On failure
// *failed_step is its index and every fd the earlier steps created is closed again, so a
// failed job leaks nothing. `rtnl` belongs to the calling thread's current namespace.
bool RunSteps(const std::vector<Step>& steps, LazyRtnl* rtnl, std::vector<StepResult>* results, size_t* failed_step,
              SysError* err);

}  // namespace ana
