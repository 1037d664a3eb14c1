// prevResult handling: the pod IPs the agent needs, and the result this plugin prints. A chained
// plugin that changes nothing must hand the previous plugin's result on, so it is echoed as
// received, only with the config's cniVersion stamped on it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config.h"

namespace istio_cni {

// One prevResult "ips" entry in the shape Istio's agent decodes (Go's IPConfig with net.IPNet):
// the address as text, the mask as the base64 of its bytes (4 for IPv4, 16 for IPv6).
struct PodIp {
  std::optional<long long> interface_index;  // prevResult ips[].interface, null when absent
  std::string ip;
  std::string mask_base64;
  std::string gateway;  // "" when absent, as Go marshals a nil net.IP
};

// Throws CniError code 7 for an "ips" entry that is not a valid CIDR / gateway / index (below
// 2^31), or for more than 64 entries (what the agent accepts).
std::vector<PodIp> PodIpsFromPrevResult(const PluginConfig& config);

// prevResult with "cniVersion" set to the config's, or the empty result {"cniVersion":..,"dns":{}}.
nlohmann::ordered_json ResultToPrint(const PluginConfig& config);

}  // namespace istio_cni
