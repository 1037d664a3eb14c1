#include "nft_runner.h"

#include <errno.h>
#include <nftables/libnftables.h>

#include <mutex>

namespace ana {
namespace {

std::mutex& LibraryLock() {
  static std::mutex mu;
  return mu;
}

std::string Trim(const char* text) {
  std::string s = text ? text : "";
  size_t end = s.find_last_not_of(" \n\t");
  return end == std::string::npos ? "" : s.substr(0, end + 1);
}

struct NftContext {
  nft_ctx* ctx = nft_ctx_new(NFT_CTX_DEFAULT);
  ~NftContext() {
    if (ctx) nft_ctx_free(ctx);
  }
};

}  // namespace

bool NftRunner::Run(const std::string& script, bool stateless, bool json, std::string* out, SysError* err) {
  std::lock_guard<std::mutex> lock(LibraryLock());
  NftContext nft;
  if (!nft.ctx) {
    *err = SysError::FromErrno(errno ? errno : ENOMEM, "nft_ctx_new");
    return false;
  }
  unsigned flags = (stateless ? NFT_CTX_OUTPUT_STATELESS : 0) | (json ? NFT_CTX_OUTPUT_JSON : 0);
  nft_ctx_output_set_flags(nft.ctx, flags);
  if (nft_ctx_buffer_output(nft.ctx) != 0 || nft_ctx_buffer_error(nft.ctx) != 0) {
    *err = SysError::FromErrno(ENOMEM, "nft_ctx_buffer_output");
    return false;
  }
  errno = 0;
  int rc = nft_run_cmd_from_buffer(nft.ctx, script.c_str());
  int saved_errno = errno;
  if (rc != 0) {
    // errno is meaningful only when the kernel refused the batch ("Could not process rule:
    // <strerror>"); parse and evaluation errors leave whatever a library call left behind.
    std::string text = Trim(nft_ctx_get_error_buffer(nft.ctx));
    bool kernel_refused = text.find("Could not process rule") != std::string::npos;
    *err =
        SysError::FromErrno(kernel_refused && saved_errno ? saved_errno : EINVAL, "nft_run_cmd_from_buffer", "", text);
    return false;
  }
  *out = nft_ctx_get_output_buffer(nft.ctx);
  return true;
}

void NftRunner::WarmUp() {
  std::lock_guard<std::mutex> lock(LibraryLock());
  NftContext nft;
}

}  // namespace ana
