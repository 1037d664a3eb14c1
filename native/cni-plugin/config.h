// Everything the runtime hands the plugin: the CNI_* environment, CNI_ARGS (the Kubernetes pod
// identity), and the network config on stdin with Istio's plugin fields.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace istio_cni {

struct CniEnv {
  std::string command;       // CNI_COMMAND
  std::string container_id;  // CNI_CONTAINERID
  std::string netns;         // CNI_NETNS
  std::string ifname;        // CNI_IFNAME
  std::string args;          // CNI_ARGS
};

CniEnv ReadCniEnv();

// Per-command required variables (spec "Parameters") and their syntax, as the Go CNI library's
// skel checks them before any plugin code runs: CNI_CONTAINERID and CNI_IFNAME for ADD, DEL and
// CHECK, plus an absolute CNI_NETNS for ADD and CHECK (and for DEL when it is set). Throws
// CniError code 4.
void RequireEnvFor(const CniEnv& env);

// The CNI_ARGS keys kubelet / the CRI runtime set for a pod sandbox.
struct K8sArgs {
  std::string pod_name;            // K8S_POD_NAME
  std::string pod_namespace;       // K8S_POD_NAMESPACE
  std::string infra_container_id;  // K8S_POD_INFRA_CONTAINER_ID
  std::string pod_uid;             // K8S_POD_UID
};

// "K=V;K=V". Unknown keys (IgnoreUnknown included) are ignored; a pair without '=' is an
// invalid environment (code 4), as the Go CNI library's LoadArgs rejects it. A repeated key
// keeps its last value (as LoadArgs). The values of the four Kubernetes keys must be what
// Kubernetes can produce (DNS-1123 names, bounded IDs), else code 4: the agent would refuse
// them anyway, and nothing malformed is forwarded.
K8sArgs ParseCniArgs(const std::string& args);

// Istio's plugin config fields (cni/pkg/plugin/plugin.go Config), with Istio's defaults.
struct PluginConfig {
  std::string cni_version;
  std::string name;
  std::string type;
  std::string agent_run_dir = "/var/run/istio-cni";  // cni_agent_run_dir
  std::vector<std::string> exclude_namespaces;       // array or null
  bool ambient_enabled = false;                      // Go zero value: the installer always writes it
  std::string pod_namespace;                         // the agent's own namespace
  std::string plugin_log_level = "info";
  nlohmann::json enablement_selectors;          // kept for completeness; the agent evaluates them
  bool native_nftables = false;                 // the agent's concern; accepted, not used
  bool enable_ambient_detection_retry = false;  // applies to kube API lookups, which this plugin never makes
  bool has_prev_result = false;
  nlohmann::ordered_json prev_result;  // as received, key order kept for the echo
};

// Decodes stdin. Throws CniError: 6 for bytes that are not a JSON object (or nest deeper than
// kMaxJsonDepth), 1 for a missing or unsupported cniVersion, 7 for a field of the wrong type or
// value (a missing or invalid network name, as the Go CNI library's skel; a run dir that is not
// an absolute path). `version_for_errors` is set to the
// config's cniVersion as soon as it is known to be supported, so later errors speak it.
// Real configs nest a handful of levels; nlohmann parses iteratively, but copying or printing a
// value recurses once per level, so a few KB of "[[[[" would otherwise overflow the stack.
inline constexpr int kMaxJsonDepth = 128;

PluginConfig ParseConfig(const std::string& stdin_data, std::string* version_for_errors);

}  // namespace istio_cni
