#include "log.h"

#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent_client.h"

namespace istio_cni {
namespace {

// Istio's plugin uses a 1 s HTTP client timeout for its log sink; the agent answers in well
// under a millisecond, so this only bounds the damage of a wedged agent.
constexpr int kSinkTimeoutMs = 1000;
constexpr const char* kSinkRoute = "/log";  // Istio's constants.UDSLogPath
// A normal invocation logs a handful of lines; this only caps a pathological one (and stays
// well under the agent's 1 MiB body limit). Lines past it still reach stderr.
constexpr size_t kMaxKeptBytes = 256 * 1024;

int g_threshold = static_cast<int>(LogLevel::kInfo);
std::string g_command, g_pod, g_container;

struct KeptLine {
  LogLevel level;
  std::string text;  // one JSON line with its "\n", as zap's encoder hands it to Istio's sink
};
std::vector<KeptLine> g_kept;
size_t g_kept_bytes = 0;
std::string g_sink;

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
  }
  return "info";
}

bool Enabled(LogLevel level) { return static_cast<int>(level) >= g_threshold; }

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

std::string FormatLine(LogLevel level, const std::string& msg) {
  nlohmann::ordered_json line;
  line["time"] = Now();
  line["level"] = LevelName(level);
  line["scope"] = "cni-plugin";
  line["msg"] = msg;
  if (!g_command.empty()) line["command"] = g_command;
  if (!g_pod.empty()) line["pod"] = g_pod;
  if (!g_container.empty()) line["container"] = g_container;
  // Invalid UTF-8 (from a pod name or an agent reply) must not throw out of the logger.
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

void WriteStderr(const std::string& text) {
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

}  // namespace

bool SetLogLevel(const std::string& name) {
  if (name == "debug")
    g_threshold = static_cast<int>(LogLevel::kDebug);
  else if (name == "info")
    g_threshold = static_cast<int>(LogLevel::kInfo);
  else if (name == "warn" || name == "warning")
    g_threshold = static_cast<int>(LogLevel::kWarn);
  else if (name == "error")
    g_threshold = static_cast<int>(LogLevel::kError);
  // Istio's "fatal": only fatal lines, and this plugin has none, so it logs nothing (as "none").
  else if (name == "fatal" || name == "none")
    g_threshold = static_cast<int>(LogLevel::kError) + 1;
  else
    return false;
  return true;
}

void SetLogContext(const std::string& command, const std::string& pod, const std::string& container) {
  g_command = command;
  g_pod = pod;
  g_container = container;
}

void Log(LogLevel level, const std::string& msg) {
  if (!Enabled(level)) return;
  std::string text = FormatLine(level, msg);
  WriteStderr(text);
  if (g_kept_bytes + text.size() <= kMaxKeptBytes) {
    g_kept_bytes += text.size();
    g_kept.push_back(KeptLine{level, std::move(text)});
  }
}

void SetLogSink(const std::string& socket_path) { g_sink = socket_path; }

void FlushLogSink() noexcept {
  try {
    if (g_sink.empty()) return;
    // The level may have been raised after early lines were logged at the default (info).
    nlohmann::json lines = nlohmann::json::array();
    for (const KeptLine& k : g_kept) {
      if (Enabled(k.level)) lines.push_back(k.text);
    }
    g_kept.clear();
    g_kept_bytes = 0;
    if (lines.empty()) return;  // a quiet invocation costs the agent nothing
    // Istio's plugin tees only when the socket exists: no agent (or Istio's agent with its log
    // server off) means stderr only, without even a connect attempt.
    struct stat st {};
    if (stat(g_sink.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return;
    const std::string body = lines.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    AgentReply reply = PostToAgent(g_sink, kSinkRoute, body, kSinkTimeoutMs);
    std::string problem;
    if (!reply.reached)
      problem = reply.error;
    else if (reply.status != 200)
      problem = "status " + std::to_string(reply.status);
    // Noted on stderr only (never sent: the sink is what failed), and only at debug.
    if (!problem.empty() && Enabled(LogLevel::kDebug)) {
      WriteStderr(FormatLine(LogLevel::kDebug,
                             "could not send the plugin log to the node agent at " + g_sink + ": " + problem));
    }
  } catch (...) {
    // Out of memory or similar while logging: the CNI result is already on stdout.
  }
}

}  // namespace istio_cni
