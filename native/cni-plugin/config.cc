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

// Values end up in error objects and log lines: a hostile 100 KB value is shown by its start.
std::string Shown(const std::string& value) {
  constexpr size_t kMax = 64;
  return "\"" + (value.size() <= kMax ? value : value.substr(0, kMax) + "...") + "\"";
}

bool IsAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }
bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// libcni's rule for container IDs and network names, ^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$, bounded.
bool IsCniIdentifier(const std::string& s, size_t max_len) {
  if (s.empty() || s.size() > max_len || !IsAlnum(s[0])) return false;
  for (char c : s) {
    if (!IsAlnum(c) && c != '_' && c != '.' && c != '-') return false;
  }
  return true;
}

// The kernel's dev_valid_name, as skel's ValidateInterfaceName applies it (ASCII whitespace and
// control characters stand for Go's unicode.IsSpace).
const char* InterfaceNameProblem(const std::string& s) {
  if (s.size() > 15) return "is longer than 15 bytes";
  if (s == "." || s == "..") return "is . or ..";
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (c == '/' || c == ':' || u <= ' ' || u == 0x7f) return "contains / or : or whitespace or control characters";
  }
  return nullptr;
}

// A netns path the agent can open: absolute, within PATH_MAX, no ".." segment (the agent joins
// it under its --netns-root, which ".." would escape). The environment cannot carry NUL.
const char* NetnsPathProblem(const std::string& s) {
  if (s.empty() || s[0] != '/') return "is not an absolute path";
  if (s.size() >= 4096) return "is longer than PATH_MAX";
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find('/', start);
    if (end == std::string::npos) end = s.size();
    if (s.compare(start, end - start, "..") == 0) return "has a \"..\" segment";
    start = end + 1;
  }
  return nullptr;
}

// Kubernetes' IsDNS1123Label: pod namespaces.
bool IsDns1123Label(const std::string& s) {
  if (s.empty() || s.size() > 63 || !IsLowerAlnum(s.front()) || !IsLowerAlnum(s.back())) return false;
  for (char c : s) {
    if (!IsLowerAlnum(c) && c != '-') return false;
  }
  return true;
}

// Kubernetes' IsDNS1123Subdomain: pod names. Dot-separated labels, 253 bytes in all.
bool IsDns1123Subdomain(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  for (;;) {
    size_t end = s.find('.', start);
    if (end == std::string::npos) end = s.size();
    const std::string label = s.substr(start, end - start);
    if (label.empty() || !IsLowerAlnum(label.front()) || !IsLowerAlnum(label.back())) return false;
    for (char c : label) {
      if (!IsLowerAlnum(c) && c != '-') return false;
    }
    if (end == s.size()) return true;
    start = end + 1;
  }
}

[[noreturn]] void InvalidEnv(const char* name, const std::string& value, const std::string& why) {
  throw CniError(kInvalidEnvironment, std::string("invalid env variable ") + name + ": " + Shown(value) + " " + why);
}

[[noreturn]] void InvalidArg(const char* key, const std::string& value, const char* why) {
  throw CniError(kInvalidEnvironment, std::string("invalid CNI_ARGS: ") + key + "=" + Shown(value) + " " + why);
}

// Container IDs are 64 hex digits in practice; libcni sets no bound, this one only stops abuse.
constexpr size_t kMaxIdBytes = 1024;
// Kubernetes UIDs are UUIDs; the bound leaves room for other runtimes' IDs.
constexpr size_t kMaxPodUidBytes = 128;

// Go's json.Unmarshal leaves a field at its zero value for null, so null is accepted everywhere.
std::string StringField(const ordered_json& conf, const char* key, const std::string& fallback) {
  auto it = conf.find(key);
  if (it == conf.end() || it->is_null()) return fallback;
  if (!it->is_string())
    throw CniError(kInvalidNetworkConfig, std::string("invalid network config: \"") + key + "\" must be a string");
  return it->get<std::string>();
}

bool BoolField(const ordered_json& conf, const char* key, bool fallback) {
  auto it = conf.find(key);
  if (it == conf.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    throw CniError(kInvalidNetworkConfig, std::string("invalid network config: \"") + key + "\" must be a boolean");
  return it->get<bool>();
}

// Counts brackets outside strings; on malformed text the count may be off, but such text
// fails to parse anyway (and is a decode failure either way).
bool NestedDeeperThan(const std::string& text, int limit) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
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
  if (c != "ADD" && c != "DEL" && c != "CHECK") return;
  if (!IsCniIdentifier(env.container_id, kMaxIdBytes)) {
    InvalidEnv("CNI_CONTAINERID", env.container_id,
               "has characters other than [a-zA-Z0-9_.-] (or does not start with a letter or digit)");
  }
  if (const char* why = InterfaceNameProblem(env.ifname)) InvalidEnv("CNI_IFNAME", env.ifname, why);
  if (!env.netns.empty()) {
    if (const char* why = NetnsPathProblem(env.netns)) InvalidEnv("CNI_NETNS", env.netns, why);
  }
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
    if (key == "K8S_POD_NAME")
      out.pod_name = value;
    else if (key == "K8S_POD_NAMESPACE")
      out.pod_namespace = value;
    else if (key == "K8S_POD_INFRA_CONTAINER_ID")
      out.infra_container_id = value;
    else if (key == "K8S_POD_UID")
      out.pod_uid = value;
    // Anything else (IgnoreUnknown, runtime-specific keys) is not ours to judge.
  }
  // An empty value is an absent key (a pod without a name is not a Kubernetes pod).
  if (!out.pod_name.empty() && !IsDns1123Subdomain(out.pod_name)) {
    InvalidArg("K8S_POD_NAME", out.pod_name, "is not a Kubernetes pod name (DNS-1123 subdomain)");
  }
  if (!out.pod_namespace.empty() && !IsDns1123Label(out.pod_namespace)) {
    InvalidArg("K8S_POD_NAMESPACE", out.pod_namespace, "is not a Kubernetes namespace name (DNS-1123 label)");
  }
  if (!out.pod_uid.empty() && !IsCniIdentifier(out.pod_uid, kMaxPodUidBytes)) {
    InvalidArg("K8S_POD_UID", out.pod_uid, "is not a pod UID (at most 128 of [a-zA-Z0-9_.-])");
  }
  if (!out.infra_container_id.empty() && !IsCniIdentifier(out.infra_container_id, kMaxIdBytes)) {
    InvalidArg("K8S_POD_INFRA_CONTAINER_ID", out.infra_container_id, "is not a container ID");
  }
  return out;
}

PluginConfig ParseConfig(const std::string& stdin_data, std::string* version_for_errors) {
  if (NestedDeeperThan(stdin_data, kMaxJsonDepth)) {
    throw CniError(kDecodeFailure, "failed to decode network config from stdin",
                   "nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  ordered_json conf;
  try {
    conf = ordered_json::parse(stdin_data);
  } catch (const ordered_json::exception& e) {
    throw CniError(kDecodeFailure, "failed to decode network config from stdin", e.what());
  }
  if (!conf.is_object())
    throw CniError(kDecodeFailure, "failed to decode network config from stdin", "not a JSON object");

  PluginConfig pc;
  // As the Go CNI library: a config without cniVersion is 0.1.0, which is not supported here.
  auto v = conf.find("cniVersion");
  if (v != conf.end() && !v->is_string())
    throw CniError(kDecodeFailure, "failed to decode cniVersion", "cniVersion must be a string");
  pc.cni_version = v == conf.end() ? "0.1.0" : v->get<std::string>();
  if (!IsSupportedCniVersion(pc.cni_version)) {
    std::string supported;
    for (const auto& s : SupportedCniVersions()) supported += (supported.empty() ? "" : ", ") + s;
    throw CniError(kIncompatibleCniVersion, "incompatible CNI versions",
                   "config is \"" + pc.cni_version + "\", plugin supports [" + supported + "]");
  }
  if (version_for_errors) *version_for_errors = pc.cni_version;

  pc.name = StringField(conf, "name", "");
  // skel's validateConfig, for every command but VERSION.
  if (pc.name.empty()) throw CniError(kInvalidNetworkConfig, "missing network name");
  if (!IsCniIdentifier(pc.name, kMaxIdBytes))
    throw CniError(kInvalidNetworkConfig, "invalid characters found in network name", Shown(pc.name));
  pc.type = StringField(conf, "type", "");
  pc.agent_run_dir = StringField(conf, "cni_agent_run_dir", pc.agent_run_dir);
  if (pc.agent_run_dir.empty()) pc.agent_run_dir = "/var/run/istio-cni";
  // JSON can carry "\u0000", which would silently cut the socket path short.
  if (pc.agent_run_dir[0] != '/' || pc.agent_run_dir.find('\0') != std::string::npos) {
    throw CniError(kInvalidNetworkConfig, "invalid network config: \"cni_agent_run_dir\" must be an absolute path",
                   Shown(pc.agent_run_dir));
  }
  pc.ambient_enabled = BoolField(conf, "ambient_enabled", false);
  pc.pod_namespace = StringField(conf, "pod_namespace", "");
  pc.plugin_log_level = StringField(conf, "plugin_log_level", "info");
  pc.native_nftables = BoolField(conf, "native_nftables", false);
  pc.enable_ambient_detection_retry = BoolField(conf, "enable_ambient_detection_retry", false);

  auto ex = conf.find("exclude_namespaces");
  if (ex != conf.end() && !ex->is_null()) {
    if (!ex->is_array())
      throw CniError(kInvalidNetworkConfig,
                     "invalid network config: \"exclude_namespaces\" must be an array of strings or null");
    for (const auto& n : *ex) {
      if (!n.is_string())
        throw CniError(kInvalidNetworkConfig,
                       "invalid network config: \"exclude_namespaces\" must be an array of strings or null");
      pc.exclude_namespaces.push_back(n.get<std::string>());
    }
  }

  auto sel = conf.find("enablement_selectors");
  if (sel != conf.end() && !sel->is_null()) {
    if (!sel->is_array())
      throw CniError(kInvalidNetworkConfig,
                     "invalid network config: \"enablement_selectors\" must be an array or null");
    pc.enablement_selectors = nlohmann::json::parse(sel->dump());
  }

  auto prev = conf.find("prevResult");
  if (prev != conf.end() && !prev->is_null()) {
    if (!prev->is_object())
      throw CniError(kInvalidNetworkConfig, "invalid network config: \"prevResult\" must be an object");
    pc.has_prev_result = true;
    pc.prev_result = *prev;
  }
  return pc;
}

}  // namespace istio_cni
