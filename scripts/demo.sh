#!/usr/bin/env bash
# The demo (as root, no Kubernetes): prepares the machine if needed (packages, npm ci, build),
# then runs `ambient-node-agent demo`: a node namespace with the real bridge + host-local CNI
# plugins chained with ours, the agent, a ztunnel stand-in, three pods and their traffic.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) -eq 0 ]] || { echo "demo: run as root (it creates network namespaces)" >&2; exit 1; }
if [[ ! -f dist/src/cli/main.js || ! -f build/Release/istio-cni || ! -x /usr/lib/cni/bridge ]]; then
  scripts/bootstrap.sh --no-test
fi
exec node dist/src/cli/main.js demo
