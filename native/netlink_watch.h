// Change notifications from one network namespace: netlink sockets subscribed to the kernel's
// multicast groups for nf_tables and for policy routing. A netlink socket stays bound to the
// namespace it was created in, so Open runs inside the pod's namespace (a netns job on an addon
// thread); Drain then reads it from any thread (the JS thread, when the fd poller says readable).
#pragma once

#include <stdint.h>

#include <string>
#include <vector>

#include "sys_error.h"

namespace ana {

enum class WatchKind {
  kNftables,  // NETLINK_NETFILTER, NFNLGRP_NFTABLES: every committed nf_tables change
  kRouting,   // NETLINK_ROUTE: ip rules (v4, v6), routes (v4, v6) and addresses (v4, v6)
};

// What one drain saw. Routes and rules are counted only for `table` (others are read and
// dropped). nf_tables messages are counted when they name one of `nft_tables` (every table,
// chain, rule, set, element and object message carries its table's name), or all of them when
// that list is empty; the per-commit NEWGEN message names no table and is not counted then.
struct WatchEvents {
  uint32_t nftables = 0;
  uint32_t rules = 0;
  uint32_t routes = 0;
  uint32_t addresses = 0;
  // The socket's receive buffer overflowed (ENOBUFS): events were lost, so assume everything.
  bool overrun = false;
};

// Returns a non-blocking, close-on-exec socket subscribed to `kind`'s groups, or -1.
int OpenNetlinkWatch(WatchKind kind, SysError* err);

// Reads every queued message without blocking. False only on a real socket error.
bool DrainNetlinkWatch(int fd, uint32_t table, const std::vector<std::string>& nft_tables, WatchEvents* out,
                       SysError* err);

}  // namespace ana
