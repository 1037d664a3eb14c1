#include "versions.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace istio_cni {

const std::vector<std::string>& SupportedCniVersions() {
  static const std::vector<std::string> versions = {"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"};
  return versions;
}

bool IsSupportedCniVersion(const std::string& version) {
  const auto& all = SupportedCniVersions();
  return std::find(all.begin(), all.end(), version) != all.end();
}

std::string VersionInfoJson() {
  nlohmann::ordered_json out;
  out["cniVersion"] = kLatestCniVersion;
  out["supportedVersions"] = SupportedCniVersions();
  return out.dump();
}

}  // namespace istio_cni
