// Plugin logging: JSON lines on stderr (stdout belongs to the CNI result). The runtime copies a
// plugin's stderr into its own log, so every line must stand alone: one line per event, carrying
// the pod and container it is about. Quiet by default: normal events are debug, and a warning
// means something is wrong.
//
// The same lines are also teed to the node agent, as Istio's plugin does: once the network
// config names the run dir, SetLogSink points at <run dir>/log.sock, and FlushLogSink (called
// once as the process ends) sends this invocation's lines in one `POST /log` whose body is a
// JSON array of strings, each string one JSON log line. The agent re-emits them in its own log
// under scope cni-plugin, which is where operators look (the runtime's log is on the node).
#pragma once

#include <string>

namespace istio_cni {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Istio's level names; "warning" is accepted as Istio's scopes spell it, "none" silences all.
// Unknown names leave the default (info) in place and return false.
bool SetLogLevel(const std::string& name);

// Context added to every later line (empty values are left out).
void SetLogContext(const std::string& command, const std::string& pod, const std::string& container);

void Log(LogLevel level, const std::string& msg);
inline void LogDebug(const std::string& msg) { Log(LogLevel::kDebug, msg); }
inline void LogInfo(const std::string& msg) { Log(LogLevel::kInfo, msg); }
inline void LogWarn(const std::string& msg) { Log(LogLevel::kWarn, msg); }
inline void LogError(const std::string& msg) { Log(LogLevel::kError, msg); }

// The agent's log socket (<run dir>/log.sock). Lines logged before this call are kept too.
void SetLogSink(const std::string& socket_path);

// Sends the kept lines at or above the log level to the sink, if one is set, the socket exists
// and there is anything to send. Logging must never fail or hold up the CNI result: the whole
// exchange is bounded by 1 s, and a failure is only noted on stderr at debug level. Never throws.
void FlushLogSink() noexcept;

}  // namespace istio_cni
