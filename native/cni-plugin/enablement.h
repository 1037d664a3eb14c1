// The agent's enablement snapshot (<run dir>/ambient-enablement.json, protocol.ts
// EnablementSnapshot), read only when the agent cannot be reached, to choose between failing a
// pod closed (its namespace is ambient: starting it would leave it outside the mesh) and letting
// it start (nothing to redirect). The plugin itself never asks the Kubernetes API.
#pragma once

#include <string>

namespace istio_cni {

enum class NamespaceMode { kAmbient, kNotAmbient, kUnknown };

struct EnablementVerdict {
  NamespaceMode mode = NamespaceMode::kUnknown;
  std::string why;  // for the log line / error text
};

EnablementVerdict NamespaceEnablement(const std::string& run_dir, const std::string& pod_namespace);

}  // namespace istio_cni
