// The request bodies of the plugin <-> agent contract (src/cni/protocol.ts): PluginAddEvent for
// /cmdadd and /cmdcheck, PluginDelEvent for /cmddel. Field names and order are Go's default JSON
// of Istio's CNIPluginAddEvent, so Istio's agent can read what this plugin sends.
#pragma once

#include <string>
#include <vector>

#include "config.h"
#include "result.h"

namespace istio_cni {

std::string AddEventBody(const CniEnv& env, const K8sArgs& k8s, const std::vector<PodIp>& ips);
std::string DelEventBody(const CniEnv& env, const K8sArgs& k8s);
// /cmdgc: {"ValidAttachments":[{"ContainerID":...,"IfName":...}]} from the config's
// cni.dev/valid-attachments (entries that are not {containerID, ifname} strings are skipped).
std::string GcEventBody(const std::string& config_json);

}  // namespace istio_cni
