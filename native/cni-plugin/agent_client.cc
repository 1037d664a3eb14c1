#include "agent_client.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cstring>

#include "http.h"

namespace istio_cni {
namespace {

class Deadline {
 public:
  explicit Deadline(int timeout_ms) : end_ns_(NowNs() + static_cast<long long>(timeout_ms) * 1000000LL) {}
  // Milliseconds left, rounded up so that poll() never wakes before the deadline; 0 once passed.
  int RemainingMs() const {
    long long left = end_ns_ - NowNs();
    return left <= 0 ? 0 : static_cast<int>((left + 999999) / 1000000);
  }

 private:
  static long long NowNs() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
  }
  long long end_ns_;
};

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

AgentReply NotReached(const std::string& why) {
  AgentReply r;
  r.error = why;
  return r;
}

std::string Errno(const char* op) { return std::string(op) + ": " + strerror(errno); }

// Waits for `events` on fd; false when the deadline passes first.
bool WaitFor(int fd, short events, const Deadline& deadline) {
  for (;;) {
    int left = deadline.RemainingMs();
    if (left == 0) return false;
    pollfd p{fd, events, 0};
    int rc = poll(&p, 1, left);
    if (rc > 0) return true;  // readiness or an error condition: the next syscall reports which
    if (rc < 0 && errno != EINTR) return true;
  }
}

std::string TimeoutText(int timeout_ms, const char* phase) {
  return std::string("no reply within ") + std::to_string(timeout_ms) + " ms (" + phase + ")";
}

}  // namespace

AgentReply PostToAgent(const std::string& socket_path, const std::string& route, const std::string& json_body,
                       int timeout_ms) {
  Deadline deadline(timeout_ms);

  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof addr.sun_path) return NotReached("socket path too long: " + socket_path);
  memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);

  Fd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return NotReached(Errno("socket"));

  // A non-blocking AF_UNIX connect either completes at once or fails with EAGAIN when the
  // listener's backlog is full (a busy agent); retry that until the deadline.
  for (;;) {
    if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) break;
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {
      int left = deadline.RemainingMs();
      if (left == 0) return NotReached(TimeoutText(timeout_ms, "connect: listen backlog full"));
      poll(nullptr, 0, left < 10 ? left : 10);
      continue;
    }
    if (errno == EINPROGRESS) {
      if (!WaitFor(fd.get(), POLLOUT, deadline)) return NotReached(TimeoutText(timeout_ms, "connect"));
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) return NotReached(std::string("connect ") + socket_path + ": " + strerror(err));
      break;
    }
    return NotReached(std::string("connect ") + socket_path + ": " + strerror(errno));
  }

  const std::string request = BuildPostRequest(route, json_body);
  size_t sent = 0;
  while (sent < request.size()) {
    // MSG_NOSIGNAL: an agent that closes early must be an error here, not a SIGPIPE death.
    ssize_t n = send(fd.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      if (!WaitFor(fd.get(), POLLOUT, deadline)) return NotReached(TimeoutText(timeout_ms, "sending the request"));
      continue;
    }
    return NotReached(Errno("send"));
  }

  ResponseParser parser;
  char buf[16384];
  for (;;) {
    ssize_t n = recv(fd.get(), buf, sizeof buf, 0);
    ResponseParser::State state;
    if (n > 0) {
      state = parser.Feed(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      state = parser.Finish();
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN) {
      if (!WaitFor(fd.get(), POLLIN, deadline)) return NotReached(TimeoutText(timeout_ms, "waiting for the reply"));
      continue;
    } else {
      return NotReached(Errno("recv"));
    }
    if (state == ResponseParser::State::kError) return NotReached("invalid reply: " + parser.error());
    if (state == ResponseParser::State::kDone) {
      AgentReply reply;
      reply.reached = true;
      reply.status = parser.status();
      reply.body = parser.body();
      return reply;
    }
  }
}

}  // namespace istio_cni
