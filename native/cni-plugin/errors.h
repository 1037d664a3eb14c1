// CNI spec error codes and the one exception type the plugin throws. main.cc turns a CniError
// into the spec's error object on stdout and a non-zero exit; nothing else reaches stdout.
#pragma once

#include <stdexcept>
#include <string>

namespace istio_cni {

// The CNI specification's error codes (containernetworking/cni SPEC.md, "Error"). Only the ones
// this plugin reports are listed; the runtime branches on some of them (11 makes kubelet retry
// the sandbox instead of treating it as a hard failure).
enum ErrorCode : int {
  kIncompatibleCniVersion = 1,
  kInvalidEnvironment = 4,
  kDecodeFailure = 6,
  kInvalidNetworkConfig = 7,
  kTryAgainLater = 11,
  kInternal = 999,
};

class CniError : public std::runtime_error {
 public:
  CniError(int code, const std::string& msg, std::string details = "")
      : std::runtime_error(msg), code_(code), details_(std::move(details)) {}
  int code() const { return code_; }
  const std::string& details() const { return details_; }

 private:
  int code_;
  std::string details_;
};

}  // namespace istio_cni
