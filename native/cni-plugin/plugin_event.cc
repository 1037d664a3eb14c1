#include "plugin_event.h"

#include <nlohmann/json.hpp>

namespace istio_cni {
namespace {

using nlohmann::ordered_json;

// Pod names and namespaces are DNS labels, but a byte that is not UTF-8 must not abort the ADD:
// replace it rather than throw (the agent will then not find the pod and say so).
std::string Dump(const ordered_json& body) {
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// PodUID and ContainerID are this project's additions (optional in protocol.ts; Istio's agent
// ignores unknown fields). PodUID is left out rather than sent empty when the runtime did not
// pass K8S_POD_UID, so "absent" means one thing on the agent side.
void AddIdentity(ordered_json* body, const CniEnv& env, const K8sArgs& k8s) {
  if (!k8s.pod_uid.empty()) (*body)["PodUID"] = k8s.pod_uid;
  (*body)["ContainerID"] = env.container_id;
}

}  // namespace

std::string AddEventBody(const CniEnv& env, const K8sArgs& k8s, const std::vector<PodIp>& ips) {
  ordered_json body;
  body["Netns"] = env.netns;
  body["PodName"] = k8s.pod_name;
  body["PodNamespace"] = k8s.pod_namespace;
  ordered_json list = ordered_json::array();
  for (const auto& ip : ips) {
    ordered_json entry;
    entry["Interface"] = ip.interface_index ? ordered_json(*ip.interface_index) : ordered_json(nullptr);
    entry["Address"] = {{"IP", ip.ip}, {"Mask", ip.mask_base64}};
    entry["Gateway"] = ip.gateway;
    list.push_back(std::move(entry));
  }
  body["IPs"] = std::move(list);
  AddIdentity(&body, env, k8s);
  return Dump(body);
}

std::string DelEventBody(const CniEnv& env, const K8sArgs& k8s) {
  ordered_json body;
  body["Netns"] = env.netns;
  body["PodName"] = k8s.pod_name;
  body["PodNamespace"] = k8s.pod_namespace;
  AddIdentity(&body, env, k8s);
  return Dump(body);
}

std::string GcEventBody(const std::string& config_json) {
  ordered_json list = ordered_json::array();
  nlohmann::json doc = nlohmann::json::parse(config_json, nullptr, false);
  const auto it = doc.is_object() ? doc.find("cni.dev/valid-attachments") : doc.end();
  if (doc.is_object() && it != doc.end() && it->is_array()) {
    for (const auto& a : *it) {
      if (!a.is_object() || !a.contains("containerID") || !a["containerID"].is_string()) continue;
      ordered_json entry;
      entry["ContainerID"] = a["containerID"].get<std::string>();
      entry["IfName"] = a.contains("ifname") && a["ifname"].is_string() ? a["ifname"].get<std::string>() : "";
      list.push_back(std::move(entry));
    }
  }
  ordered_json body;
  body["ValidAttachments"] = std::move(list);
  return Dump(body);
}

}  // namespace istio_cni
