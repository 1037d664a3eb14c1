// Plugin logging: JSON lines on stderr only (stdout belongs to the CNI result). The runtime
// copies a plugin's stderr into its own log, so every line must stand alone: one line per event,
// carrying the pod and container it is about. Quiet by default: normal events are debug, and a
// warning means something is wrong.
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

}  // namespace istio_cni
