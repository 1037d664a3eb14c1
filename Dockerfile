# ambient-node-agent: the image for the istio-cni-node DaemonSet (deploy/, or Istio's own chart).
#
#   podman build -t ambient-node-agent:0.1.0 .     (or docker build; no BuildKit feature is used)
#
# Three stages. "build" has the compilers and the -dev packages and builds the Node-API addon
# (build/Release/ambient_native.node, linked against libnftables + libmnl), the static CNI plugin
# (build/Release/istio-cni) and the TypeScript (dist/). "rootfs" is Node's slim image with the
# runtime libraries, the built files and the production node_modules, with npm, yarn, corepack and
# Node's C headers removed. The final image is that file tree copied onto scratch, one layer, so
# the removed files are not in a lower layer either. All on Debian bookworm, so the addon runs
# against the libnftables/libmnl it was linked with. Node 24 (the current LTS) in both.
#
# Istio's image layout, which Istio's chart and users rely on: /usr/local/bin/install-cni (the
# chart's `command: ["install-cni"]`) and the plugin at /opt/cni/bin/istio-cni.

############################################################################################
FROM node:24-bookworm AS build

# libnftables-dev/libnftnl-dev/libmnl-dev: the addon links them; nlohmann-json3-dev: the plugin parses JSON;
# g++/make/python3: node-gyp (the plugin is linked -static, with libc6-dev's and g++'s archives).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libnftables-dev libnftnl-dev libmnl-dev nlohmann-json3-dev g++ make python3 \
 && rm -rf /var/lib/apt/lists/*

# node-gyp compiles against the headers the official image ships under /usr/local/include/node
# instead of downloading them (node-gyp's own variable: npm 11 warns about npm_config_nodedir).
ENV npm_package_config_node_gyp_nodedir=/usr/local

WORKDIR /src

# Dependencies first (a layer that survives source edits). binding.gyp is not here yet, so
# npm ci does not try to build the addon before its sources exist. npm runs through
# scripts/npm-checked.mjs: an npm that prints an error and exits 0 fails the build there, and so
# does a node_modules that does not match package-lock.json.
COPY package.json package-lock.json ./
COPY scripts/npm-checked.mjs ./scripts/npm-checked.mjs
RUN node scripts/npm-checked.mjs ci --no-audit --no-fund

COPY binding.gyp tsconfig.json ./
COPY native ./native
COPY src ./src
# node-gyp rebuild (addon + plugin), then tsc -> dist/src/...; then drop the dev dependencies
# (typescript, node-gyp, vitest, ...) so node_modules can be copied as is.
RUN npm run build \
 && test -x build/Release/istio-cni \
 && test -f build/Release/ambient_native.node \
 && test -f dist/src/cli/main.js \
 && node scripts/npm-checked.mjs prune --omit=dev --no-audit --no-fund

############################################################################################
FROM node:24-bookworm-slim AS rootfs

# Runtime libraries only, no compiler: libnftables1/libnftnl11/libmnl0 for the addon; nftables (nft),
# iptables (iptables-restore/-save for the iptables backend, NATIVE_NFTABLES=false) and iproute2
# (ip) for that backend and for looking at a node by hand (kubectl exec).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libnftables1 libnftnl11 libmnl0 nftables iptables iproute2 \
 && rm -rf /var/lib/apt/lists/*

# Nothing at run time needs a package manager or Node's C headers: npm, npx, corepack, yarn
# (/opt/yarn-*) and /usr/local/include/node go.
RUN rm -rf /usr/local/lib/node_modules /usr/local/include/node /opt/yarn-v* \
      /usr/local/bin/npm /usr/local/bin/npx /usr/local/bin/corepack /usr/local/bin/yarn /usr/local/bin/yarnpkg \
 && node --version

# /app is the app root: the folder with package.json (src/project-root.ts). From it the agent
# loads build/Release/ambient_native.node (src/addon/binding.ts); package.json also makes dist/
# ES modules ("type": "module"). The ZDS codec is code in dist/ (src/zds/zds-static.js).
WORKDIR /app
COPY --from=build /src/package.json ./package.json
COPY --from=build /src/node_modules ./node_modules
COPY --from=build /src/dist ./dist
COPY --from=build /src/build/Release/ambient_native.node ./build/Release/ambient_native.node
# The plugin binary the installer copies into the host's CNI bin dir, where Istio's image has it.
COPY --from=build /src/build/Release/istio-cni /opt/cni/bin/istio-cni

# install-cni (Istio's entrypoint name) and ambient-node-agent are the CLI itself (its
# `#!/usr/bin/env node` line), no wrapper script: started as install-cni it is Istio's command
# line (src/cli/install-cni-command.ts).
RUN chmod 0755 /app/dist/src/cli/main.js /opt/cni/bin/istio-cni \
 && ln -s /app/dist/src/cli/main.js /usr/local/bin/install-cni \
 && ln -s /app/dist/src/cli/main.js /usr/local/bin/ambient-node-agent \
 && /usr/local/bin/install-cni --help > /dev/null

# Node's compile cache for the final stage's NODE_COMPILE_CACHE (same path, same Node): every
# module under dist/src and what it imports, compiled once here (scripts/warm-compile-cache.mjs).
COPY scripts/warm-compile-cache.mjs ./scripts/warm-compile-cache.mjs
RUN NODE_COMPILE_CACHE=/app/compile-cache node scripts/warm-compile-cache.mjs /app

############################################################################################
FROM scratch

COPY --from=rootfs / /

ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/cni/bin
# The plugin binary the installer copies into the host's CNI bin dir (--plugin-source).
ENV CNI_PLUGIN_SOURCE=/opt/cni/bin/istio-cni
# Node 24's memory, as npm run bench:node measures it (it runs the agent on this Node with these
# variables): V8 grows the young generation up to 2 x 32 MB semi-spaces (Node 20: 2 x 16 MB) and
# keeps it committed: +36 MB of RSS under a steady pod churn (test/priv/soak.test.ts), +6 MB with
# 110 pods after 200 ADDs and their /metrics scrapes even at Node 20's ceiling, for no retained
# data. 4 MB semi-spaces keep it at 2 x 4 MB (-6 MB there); the agent allocates little, and the
# extra scavenges did not move the ADD latency or the burst measurably. glibc gives every thread
# that mallocs an arena of its own (the netns threads, libuv's, V8's): two arenas are -3.5 MB.
# And glibc raises its mmap and trim thresholds each time a large block is freed (up to 32 and
# 64 MB), after which freed memory stays with the process: fixed at their 128 KB defaults, -4 MB
# with 110 pods (85-87 against 89-92 MB, four runs each, the same ADD latency and burst).
# scripts/test-node-lts.sh runs the tests on Node 24 with the same variables.
ENV NODE_OPTIONS=--max-semi-space-size=4
ENV MALLOC_ARENA_MAX=2
ENV MALLOC_TRIM_THRESHOLD_=131072
ENV MALLOC_MMAP_THRESHOLD_=131072
# V8's code for every module the agent loads, compiled at build time (the rootfs stage): a restarted
# agent reads it instead of compiling (~20 ms of a standalone restart, ~70 ms more with the
# Kubernetes client). A cache entry whose source changed is recompiled; nothing is written while
# the agent runs unless a module was not cached.
ENV NODE_COMPILE_CACHE=/app/compile-cache

WORKDIR /app

# Runs as root on purpose: the agent enters pod network namespaces (setns, CAP_SYS_ADMIN), reads
# /host/proc/<pid>/ns/net (CAP_SYS_PTRACE), programs nftables/iptables/routes (CAP_NET_ADMIN,
# CAP_NET_RAW) and writes into root-owned hostPath dirs (CAP_DAC_OVERRIDE). The DaemonSet drops
# every other capability (privileged: false, capabilities drop ALL + those five).
USER root

# 8000: /healthz and /readyz; 15014: /metrics. Nothing else listens on the network (the debug
# endpoints are on <run dir>/debug.sock).
EXPOSE 8000 15014

# As Istio's image: install-cni by default (the chart sets command: ["install-cni"] anyway).
CMD ["/usr/local/bin/install-cni"]
