// Watching one network namespace: a netlink socket subscribed to policy routing's multicast
// groups, and an unsubscribed nf_tables socket to ask for the ruleset generation on
// (QueryNftGeneration in nft_tables.h). A netlink socket stays bound to the namespace it was
// created in, so Open runs inside the pod's namespace (a netns job on an addon thread); Drain and
// the generation query then use it from any thread (the JS thread) without entering it.
//
// Why nf_tables is asked and not subscribed to: the kernel keeps one listener mask per netlink
// protocol for the whole machine, so a single NFNLGRP_NFTABLES member anywhere makes every
// nf_tables commit in every namespace build a notification for each table, chain and rule it
// touches (nf_tables_rule_notify) and offer it to every member socket. Measured on the 2-vCPU
// VM: a pod's rule apply took 1.11 ms of CPU p50 with no member anywhere, 1.30 with one watch in
// another namespace, 1.49 with 200 (README, "What profiling found"), and kube-proxy's and every
// other nftables user's commits paid the same tax.
#pragma once

#include <stdint.h>

#include "sys_error.h"

namespace ana {

enum class WatchKind {
  kNftables,  // NETLINK_NETFILTER, no groups: asked for the generation (QueryNftGeneration)
  kRouting,   // NETLINK_ROUTE: ip rules (v4, v6), routes (v4, v6) and addresses (v4, v6)
};

// What one drain of a routing watch saw. Routes and rules are counted only for `table` (others
// are read and dropped).
struct WatchEvents {
  uint32_t rules = 0;
  uint32_t routes = 0;
  uint32_t addresses = 0;
  // The socket's receive buffer overflowed (ENOBUFS): events were lost, so assume everything.
  bool overrun = false;
};

// Returns a non-blocking, close-on-exec socket (a routing one subscribed to its groups), or -1.
int OpenNetlinkWatch(WatchKind kind, SysError* err);

// Reads every queued message without blocking. False only on a real socket error.
bool DrainNetlinkWatch(int fd, uint32_t table, WatchEvents* out, SysError* err);

}  // namespace ana
