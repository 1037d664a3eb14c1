// istio-cni: the chained CNI plugin for ambient mode. It runs on the host for every pod
// sandbox, so it is a small static binary with no runtime dependencies, and it only forwards
// pod events to the node agent over <cni_agent_run_dir>/pluginevent.sock (and its log lines to
// <cni_agent_run_dir>/log.sock when that exists).
// This file only dispatches CNI_COMMAND and turns failures into spec error objects.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <exception>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "config.h"
#include "errors.h"
#include "log.h"
#include "versions.h"

namespace istio_cni {
namespace {

constexpr const char* kLogSocket = "log.sock";  // protocol.ts PLUGIN_LOG_SOCKET

void WriteAll(int fd, const std::string& text) {
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = write(fd, p, left);
    if (n <= 0) return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

// The network config (and prevResult) arrive on stdin; 16 MiB is far more than any real one.
std::string ReadStdin() {
  std::string data;
  char buf[65536];
  for (;;) {
    ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
    if (n > 0) {
      data.append(buf, static_cast<size_t>(n));
      if (data.size() > (16u << 20)) throw CniError(kDecodeFailure, "network config on stdin is larger than 16 MiB");
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  return data;
}

void PrintError(const std::string& version, int code, const std::string& msg, const std::string& details) {
  nlohmann::ordered_json err;
  err["cniVersion"] = version;
  err["code"] = code;
  err["msg"] = msg;
  err["details"] = details;
  WriteAll(STDOUT_FILENO, err.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

int Run(std::string* version_for_errors) {
  CniEnv env = ReadCniEnv();
  if (env.command.empty()) throw CniError(kInvalidEnvironment, "required env variable CNI_COMMAND missing");

  if (env.command == "VERSION") {
    WriteAll(STDOUT_FILENO, VersionInfoJson() + "\n");
    return 0;
  }
  const std::string& cmd = env.command;
  if (cmd != "ADD" && cmd != "DEL" && cmd != "CHECK" && cmd != "STATUS" && cmd != "GC") {
    throw CniError(kInvalidEnvironment, "unknown CNI_COMMAND: " + cmd);
  }
  RequireEnvFor(env);

  Invocation inv;
  inv.env = env;
  std::string stdin_data = ReadStdin();
  try {
    inv.config = ParseConfig(stdin_data, version_for_errors);
  } catch (const CniError& e) {
    // A DEL with a config we cannot read still must not block the sandbox's removal; only the
    // decode and version errors the runtime itself would get from any plugin are reported.
    if (cmd == "DEL" && e.code() == kInvalidNetworkConfig) {
      LogWarn(std::string("DEL with an unusable network config, nothing forwarded: ") + e.what());
      return 0;
    }
    throw;
  }
  SetLogSink(inv.config.agent_run_dir + "/" + kLogSocket);
  if (!SetLogLevel(inv.config.plugin_log_level))
    LogWarn("unknown plugin_log_level \"" + inv.config.plugin_log_level + "\", using info");

  // STATUS always reports ready. The plugin can serve ADD whatever the agent's state: an
  // ambient pod fails closed on its own ADD when the agent is down, while reporting not-ready
  // here would stop the runtime from creating every pod on the node, mesh or not.
  if (cmd == "STATUS") return 0;
  // GC: the runtime's list of live attachments goes to the agent (standalone mode removes the
  // enrolments the runtime no longer has; Kubernetes mode follows its informer and ignores it).
  if (cmd == "GC") {
    CmdGc(inv, stdin_data);
    return 0;
  }

  inv.k8s = ParseCniArgs(env.args);
  SetLogContext(cmd, inv.k8s.pod_name.empty() ? "" : inv.k8s.pod_namespace + "/" + inv.k8s.pod_name, env.container_id);
  if (cmd == "ADD") {
    WriteAll(STDOUT_FILENO, CmdAdd(inv));
  } else if (cmd == "DEL") {
    CmdDel(inv);
  } else {
    CmdCheck(inv);
  }
  return 0;
}

}  // namespace
}  // namespace istio_cni

int main() {
  using namespace istio_cni;
  // Belt and braces next to MSG_NOSIGNAL: a closed stdout/stderr must not kill us mid-write.
  signal(SIGPIPE, SIG_IGN);
  std::string version = kLatestCniVersion;  // until the config says which version it speaks
  int status = 1;
  try {
    status = Run(&version);
  } catch (const CniError& e) {
    PrintError(version, e.code(), e.what(), e.details());
  } catch (const std::exception& e) {
    PrintError(version, kInternal, "istio-cni: internal error", e.what());
  } catch (...) {
    PrintError(version, kInternal, "istio-cni: internal error", "");
  }
  // Last, after the result or error is on stdout, so every exit path passes here. The runtime
  // reads the result when we exit, so a slow log socket could only delay it by the sink's 1 s.
  FlushLogSink();
  return status;
}
