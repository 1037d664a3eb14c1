#include "config.h"

#include <cstdlib>

#include "errors.h"
#include "versions.h"

namespace istio_cni {
namespace {

using nlohmann::ordered_json;

std::string Env(const char* name) {
  const char* v = getenv(name);
  return v ? std::string(v) : std::string();
}

void Require(const std::string& value, const char* name) {
  if (value.empty()) throw CniError(kInvalidEnvironment, std::string("required env variable ") + name + " missing");
}

// Go's json.Unmarshal leaves a field at its zero value for null, so null is accepted everywhere.
std::string StringField(const ordered_json& conf, const char* key, const std::string& fallback) {
  auto it = conf.find(key);
  if (it == conf.end() || it->is_null()) return fallback;
  if (!it->is_string()) throw CniError(kInvalidNetworkConfig, std::string("invalid network config: \"") + key + "\" must be a string");
  return it->get<std::string>();
}

bool BoolField(const ordered_json& conf, const char* key, bool fallback) {
  auto it = conf.find(key);
  if (it == conf.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw CniError(kInvalidNetworkConfig, std::string("invalid network config: \"") + key + "\" must be a boolean");
  return it->get<bool>();
}

}  // namespace

CniEnv ReadCniEnv() {
  CniEnv env;
  env.command = Env("CNI_COMMAND");
  env.container_id = Env("CNI_CONTAINERID");
  env.netns = Env("CNI_NETNS");
  env.ifname = Env("CNI_IFNAME");
  env.args = Env("CNI_ARGS");
  return env;
}

void RequireEnvFor(const CniEnv& env) {
  const std::string& c = env.command;
  if (c == "ADD" || c == "DEL" || c == "CHECK") {
    Require(env.container_id, "CNI_CONTAINERID");
    Require(env.ifname, "CNI_IFNAME");
  }
  // DEL may come after the sandbox's netns is gone, so the spec lets CNI_NETNS be empty there.
  if (c == "ADD" || c == "CHECK") Require(env.netns, "CNI_NETNS");
}

K8sArgs ParseCniArgs(const std::string& args) {
  K8sArgs out;
  size_t start = 0;
  while (start <= args.size()) {
    size_t end = args.find(';', start);
    if (end == std::string::npos) end = args.size();
    std::string pair = args.substr(start, end - start);
    start = end + 1;
    if (pair.empty()) continue;  // tolerate "a=b;" and ";;"
    size_t eq = pair.find('=');
    if (eq == std::string::npos) throw CniError(kInvalidEnvironment, "invalid CNI_ARGS pair \"" + pair + "\"");
    std::string key = pair.substr(0, eq), value = pair.substr(eq + 1);
    if (key == "K8S_POD_NAME") out.pod_name = value;
    else if (key == "K8S_POD_NAMESPACE") out.pod_namespace = value;
    else if (key == "K8S_POD_INFRA_CONTAINER_ID") out.infra_container_id = value;
    else if (key == "K8S_POD_UID") out.pod_uid = value;
    // Anything else (IgnoreUnknown, runtime-specific keys) is not ours to judge.
  }
  return out;
}

PluginConfig ParseConfig(const std::string& stdin_data, std::string* version_for_errors) {
  ordered_json conf;
  try {
    conf = ordered_json::parse(stdin_data);
  } catch (const ordered_json::exception& e) {
    throw CniError(kDecodeFailure, "failed to decode network config from stdin", e.what());
  }
  if (!conf.is_object()) throw CniError(kDecodeFailure, "failed to decode network config from stdin", "not a JSON object");

  PluginConfig pc;
  // As the Go CNI library: a config without cniVersion is 0.1.0, which is not supported here.
  auto v = conf.find("cniVersion");
  if (v != conf.end() && !v->is_string()) throw CniError(kDecodeFailure, "failed to decode cniVersion", "cniVersion must be a string");
  pc.cni_version = v == conf.end() ? "0.1.0" : v->get<std::string>();
  if (!IsSupportedCniVersion(pc.cni_version)) {
    std::string supported;
    for (const auto& s : SupportedCniVersions()) supported += (supported.empty() ? "" : ", ") + s;
    throw CniError(kIncompatibleCniVersion, "incompatible CNI versions", "config is \"" + pc.cni_version + "\", plugin supports [" + supported + "]");
  }
  if (version_for_errors) *version_for_errors = pc.cni_version;

  pc.name = StringField(conf, "name", "");
  pc.type = StringField(conf, "type", "");
  pc.agent_run_dir = StringField(conf, "cni_agent_run_dir", pc.agent_run_dir);
  if (pc.agent_run_dir.empty()) pc.agent_run_dir = "/var/run/istio-cni";
  pc.ambient_enabled = BoolField(conf, "ambient_enabled", false);
  pc.pod_namespace = StringField(conf, "pod_namespace", "");
  pc.plugin_log_level = StringField(conf, "plugin_log_level", "info");
  pc.native_nftables = BoolField(conf, "native_nftables", false);
  pc.enable_ambient_detection_retry = BoolField(conf, "enable_ambient_detection_retry", false);

  auto ex = conf.find("exclude_namespaces");
  if (ex != conf.end() && !ex->is_null()) {
    if (!ex->is_array()) throw CniError(kInvalidNetworkConfig, "invalid network config: \"exclude_namespaces\" must be an array of strings or null");
    for (const auto& n : *ex) {
      if (!n.is_string()) throw CniError(kInvalidNetworkConfig, "invalid network config: \"exclude_namespaces\" must be an array of strings or null");
      pc.exclude_namespaces.push_back(n.get<std::string>());
    }
  }

  auto sel = conf.find("enablement_selectors");
  if (sel != conf.end() && !sel->is_null()) {
    if (!sel->is_array()) throw CniError(kInvalidNetworkConfig, "invalid network config: \"enablement_selectors\" must be an array or null");
    pc.enablement_selectors = nlohmann::json::parse(sel->dump());
  }

  auto prev = conf.find("prevResult");
  if (prev != conf.end() && !prev->is_null()) {
    if (!prev->is_object()) throw CniError(kInvalidNetworkConfig, "invalid network config: \"prevResult\" must be an object");
    pc.has_prev_result = true;
    pc.prev_result = *prev;
  }
  return pc;
}

}  // namespace istio_cni
