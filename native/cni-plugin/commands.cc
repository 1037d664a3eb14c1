#include "commands.h"

#include <algorithm>
#include <optional>

#include "agent_client.h"
#include "enablement.h"
#include "errors.h"
#include "log.h"
#include "plugin_event.h"
#include "result.h"

namespace istio_cni {
namespace {

// Istio's plugin HTTP client timeout; the whole exchange (connect, send, reply) must fit in it.
constexpr int kAgentTimeoutMs = 5000;
constexpr const char* kEventSocket = "pluginevent.sock";  // protocol.ts PLUGIN_EVENT_SOCKET

std::string SocketPath(const PluginConfig& c) { return c.agent_run_dir + "/" + kEventSocket; }

std::string PodRef(const K8sArgs& k) { return k.pod_namespace + "/" + k.pod_name; }

// Go's http.Error ends the text with "\n"; one-line error messages read better without it.
std::string TrimBody(std::string body) {
  while (!body.empty() && (body.back() == '\n' || body.back() == '\r' || body.back() == ' ')) body.pop_back();
  return body;
}

// Go's ServeMux answers an unknown route with exactly this. Istio's agent only serves /cmdadd,
// so during an upgrade (this plugin, Istio's agent still running) DEL and CHECK would hit it.
bool IsGoMuxNotFound(const AgentReply& r) { return r.status == 404 && TrimBody(r.body) == "404 page not found"; }

// Pods this plugin never tells the agent about, in Istio's order. The agent's own pods come
// first: they must start even while the agent they belong to is down (else a node reboot
// deadlocks), so nothing else may be consulted for them.
std::optional<std::string> SkipReason(const Invocation& inv) {
  const K8sArgs& k = inv.k8s;
  const PluginConfig& c = inv.config;
  if (k.pod_name.rfind("istio-cni-node-", 0) == 0 && k.pod_namespace == c.pod_namespace)
    return "the istio-cni node agent's own pod";
  if (k.pod_name.empty() || k.pod_namespace.empty())
    return "not a Kubernetes pod (no K8S_POD_NAME / K8S_POD_NAMESPACE in CNI_ARGS)";
  const auto& ex = c.exclude_namespaces;
  if (std::find(ex.begin(), ex.end(), k.pod_namespace) != ex.end())
    return "namespace " + k.pod_namespace + " is excluded";
  if (!c.ambient_enabled) return "ambient is not enabled";
  return std::nullopt;
}

std::string PrintResult(const PluginConfig& c) { return ResultToPrint(c).dump() + "\n"; }

}  // namespace

std::string CmdAdd(const Invocation& inv) {
  // prevResult is validated for every pod (as Istio parses it up front), so a broken chain is
  // reported rather than echoed.
  std::vector<PodIp> ips = PodIpsFromPrevResult(inv.config);
  if (auto why = SkipReason(inv)) {
    LogDebug("skipping: " + *why);
    return PrintResult(inv.config);
  }

  // No Kubernetes API call and no selector evaluation here: the agent has the informer cache
  // and the enablement selectors, and answers 200 for pods it does not enrol.
  AgentReply reply =
      PostToAgent(SocketPath(inv.config), "/cmdadd", AddEventBody(inv.env, inv.k8s, ips), kAgentTimeoutMs);
  if (reply.reached) {
    if (reply.status == 200) {
      LogDebug("agent accepted the pod");
      return PrintResult(inv.config);
    }
    const std::string msg =
        "istio-cni cmdAdd failed to contact node Istio CNI agent: unable to push CNI event (status code " +
        std::to_string(reply.status) + "): " + TrimBody(reply.body);
    LogError(msg);
    throw CniError(kInternal, msg);
  }

  // The agent is down, restarting or wedged. An ambient pod started now would run outside the
  // mesh (fail open is a security hole), so it fails with "try again later" and the runtime
  // retries the sandbox; every other pod must not be held hostage by the mesh agent.
  EnablementVerdict verdict = NamespaceEnablement(inv.config.agent_run_dir, inv.k8s.pod_namespace);
  const std::string unreachable = "node Istio CNI agent unreachable at " + SocketPath(inv.config) + ": " + reply.error;
  if (verdict.mode == NamespaceMode::kAmbient) {
    LogError(unreachable + "; " + verdict.why + ", failing the sandbox so it is retried");
    throw CniError(kTryAgainLater,
                   "istio-cni cmdAdd failed to contact node Istio CNI agent (" + reply.error + "); pod " +
                       PodRef(inv.k8s) + " is in an ambient namespace, try again later",
                   verdict.why);
  }
  LogWarn(unreachable + "; " + verdict.why + ", starting the pod without ambient redirection");
  return PrintResult(inv.config);
}

void CmdDel(const Invocation& inv) {
  if (auto why = SkipReason(inv)) {
    LogDebug("skipping: " + *why);
    return;
  }
  // DEL never fails: the runtime would retry it forever and block the sandbox's removal, and
  // the agent also learns about deleted pods from its informer, which is what cleans up.
  AgentReply reply = PostToAgent(SocketPath(inv.config), "/cmddel", DelEventBody(inv.env, inv.k8s), kAgentTimeoutMs);
  if (!reply.reached) {
    LogWarn("could not tell the node Istio CNI agent about the deleted pod (" + reply.error +
            "); it will clean up from its pod watch");
  } else if (IsGoMuxNotFound(reply)) {
    LogDebug("agent has no /cmddel route (Istio's agent); nothing to do");
  } else if (reply.status != 200) {
    LogWarn("node Istio CNI agent answered DEL with status " + std::to_string(reply.status) + ": " +
            TrimBody(reply.body));
  } else {
    LogDebug("agent acknowledged the deleted pod");
  }
}

void CmdCheck(const Invocation& inv) {
  std::vector<PodIp> ips = PodIpsFromPrevResult(inv.config);
  if (auto why = SkipReason(inv)) {
    LogDebug("skipping: " + *why);
    return;
  }
  AgentReply reply =
      PostToAgent(SocketPath(inv.config), "/cmdcheck", AddEventBody(inv.env, inv.k8s, ips), kAgentTimeoutMs);
  if (!reply.reached) {
    // CHECK is a health probe of a running pod; an agent restart must not make the runtime
    // tear healthy pods down. The agent's own drift detection covers the pod meanwhile.
    LogWarn("node Istio CNI agent unreachable (" + reply.error + "); CHECK passes without it");
    return;
  }
  if (IsGoMuxNotFound(reply)) {
    LogDebug("agent has no /cmdcheck route (Istio's agent); CHECK passes as with Istio's plugin");
    return;
  }
  if (reply.status != 200) {
    const std::string msg = "istio-cni cmdCheck: node Istio CNI agent reported the pod unhealthy (status code " +
                            std::to_string(reply.status) + "): " + TrimBody(reply.body);
    LogError(msg);
    throw CniError(kInternal, msg);
  }
}

void CmdGc(const Invocation& inv, const std::string& stdin_data) {
  // CNI 1.1 GC: the runtime lists every attachment of this network it still has. The agent
  // drops enrolments whose container is not among them (a lost DEL must not pin a dead netns
  // open). Best effort, like DEL: an absent or older agent is not the runtime's problem.
  AgentReply reply = PostToAgent(SocketPath(inv.config), "/cmdgc", GcEventBody(stdin_data), kAgentTimeoutMs);
  if (!reply.reached) {
    LogWarn("could not forward GC to the node Istio CNI agent (" + reply.error +
            "); it keeps its enrolments until the next GC");
  } else if (IsGoMuxNotFound(reply)) {
    LogDebug("agent has no /cmdgc route (Istio's agent); nothing to do");
  } else if (reply.status != 200) {
    const std::string msg = "istio-cni cmdGC: node Istio CNI agent answered status " + std::to_string(reply.status) +
                            ": " + TrimBody(reply.body);
    LogError(msg);
    throw CniError(kInternal, msg);
  }
}

}  // namespace istio_cni
