#!/usr/bin/env bash
# Demo (as root): redirect a throw-away "pod" namespace the way Istio ambient does, in-process,
# show what the kernel holds, detect tampering, repair it, and remove everything again.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) -eq 0 ]] || { echo "demo: run as root (it creates a network namespace)" >&2; exit 1; }
[[ -f dist/src/cli/main.js && -f build/Release/ambient_native.node ]] || scripts/bootstrap.sh --no-test

NS="ana-demo-$$"
NETNS="/var/run/netns/$NS"
cleanup() { ip netns del "$NS" 2>/dev/null || true; }
trap cleanup EXIT
agent() { node dist/src/cli/main.js "$@"; }
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

ip netns add "$NS"
ip -n "$NS" link set lo up

step "The rules Istio would apply (byte-identical to Istio's golden file)"
agent rules --ipv6 | head -12; echo "..."

step "Apply them in-process inside $NETNS (libnftables + rtnetlink, no process spawned)"
agent rules --ipv6 --apply "$NETNS"
ip netns exec "$NS" nft list table inet istio-ambient-nat
ip -n "$NS" rule show | grep 0x111
ip -n "$NS" route show table 100

step "Verify: in sync"
agent rules --ipv6 --verify "$NETNS"

step "Tamper: delete the ip rule and add a stray nft rule, then verify again"
ip -n "$NS" rule del fwmark 0x111/0xfff lookup 100
ip netns exec "$NS" nft add rule inet istio-ambient-nat istio-output counter drop
agent rules --ipv6 --verify "$NETNS" || echo "(verify exited $?: drift found)"

step "Repair by applying again (idempotent), then verify"
agent rules --ipv6 --apply "$NETNS"
agent rules --ipv6 --verify "$NETNS"

step "Delete: everything the agent added is gone"
agent rules --ipv6 --delete "$NETNS"
if ip netns exec "$NS" nft list ruleset | grep -q istio; then echo "istio tables remain" >&2; exit 1; fi
ip -n "$NS" rule show | grep -q 0x111 && { echo "ip rule remains" >&2; exit 1; }
echo "no istio tables, ip rule or route left"
