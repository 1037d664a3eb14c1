{
  "targets": [
    {
      "target_name": "ambient_native",
      "sources": [
        "native/binding.cc",
        "native/netns.cc",
        "native/netns_executor.cc",
        "native/nft_runner.cc",
        "native/rtnl.cc",
        "native/marked_socket.cc",
        "native/spawn.cc",
        "native/steps.cc",
        "native/seqpacket.cc",
        "native/fd_poller.cc"
      ],
      "dependencies": ["<!(node -p \"require('node-addon-api').targets\"):node_addon_api_except"],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++17"],
      "cflags_cc": ["-std=c++17", "-fexceptions", "-Wall", "-Wextra", "-Werror", "-Wno-missing-field-initializers"],
      "libraries": ["-lnftables", "-lmnl", "-lpthread"],
      "conditions": [["OS!='linux'", { "type": "none" }]]
    }
  ]
}
