#include "enablement.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include <nlohmann/json.hpp>

namespace istio_cni {
namespace {

constexpr const char* kSnapshotFile = "ambient-enablement.json";
constexpr size_t kMaxSnapshotBytes = 4 << 20;  // a namespace list; a larger file is not ours

EnablementVerdict Unknown(const std::string& why) { return {NamespaceMode::kUnknown, why}; }

bool ReadSmallFile(const std::string& path, std::string* out, std::string* error) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *error = path + ": " + strerror(errno);
    return false;
  }
  char buf[16384];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = path + ": " + strerror(errno);
      close(fd);
      return false;
    }
    if (n == 0) break;
    out->append(buf, static_cast<size_t>(n));
    if (out->size() > kMaxSnapshotBytes) {
      *error = path + ": larger than 4 MiB";
      close(fd);
      return false;
    }
  }
  close(fd);
  return true;
}

// Strict about shape: a snapshot we do not fully understand is treated as absent rather than
// guessed at (see protocol.ts for the fields).
bool StringList(const nlohmann::json& doc, const char* key, std::vector<std::string>* out) {
  auto it = doc.find(key);
  if (it == doc.end() || !it->is_array()) return false;
  for (const auto& v : *it) {
    if (!v.is_string()) return false;
    out->push_back(v.get<std::string>());
  }
  return true;
}

bool Contains(const std::vector<std::string>& list, const std::string& s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

}  // namespace

EnablementVerdict NamespaceEnablement(const std::string& run_dir, const std::string& pod_namespace) {
  const std::string path = run_dir + "/" + kSnapshotFile;
  std::string text, error;
  if (!ReadSmallFile(path, &text, &error)) return Unknown("enablement snapshot unavailable (" + error + ")");

  nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return Unknown("enablement snapshot " + path + " is not valid JSON");
  auto version = doc.find("version");
  if (version == doc.end() || !version->is_number_integer() || version->get<long long>() != 1) {
    return Unknown("enablement snapshot " + path + " has an unknown version");
  }
  auto all = doc.find("allNamespaces");
  std::vector<std::string> namespaces, excluded;
  if (all == doc.end() || !all->is_boolean() || !StringList(doc, "namespaces", &namespaces) ||
      !StringList(doc, "excludedNamespaces", &excluded)) {
    return Unknown("enablement snapshot " + path + " is malformed");
  }
  auto at = doc.find("generatedAt");
  std::string generated = at != doc.end() && at->is_string() ? at->get<std::string>() : std::string();
  std::string from = " (enablement snapshot generated at " + (generated.empty() ? std::string("?") : generated) + ")";

  if (Contains(namespaces, pod_namespace))
    return {NamespaceMode::kAmbient, "namespace " + pod_namespace + " is ambient" + from};
  if (all->get<bool>() && !Contains(excluded, pod_namespace)) {
    return {NamespaceMode::kAmbient, "all namespaces are ambient and " + pod_namespace + " is not excluded" + from};
  }
  return {NamespaceMode::kNotAmbient, "namespace " + pod_namespace + " is not ambient" + from};
}

}  // namespace istio_cni
