// The CNI spec versions this plugin speaks. 0.1.0/0.2.0 are left out on purpose: their result
// format (ip4/ip6 objects) predates prevResult chaining, which this plugin relies on.
#pragma once

#include <string>
#include <vector>

namespace istio_cni {

inline constexpr const char* kLatestCniVersion = "1.1.0";

const std::vector<std::string>& SupportedCniVersions();
bool IsSupportedCniVersion(const std::string& version);

// The VERSION command's output: {"cniVersion":"1.1.0","supportedVersions":[...]}.
std::string VersionInfoJson();

}  // namespace istio_cni
