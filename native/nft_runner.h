// In-process nftables through libnftables: the same text `nft -f` reads, applied as one atomic
// netlink batch in the calling thread's network namespace, without spawning anything.
#pragma once

#include <string>

#include "sys_error.h"

namespace ana {

class NftRunner {
 public:
  // libnftables opens its netlink socket in nft_ctx_new, and a netlink socket stays bound to
  // the namespace it was created in, so a context is made per call, inside the target netns.
  // Parts of the library are process-global (interface cache, one-time init), so calls are
  // serialised. Output (for list commands) goes to *out; failures carry nft's own message.
  static bool Run(const std::string& script, bool stateless, bool json, std::string* out, SysError* err);

  // Pays the library's one-time initialisation (and page-in) up front.
  static void WarmUp();
};

}  // namespace ana
