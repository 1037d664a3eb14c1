// ztunnel's in-pod listeners, made inside the pod's netns on a worker thread that setns()es in
// and back (the main thread never changes namespace; a socket keeps the namespace it was made in).
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <vector>

namespace zds_peer {

// 15001 outbound, 15006 inbound plaintext, 15008 HBONE (TCP, IP_TRANSPARENT, mark 0x539,
// SO_REUSEPORT), 15053 DNS on TCP and UDP. Empty when something failed (then *error says what).
struct PodSockets {
  std::vector<int> fds;
};

class NetnsWorker {
 public:
  NetnsWorker();
  ~NetnsWorker();
  NetnsWorker(const NetnsWorker&) = delete;
  NetnsWorker& operator=(const NetnsWorker&) = delete;

  // Runs on the worker: setns(netns_fd), bind the listeners, setns home. Blocks until done.
  bool BindListeners(int netns_fd, PodSockets* out, std::string* error);

 private:
  void Loop();
  void Run(std::function<void()> job);

  std::mutex mu_;
  std::condition_variable cv_;
  std::queue<std::function<void()>> jobs_;
  bool stopping_ = false;
  int home_fd_ = -1;
  std::thread thread_;
};

void CloseAll(PodSockets* sockets);

}  // namespace zds_peer
