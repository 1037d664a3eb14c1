// ADD, DEL and CHECK: which pods the plugin leaves alone, what it tells the agent, and what an
// unreachable or unhappy agent means for the pod. Each returns what goes to stdout (or nothing)
// and throws CniError for the spec error object.
#pragma once

#include <string>

#include "config.h"

namespace istio_cni {

struct Invocation {
  CniEnv env;
  K8sArgs k8s;
  PluginConfig config;
};

std::string CmdAdd(const Invocation& inv);
void CmdDel(const Invocation& inv);
void CmdCheck(const Invocation& inv);
// GC forwards cni.dev/valid-attachments from the raw config on stdin.
void CmdGc(const Invocation& inv, const std::string& stdin_data);

}  // namespace istio_cni
