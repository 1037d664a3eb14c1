#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>

extern char** environ;

namespace ana {
namespace {

constexpr size_t kMaxCapture = 1 << 20;  // a runaway child must not exhaust memory

struct Pipes {
  int fds[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}};  // stdin, stdout, stderr
  ~Pipes() {
    for (auto& p : fds)
      for (int fd : p)
        if (fd >= 0) close(fd);
  }
  void CloseOne(int* fd) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
};

long long NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

// Feeds stdin and drains stdout/stderr together so a chatty child cannot deadlock on a full pipe.
bool Pump(Pipes* p, const std::string& input, int timeout_ms, SpawnResult* r) {
  size_t written = 0;
  long long deadline = NowMs() + timeout_ms;
  if (input.empty()) p->CloseOne(&p->fds[0][1]);
  while (p->fds[1][0] >= 0 || p->fds[2][0] >= 0) {
    pollfd pfds[3] = {{p->fds[0][1], POLLOUT, 0}, {p->fds[1][0], POLLIN, 0}, {p->fds[2][0], POLLIN, 0}};
    long long left = deadline - NowMs();
    if (left <= 0 || poll(pfds, 3, static_cast<int>(left)) == 0) return false;
    if (pfds[0].revents & (POLLOUT | POLLERR | POLLHUP)) {
      ssize_t n = write(p->fds[0][1], input.data() + written, input.size() - written);
      if (n > 0) written += static_cast<size_t>(n);
      bool failed = n < 0 && errno != EAGAIN && errno != EINTR;
      if (failed || written == input.size()) p->CloseOne(&p->fds[0][1]);
    }
    for (int i = 1; i <= 2; i++) {
      if (!(pfds[i].revents & (POLLIN | POLLERR | POLLHUP))) continue;
      char buf[4096];
      ssize_t n = read(p->fds[i][0], buf, sizeof(buf));
      if (n <= 0) {
        p->CloseOne(&p->fds[i][0]);
        continue;
      }
      std::string& sink = i == 1 ? r->out : r->err;
      sink.append(buf, std::min(static_cast<size_t>(n), kMaxCapture - sink.size()));
    }
  }
  return true;
}

}  // namespace

bool SpawnAndWait(const std::vector<std::string>& argv, const std::string& input, int timeout_ms, SpawnResult* result,
                  SysError* err, bool replace_env, const std::vector<std::string>& env) {
  if (argv.empty()) {
    *err = SysError::FromErrno(EINVAL, "posix_spawnp", "", "empty argv");
    return false;
  }
  Pipes p;
  for (auto& fds : p.fds) {
    if (pipe2(fds, O_CLOEXEC) != 0) {
      *err = SysError::FromErrno(errno, "pipe2");
      return false;
    }
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, p.fds[0][0], 0);
  posix_spawn_file_actions_adddup2(&actions, p.fds[1][1], 1);
  posix_spawn_file_actions_adddup2(&actions, p.fds[2][1], 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  // Its own process group, so a timeout kills what the child started too (bridge -> host-local).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, args[0], &actions, &attr, args.data(), replace_env ? envp.data() : environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    *err = SysError::FromErrno(rc, "posix_spawnp", argv[0]);
    return false;
  }
  p.CloseOne(&p.fds[0][0]);
  p.CloseOne(&p.fds[1][1]);
  p.CloseOne(&p.fds[2][1]);
  // Non-blocking stdin: a write of a large input must never block while the child, stuck on a
  // full stdout pipe, waits for us to read (the deadline could not fire then).
  fcntl(p.fds[0][1], F_SETFL, fcntl(p.fds[0][1], F_GETFL) | O_NONBLOCK);
  bool finished = Pump(&p, input, timeout_ms, result);
  if (!finished) kill(-pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!finished) {
    *err = SysError::FromErrno(ETIMEDOUT, "waitpid", argv[0]);
    return false;
  }
  result->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  return true;
}

}  // namespace ana
