// Deleting whole nftables tables with one raw nfnetlink batch, without libnftables: the kernel
// spends an RCU grace period (~17 ms) on deleting base chains, and libnftables calls are
// serialised process-wide, so a delete through it would hold every other pod's ADD for that long.
#pragma once

#include <libmnl/libmnl.h>
#include <linux/netlink.h>
#include <stdint.h>

#include <string>
#include <vector>

#include "sys_error.h"

namespace ana {

// NFT_TABLE_MAXNAMELEN is 256 with the terminating NUL.
constexpr size_t kMaxNftTableName = 255;

// "inet", "ip", "ip6" -> NFPROTO_*; false for anything else.
bool NftFamilyFromName(const std::string& name, uint8_t* family);

// In the calling thread's network namespace, deletes `tables` of `family` (NFPROTO_*) in one
// atomic transaction; tables that do not exist are fine (each is created, then deleted, in the
// same batch, exactly like nft's "add table; delete table").
bool DeleteNftTables(uint8_t family, const std::vector<std::string>& tables, SysError* err);

// The calling thread's namespace's nftables ruleset generation (NFT_MSG_GETGEN): the kernel adds
// one with every committed transaction, so an unchanged number means an unchanged ruleset.
bool NftGeneration(uint32_t* generation, SysError* err);

// The same question on a bound NETLINK_NETFILTER socket the caller keeps (a netns watch's):
// answered for the namespace the socket was created in, from any thread, without setns. The
// kernel answers inside sendto, so a non-blocking socket works (no answer queued: ETIMEDOUT).
bool QueryNftGeneration(int fd, uint32_t* generation, SysError* err);

// The generation a NEWGEN message carries (the answer to GETGEN, or a commit's notification);
// false when it has none.
bool NftGenerationOf(const nlmsghdr* newgen, uint32_t* generation);

}  // namespace ana
