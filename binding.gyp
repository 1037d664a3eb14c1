{
  # sanitize=1 (scripts/test-asan.sh: node-gyp configure -- -Dsanitize=1) builds both targets
  # with AddressSanitizer + UBSan; ASan cannot link -static, so the plugin is then dynamic and
  # unstripped. The default (0) leaves the normal build exactly as it was.
  "variables": { "sanitize%": 0 },
  "targets": [
    {
      "target_name": "ambient_native",
      "sources": [
        "native/binding.cc",
        "native/netns.cc",
        "native/netns_executor.cc",
        "native/nft_runner.cc",
        "native/nft_tables.cc",
        "native/ipset.cc",
        "native/nft_batch.cc",
        "native/rtnl.cc",
        "native/rtnl_batch.cc",
        "native/marked_socket.cc",
        "native/spawn.cc",
        "native/steps.cc",
        "native/step_clock.cc",
        "native/heap.cc",
        "native/seqpacket.cc",
        "native/fd_poller.cc",
        "native/netlink_watch.cc"
      ],
      "dependencies": ["<!(node -p \"require('node-addon-api').targets\"):node_addon_api_except"],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++17"],
      "cflags_cc": ["-std=c++17", "-fexceptions", "-Wall", "-Wextra", "-Werror", "-Wno-missing-field-initializers"],
      "libraries": ["-lnftables", "-lnftnl", "-lmnl", "-lpthread"],
      "conditions": [
        ["OS!='linux'", { "type": "none" }],
        ["sanitize==1", {
          "cflags_cc": ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined", "-g", "-O1"],
          "ldflags": ["-fsanitize=address,undefined"]
        }]
      ]
    },
    {
      "target_name": "istio-cni",
      "type": "executable",
      "sources": [
        "native/cni-plugin/main.cc",
        "native/cni-plugin/commands.cc",
        "native/cni-plugin/config.cc",
        "native/cni-plugin/result.cc",
        "native/cni-plugin/plugin_event.cc",
        "native/cni-plugin/http.cc",
        "native/cni-plugin/agent_client.cc",
        "native/cni-plugin/enablement.cc",
        "native/cni-plugin/versions.cc",
        "native/cni-plugin/log.cc"
      ],
      "cflags!": ["-O3", "-fno-omit-frame-pointer", "-fPIC"],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++17", "-O3"],
      "cflags_cc": ["-std=c++17", "-fexceptions", "-Os", "-ffunction-sections", "-fdata-sections", "-Wall", "-Wextra", "-Werror"],
      "ldflags!": ["-rdynamic"],
      "ldflags": ["-static", "-s", "-Os", "-Wl,--gc-sections"],
      "configurations": {
        "Release": { "cflags!": ["-O3"], "cflags_cc!": ["-O3"] },
        "Debug": { "cflags!": ["-O3"], "cflags_cc!": ["-O3"] }
      },
      "conditions": [
        ["OS!='linux'", { "type": "none" }],
        ["sanitize==1", {
          "cflags_cc!": ["-Os"],
          "cflags_cc": ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined", "-g", "-O1"],
          "ldflags!": ["-static", "-s"],
          "ldflags": ["-fsanitize=address,undefined"]
        }]
      ]
    }
    ,{
      # The benchmarks' ZDS peer (bench:node): a native stand-in for ztunnel's side of ZDS.
      "target_name": "zds-peer",
      "type": "executable",
      "sources": ["native/zds_peer/main.cc", "native/zds_peer/wire.cc", "native/zds_peer/listeners.cc"],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++17"],
      "cflags_cc": ["-std=c++17", "-fexceptions", "-O2", "-Wall", "-Wextra", "-Werror", "-Wno-missing-field-initializers"],
      "ldflags!": ["-rdynamic"],
      "libraries": ["-lpthread"],
      "conditions": [
        ["OS!='linux'", { "type": "none" }],
        ["sanitize==1", {
          "cflags_cc": ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined", "-g", "-O1"],
          "ldflags": ["-fsanitize=address,undefined"]
        }]
      ]
    }
  ]
}
