// Prebuilt nf_tables batches: the in-pod rules as ready-made netlink messages, so a pod costs one
// sendmsg instead of parsing and evaluating nft text. The messages are compiled from the kernel's
// own copy of the rules after libnftables loaded the transaction text into a private namespace:
// the text stays the single source of truth, and the batch is exactly what the kernel made of it.
#pragma once

#include <stdint.h>

#include <string>
#include <vector>

#include "sys_error.h"

namespace ana {

// In the calling thread's namespace, dumps `tables` of `family` (NFPROTO_*) and appends to *out,
// per table, in the kernel's order: NEWTABLE, DELRULE of the whole table (what `flush table`
// sends, so re-applying replaces instead of stacking), NEWCHAIN for each chain, NEWRULE
// (append) for each rule. Handles and positions are dropped: they belong to the source netns.
// Sequence numbers and ack flags are left for SendNftBatch. Fails with ENOENT if a table is absent.
bool CompileNftTablesBatch(uint8_t family, const std::vector<std::string>& tables, std::vector<char>* out,
                           SysError* err);

struct NftBatchOutcome {
  bool refused = false;         // the kernel refused the batch (nothing of it was applied)
  SysError refusal;             // why, when refused
  bool has_generation = false;  // the kernel named the generation of the commit
  uint32_t generation = 0;      // the ruleset generation this batch's commit made
};

// Checks that `messages` is a well-formed list of the message types CompileNftTablesBatch emits,
// then, in the calling thread's namespace: sends the messages between BATCH_BEGIN and BATCH_END
// in one sendmsg and reads the kernel's answer. The first message asks for an echo, so the
// commit's NEWGEN notification comes back with the answer: the generation of this very commit,
// with no extra request and no window in which another commit could slip in. A kernel refusal
// is reported in *outcome (the caller may fall back to the text); false only for malformed input
// or a failing socket.
bool SendNftBatch(const std::vector<char>& messages, NftBatchOutcome* outcome, SysError* err);

}  // namespace ana
