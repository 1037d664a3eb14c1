# syntax=docker/dockerfile:1
# ambient-node-agent: the image for the istio-cni-node DaemonSet (deploy/).
#
#   docker build -t ambient-node-agent:0.1.0 .
#
# Two stages: "build" has the compilers and the -dev packages and builds the Node-API addon
# (build/Release/ambient_native.node, linked against libnftables + libmnl), the static CNI plugin
# (build/Release/istio-cni) and the TypeScript (dist/); the runtime stage gets only the built
# files, the production node_modules and the shared libraries the addon needs. Both stages are
# Debian bookworm, so the addon runs against the same libnftables/libmnl it was linked with.

############################################################################################
FROM node:20-bookworm AS build

# libnftables-dev/libnftnl-dev/libmnl-dev: the addon links them; nlohmann-json3-dev: the plugin parses JSON;
# g++/make/python3: node-gyp (the plugin is linked -static, with libc6-dev's and g++'s archives).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libnftables-dev libnftnl-dev libmnl-dev nlohmann-json3-dev g++ make python3 \
 && rm -rf /var/lib/apt/lists/*

# node-gyp compiles against the headers the official image ships under /usr/local/include/node
# instead of downloading them.
ENV npm_config_nodedir=/usr/local

WORKDIR /src

# Dependencies first (a layer that survives source edits). binding.gyp is not here yet, so
# npm ci does not try to build the addon before its sources exist.
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund

COPY binding.gyp tsconfig.json ./
COPY native ./native
COPY src ./src
# node-gyp rebuild (addon + plugin), then tsc -> dist/src/...; then drop the dev dependencies
# (typescript, node-gyp, vitest, ...) so node_modules can be copied as is.
RUN npm run build \
 && test -x build/Release/istio-cni \
 && test -f build/Release/ambient_native.node \
 && test -f dist/src/cli/main.js \
 && npm prune --omit=dev --no-audit --no-fund

############################################################################################
FROM node:20-bookworm-slim AS runtime

# Runtime libraries only, no compiler: libnftables1/libnftnl11/libmnl0 for the addon; nftables (nft),
# iptables (iptables-restore/-save for the iptables backend, NATIVE_NFTABLES=false) and iproute2
# (ip) for that backend and for looking at a node by hand (kubectl exec).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libnftables1 libnftnl11 libmnl0 nftables iptables iproute2 \
 && rm -rf /var/lib/apt/lists/*

# /app is the app root: the folder with package.json (src/project-root.ts). From it the agent
# loads build/Release/ambient_native.node (src/addon/binding.ts) and src/zds/zds.proto
# (src/zds/codec.ts); package.json also makes dist/ ES modules ("type": "module").
WORKDIR /app
COPY --from=build /src/package.json ./package.json
COPY --from=build /src/node_modules ./node_modules
COPY --from=build /src/dist ./dist
COPY --from=build /src/src/zds/zds.proto ./src/zds/zds.proto
COPY --from=build /src/build/Release/ambient_native.node ./build/Release/ambient_native.node
COPY --from=build /src/build/Release/istio-cni /app/build/Release/istio-cni

# The plugin binary the installer copies into the host's CNI bin dir (--plugin-source).
ENV CNI_PLUGIN_SOURCE=/app/build/Release/istio-cni

# Compatibility with Istio's own Helm chart (image override): its DaemonSet runs
# `install-cni --log_output_level=...` and overrides ENTRYPOINT. Istio's Go-style flags mean
# nothing here (LOG_LEVEL does), so they are dropped. See deploy/README.md.
RUN printf '%s\n' '#!/bin/sh' \
      '# Istio chart compatibility: its flags (--log_output_level, --log_as_json) are ignored.' \
      'exec node /app/dist/src/cli/main.js run' > /usr/local/bin/install-cni \
 && chmod 0755 /usr/local/bin/install-cni

# Runs as root on purpose: the agent enters pod network namespaces (setns, CAP_SYS_ADMIN), reads
# /host/proc/<pid>/ns/net (CAP_SYS_PTRACE), programs nftables/iptables/routes (CAP_NET_ADMIN,
# CAP_NET_RAW) and writes into root-owned hostPath dirs (CAP_DAC_OVERRIDE). The DaemonSet drops
# every other capability (privileged: false, capabilities drop ALL + those five).
USER root

# 8000: /healthz and /readyz; 15014: /metrics (the pod runs with hostNetwork).
EXPOSE 8000 15014

ENTRYPOINT ["node", "/app/dist/src/cli/main.js"]
CMD ["run"]
