// zds-peer: a native ZDS client for benchmarks, doing what ztunnel does between an add and its
// ack (zds-protocol.md): hello, then for each add fstat the netns fd, bind the in-pod listeners
// inside that netns, ack; del closes them; snapshot_sent drops pods the snapshot did not mention.
// It reconnects (20 ms doubling to 1 s) when the agent goes away. The whole session runs on one
// worker thread (the main thread only waits for it), and each add is handled on that thread from
// read to ack, setns in and back around the binds: ztunnel's workload manager reads a message,
// processes it and acks in one task (src/inpod/workloadmanager.rs run_internal), entering the
// netns inline (src/inpod/netns.rs InpodNetns::run), with no hand-off to another thread.
// Usage: zds-peer <socket path>. One status line per event on stdout (for the benchmark):
//   connected <n> | snapshot <pods> | add <uid> <namespace>/<name> <add->ack µs> | del <uid> | nack <uid> <why>
// add and del lines go out once the peer is idle (no request for kIdleFlushMs): a line written
// right after an ack would wake the benchmark process, which then competes for the CPUs with the
// agent finishing the ADD the benchmark is timing. connected, snapshot and nack go out at once.
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <map>
#include <set>
#include <string>
#include <thread>

#include "listeners.h"
#include "wire.h"

namespace zds_peer {
namespace {

constexpr size_t kMaxMessage = 1024;  // ztunnel's receive buffer
constexpr int kIdleFlushMs = 2;

struct Pod {
  int netns_fd = -1;
  PodSockets sockets;
};

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

class Peer {
 public:
  explicit Peer(std::string path) : path_(std::move(path)) {}

  // On the session's thread; never returns.
  [[noreturn]] void Run() {
    home_fd_ = OpenHomeNetns();
    for (int64_t backoff_ms = 20;; backoff_ms = backoff_ms * 2 > 1000 ? 1000 : backoff_ms * 2) {
      int fd = Connect();
      if (fd < 0) {
        usleep(static_cast<useconds_t>(backoff_ms * 1000));
        continue;
      }
      backoff_ms = 10;
      printf("connected %d\n", ++connections_);
      Flush();
      Serve(fd);
      Flush();
      close(fd);
    }
  }

 private:
  int Connect() {
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (fd < 0 || path_.size() >= sizeof(addr.sun_path)) return fd < 0 ? -1 : (close(fd), -1);
    memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd);
      return -1;
    }
    std::string hello = EncodeHello();
    if (send(fd, hello.data(), hello.size(), MSG_NOSIGNAL) < 0) {
      close(fd);
      return -1;
    }
    return fd;
  }

  // One request per datagram, answered in order; returns at EOF or on a socket error.
  void Serve(int sock) {
    std::set<std::string> in_snapshot;
    bool snapshot_done = false;
    for (;;) {
      FlushWhenIdle(sock);
      uint8_t buf[kMaxMessage];
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 2)];
      iovec iov{buf, sizeof(buf)};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
      int64_t received = NowNs();
      int fd = ReceivedFd(&msg);
      if (n <= 0) {
        if (fd >= 0) close(fd);
        return;  // EOF (or an empty datagram, which ztunnel also treats as EOF)
      }
      std::string error = (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ? "received truncated message" : "";
      Request req;
      if (error.empty() && !DecodeRequest(buf, static_cast<size_t>(n), &req, &error)) req.kind = RequestKind::kNone;
      if (error.empty())
        error = Apply(req, fd, &in_snapshot, &snapshot_done);
      else if (fd >= 0)
        close(fd);
      std::string ack = EncodeAck(error);
      if (send(sock, ack.data(), ack.size(), MSG_NOSIGNAL) < 0) return;
      Report(req, error, received);
    }
  }

  static int ReceivedFd(msghdr* msg) {
    int fd = -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; i++) {
        int got;
        memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        if (fd < 0)
          fd = got;
        else
          close(got);  // more than one fd: keep the first, the request is refused below
      }
    }
    return fd;
  }

  std::string Apply(const Request& req, int fd, std::set<std::string>* in_snapshot, bool* snapshot_done) {
    if (req.kind != RequestKind::kAdd && fd >= 0) {
      close(fd);
      return "unexpected fd";
    }
    switch (req.kind) {
      case RequestKind::kAdd: {
        if (fd < 0) return "add without a netns fd";
        if (!*snapshot_done) in_snapshot->insert(req.uid);
        return Add(req.uid, fd);
      }
      case RequestKind::kKeep:
        if (!*snapshot_done) in_snapshot->insert(req.uid);
        return pods_.count(req.uid) ? "" : "keep for an unknown workload";
      case RequestKind::kDel: Remove(req.uid); return "";
      case RequestKind::kSnapshotSent:
        for (auto it = pods_.begin(); it != pods_.end();) {
          if (in_snapshot->count(it->first)) {
            ++it;
            continue;
          }
          CloseAll(&it->second.sockets);
          close(it->second.netns_fd);
          it = pods_.erase(it);
        }
        *snapshot_done = true;
        return "";
      case RequestKind::kNone: break;
    }
    return "unknown request";
  }

  std::string Add(const std::string& uid, int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0) {
      close(fd);
      return std::string("fstat: ") + strerror(errno);
    }
    Remove(uid);  // a new add replaces the old proxy (ztunnel does the same)
    Pod pod;
    pod.netns_fd = fd;
    std::string error;
    if (!BindListeners(fd, home_fd_, &pod.sockets, &error)) {
      close(fd);
      return error;
    }
    pods_[uid] = std::move(pod);
    return "";
  }

  void Remove(const std::string& uid) {
    auto it = pods_.find(uid);
    if (it == pods_.end()) return;
    CloseAll(&it->second.sockets);
    close(it->second.netns_fd);
    pods_.erase(it);
  }

  void Report(const Request& req, const std::string& error, int64_t received) {
    int64_t us = (NowNs() - received) / 1000;
    if (!error.empty()) {
      printf("nack %s %s\n", req.uid.empty() ? "-" : req.uid.c_str(), error.c_str());
      return Flush();
    }
    switch (req.kind) {
      case RequestKind::kAdd:
        printf("add %s %s/%s %lld\n", req.uid.c_str(), req.pod_namespace.c_str(), req.name.c_str(),
               static_cast<long long>(us));
        unflushed_ = true;
        break;
      case RequestKind::kDel:
        printf("del %s\n", req.uid.c_str());
        unflushed_ = true;
        break;
      case RequestKind::kSnapshotSent:
        printf("snapshot %zu\n", pods_.size());
        Flush();
        break;
      default: break;
    }
  }

  void Flush() {
    fflush(stdout);
    unflushed_ = false;
  }

  // Writes the held lines if no request arrives within kIdleFlushMs.
  void FlushWhenIdle(int sock) {
    if (!unflushed_) return;
    pollfd p{sock, POLLIN, 0};
    if (poll(&p, 1, kIdleFlushMs) == 0) Flush();
  }

  std::string path_;
  int connections_ = 0;
  bool unflushed_ = false;
  std::map<std::string, Pod> pods_;
  int home_fd_ = -1;
};

}  // namespace
}  // namespace zds_peer

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s <ZDS socket path>\n", argv[0]);
    return 2;
  }
  setvbuf(stdout, nullptr, _IOFBF, 1 << 16);  // flushed by Peer (see the top)
  signal(SIGPIPE, SIG_IGN);
  zds_peer::Peer peer(argv[1]);
  std::thread session([&peer] { peer.Run(); });
  session.join();  // never returns: the peer runs until it is killed
}
