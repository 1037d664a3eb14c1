// Runs a program (argv, never a shell) from a thread that sits in a pod's network namespace:
// the child inherits the thread's namespace, so no setns is needed in the child. Used by the
// iptables backend (iptables-restore) exactly where Istio execs it.
#pragma once

#include <string>
#include <vector>

#include "sys_error.h"

namespace ana {

struct SpawnResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string out;
  std::string err;
};

// The child gets exactly `env` when `replace_env` is set; otherwise it inherits `environ`, which
// is only safe to read here if no other thread can change the environment (binding.cc always
// passes a copy taken on the JS thread instead).
bool SpawnAndWait(const std::vector<std::string>& argv, const std::string& input, int timeout_ms, SpawnResult* result,
                  SysError* err, bool replace_env = false, const std::vector<std::string>& env = {});

}  // namespace ana
