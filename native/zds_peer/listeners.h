// ztunnel's in-pod listeners, made inside the pod's netns by the thread that handles the add: it
// setns()es in, binds, and setns()es back, as ztunnel's InpodNetns::run does around the socket
// factory (src/inpod/netns.rs); a socket keeps the namespace it was made in.
#pragma once

#include <string>
#include <vector>

namespace zds_peer {

// 15001 outbound, 15006 inbound plaintext, 15008 HBONE (TCP, IP_TRANSPARENT, mark 0x539,
// SO_REUSEPORT), 15053 DNS on TCP and UDP. Empty when something failed (then *error says what).
struct PodSockets {
  std::vector<int> fds;
};

// The calling thread's own network namespace, to come back to (exits when it cannot be opened).
int OpenHomeNetns();

// On the calling thread: setns(netns_fd), bind the listeners, setns(home_fd). A thread that cannot
// get home would bind the next pod's sockets in this pod, so that aborts the process.
bool BindListeners(int netns_fd, int home_fd, PodSockets* out, std::string* error);

void CloseAll(PodSockets* sockets);

}  // namespace zds_peer
