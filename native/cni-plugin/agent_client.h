// One POST to the node agent over its Unix socket, under one overall deadline (connect, write
// and read all count against it), like Istio's 5 s HTTP client timeout. Poll-based: no threads,
// no signals, nothing left running when it returns.
#pragma once

#include <string>

namespace istio_cni {

struct AgentReply {
  // false: no HTTP reply came back (socket missing, connection refused or reset, timeout, a
  // reply that was not HTTP). The caller decides what an absent agent means for the pod.
  bool reached = false;
  int status = 0;
  std::string body;
  std::string error;  // why not reached, for logs and error details
};

AgentReply PostToAgent(const std::string& socket_path, const std::string& route, const std::string& json_body,
                       int timeout_ms);

}  // namespace istio_cni
