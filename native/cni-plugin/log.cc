#include "log.h"

#include <time.h>
#include <unistd.h>

#include <cstdio>

#include <nlohmann/json.hpp>

namespace istio_cni {
namespace {

int g_threshold = static_cast<int>(LogLevel::kInfo);
std::string g_command, g_pod, g_container;

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
  }
  return "info";
}

// RFC 3339 UTC with microseconds, like Istio's log timestamps.
std::string Now() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm parts{};
  gmtime_r(&ts.tv_sec, &parts);
  char buf[64];
  size_t n = strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &parts);
  snprintf(buf + n, sizeof buf - n, ".%06ldZ", static_cast<long>(ts.tv_nsec / 1000));
  return buf;
}

}  // namespace

bool SetLogLevel(const std::string& name) {
  if (name == "debug") g_threshold = static_cast<int>(LogLevel::kDebug);
  else if (name == "info") g_threshold = static_cast<int>(LogLevel::kInfo);
  else if (name == "warn" || name == "warning") g_threshold = static_cast<int>(LogLevel::kWarn);
  else if (name == "error") g_threshold = static_cast<int>(LogLevel::kError);
  else if (name == "none") g_threshold = static_cast<int>(LogLevel::kError) + 1;
  else return false;
  return true;
}

void SetLogContext(const std::string& command, const std::string& pod, const std::string& container) {
  g_command = command;
  g_pod = pod;
  g_container = container;
}

void Log(LogLevel level, const std::string& msg) {
  if (static_cast<int>(level) < g_threshold) return;
  nlohmann::ordered_json line;
  line["time"] = Now();
  line["level"] = LevelName(level);
  line["scope"] = "cni-plugin";
  line["msg"] = msg;
  if (!g_command.empty()) line["command"] = g_command;
  if (!g_pod.empty()) line["pod"] = g_pod;
  if (!g_container.empty()) line["container"] = g_container;
  // Invalid UTF-8 (from a pod name or an agent reply) must not throw out of the logger.
  std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  // One write() per line so concurrent plugin runs sharing the runtime's stderr do not interleave.
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t w = write(STDERR_FILENO, p, left);
    if (w <= 0) return;  // nowhere else to report it
    p += w;
    left -= static_cast<size_t>(w);
  }
}

}  // namespace istio_cni
