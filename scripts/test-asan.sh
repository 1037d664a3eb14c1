#!/usr/bin/env bash
# npm run test:asan: builds the addon (ambient_native.node) and the CNI plugin (istio-cni) with
# AddressSanitizer + UndefinedBehaviorSanitizer into build-asan/ (never touching build/), then
# runs the tests that execute native code (vitest projects integration and priv, see
# vitest.asan.config.ts) against those builds. Any sanitizer report fails the run.
# Needs root for the priv project (network namespaces), like npm run test:priv.
# Usage: scripts/test-asan.sh [extra vitest arguments, e.g. a test file filter]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$root/build-asan
jobs=$(nproc 2>/dev/null || echo 2)
start=$SECONDS

# --- build --------------------------------------------------------------------------------------
# A copy of what binding.gyp builds, in its own directory: node-gyp always writes to ./build.
# cp -p keeps the sources' mtimes, so make recompiles only what changed since the last run.
mkdir -p "$out"
rm -rf "$out/native"
cp -Rp "$root/native" "$out/native"
cp -p "$root/binding.gyp" "$root/package.json" "$out/"
ln -sfn "$root/node_modules" "$out/node_modules" # node-addon-api

# node-gyp reads npm's config from npm_config_* (set by `npm run`); when this script is run
# directly, pass npm's nodedir on (the headers of the installed Node, no download).
if [[ -z ${npm_config_nodedir:-} ]]; then
  nodedir=$(npm config get nodedir 2>/dev/null || true)
  if [[ -n $nodedir && $nodedir != undefined && $nodedir != null ]]; then export npm_config_nodedir=$nodedir; fi
fi

node_gyp=("$root/node_modules/.bin/node-gyp")
echo "test-asan: building the addon and the plugin with -fsanitize=address,undefined in $out"
(
  cd "$out"
  # sanitize=1: see binding.gyp (sanitizer flags; the plugin is linked dynamically, unstripped).
  # Configured again only when binding.gyp changed: configuring relinks everything.
  if [[ ! -f build/Makefile || binding.gyp -nt build/Makefile ]]; then
    "${node_gyp[@]}" configure --loglevel=warn -- -Dsanitize=1
  fi
  "${node_gyp[@]}" build --loglevel=warn -j "$jobs"
)
addon=$out/build/Release/ambient_native.node
plugin=$out/build/Release/istio-cni
echo "test-asan: built in $((SECONDS - start)) s"

# --- runtime ------------------------------------------------------------------------------------
# Node is not built with ASan: the runtime has to be preloaded into the processes that load the
# sanitized addon (vitest.asan.config.ts sets LD_PRELOAD for the vitest workers, and only them).
# The plugin links libasan/libubsan itself and needs no preload.
cxx=${CXX:-g++}
preload=()
for lib in libasan.so libubsan.so; do
  path=$("$cxx" -print-file-name="$lib")
  if [[ $path != /* || ! -e $path ]]; then
    echo "test-asan: $cxx has no $lib (Debian: apt-get install libasan8 libubsan1)" >&2
    exit 1
  fi
  preload+=("$(readlink -f "$path")")
done
export ASAN_PRELOAD
ASAN_PRELOAD=$(IFS=:; echo "${preload[*]}")

# abort_on_error: a report ends the process with SIGABRT, which vitest reports as a failed run
# (a worker: "Worker exited unexpectedly") and the plugin tests as a failed plugin run (killed
# by a signal instead of exiting with the expected status). -fno-sanitize-recover=undefined and
# halt_on_error make the first UB report fatal too.
#
# LeakSanitizer is off (detect_leaks=0) in the vitest workers, which hold the addon: LSan does
# not scan V8's heap (mmap'd, not malloc'd), so every native object that only a JS object still
# references at exit (a wrapped FdPoller, an external Buffer) would be reported as a leak; and
# vitest ends its workers with SIGTERM, so the at-exit check would not even run. The plugin is
# our own short-lived process: LSan checks it at every exit. ASan reads include_if_exists=<file>
# with %b replaced by the program's name, so only istio-cni reads asan-istio-cni.options
# (detect_leaks=1); there is no asan-node.options.
printf 'detect_leaks=1\n' >"$out/asan-istio-cni.options"
asan=(abort_on_error=1 halt_on_error=1 strict_string_checks=1 check_initialization_order=1
  detect_stack_use_after_return=1 detect_leaks=0 "include_if_exists=$out/asan-%b.options")
ASAN_OPTIONS=$(IFS=:; echo "${asan[*]}")
export ASAN_OPTIONS
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:abort_on_error=1
export AMBIENT_NATIVE_ADDON=$addon
export AMBIENT_CNI_PLUGIN=$plugin
# A sanitized plugin run costs ~10x a normal one (shadow memory, the leak check at exit): a
# quarter of the fuzz runs keeps this within minutes. FUZZ_RUNS_FACTOR=1 for the full count.
export FUZZ_RUNS_FACTOR=${FUZZ_RUNS_FACTOR:-0.25}

# The binary test checks that the normal plugin is static and stripped; the sanitizer build
# cannot be (it is a property of the normal build, which npm test covers).
skip='^(?!.*is statically linked and smaller than 3 MB)'
vitest=("$root/node_modules/.bin/vitest" run --config vitest.asan.config.ts --testNamePattern "$skip")
echo "test-asan: running integration and priv with $addon and $plugin"
"${vitest[@]}" "$@"
echo "test-asan: passed in $((SECONDS - start)) s"
