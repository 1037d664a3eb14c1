#!/usr/bin/env bash
# Prepares a fresh Debian machine (as root) and runs the whole test suite:
# system packages (idempotent), npm ci, build (addon + TypeScript), npm run lint, npm test on the
# machine's Node, then the same tests on Node 24, the LTS the image runs (scripts/test-node-lts.sh).
# Usage: scripts/bootstrap.sh [--no-test]
set -euo pipefail
cd "$(dirname "$0")/.."

# libnftables-dev/libnftnl-dev/libmnl-dev: the addon links them (libnftnl: the prebuilt rule batches); nlohmann-json3-dev: the CNI plugin parses JSON;
# containernetworking-plugins: bridge/host-local for the demo; nftables/iptables/iproute2: the tests use the
# real binaries as independent witnesses; g++/make/python3: node-gyp; containerd/runc: the end-to-end test
# with a real container runtime (test/priv/e2e-containerd.test.ts; gcc, from g++, builds its pause image);
# clang-format: npm run lint checks native/.
PACKAGES=(libnftables-dev libmnl-dev libnftnl-dev nlohmann-json3-dev nftables iptables ipset iproute2 containernetworking-plugins g++ make python3 containerd runc clang-format)

missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "bootstrap: missing packages ${missing[*]}; run as root to install them" >&2
    exit 1
  fi
  echo "bootstrap: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Checked: an npm that prints an error and exits 0 has been seen (scripts/npm-checked.mjs).
node scripts/npm-checked.mjs ci --no-audit --no-fund
npm run build

if [[ ${1:-} != --no-test ]]; then
  npm run lint
  npm test
  bash scripts/test-node-lts.sh
fi
