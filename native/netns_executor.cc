#include "netns_executor.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "step_clock.h"

namespace ana {

void NetnsJob::CloseTarget() {
  if (target_fd >= 0) close(target_fd);
  target_fd = -1;
}

NetnsExecutor::NetnsExecutor(unsigned threads, SysError* err) {
  home_fd_ = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (home_fd_ < 0) {
    *err = SysError::FromErrno(errno, "open", "/proc/thread-self/ns/net");
    return;
  }
  if (!StatNetnsFd(home_fd_, &home_id_, err)) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (unsigned i = 0; i < threads; i++) StartWorkerLocked();
}

NetnsExecutor::~NetnsExecutor() {
  Stop();
  if (home_fd_ >= 0) close(home_fd_);
}

void NetnsExecutor::StartWorkerLocked() {
  workers_.emplace_back([this] { WorkerMain(); });
  stats_.threads_started++;
  stats_.threads_alive++;
}

void NetnsExecutor::Submit(std::unique_ptr<NetnsJob> job) {
  SysError refused;
  job->submitted_ns = MonotonicNs();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;  // the job is dropped with the executor
    if (!unusable_) {
      queue_.push_back(std::move(job));
    } else {
      refused = birth_error_;
    }
  }
  if (job) return FailJob(std::move(job), refused);
  cv_.notify_one();
}

void NetnsExecutor::FailJob(std::unique_ptr<NetnsJob> job, const SysError& err) {
  job->enter_error = err;
  job->CloseTarget();
  NetnsJob* raw = job.get();
  raw->Complete(std::move(job));
}

void NetnsExecutor::Stop() {
  std::vector<std::thread> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && workers_.empty()) return;
    stopping_ = true;
    queue_.clear();
    workers.swap(workers_);
  }
  cv_.notify_all();
  for (auto& t : workers) {
    if (t.joinable()) t.join();
  }
}

ExecutorStats NetnsExecutor::Stats() {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::unique_ptr<NetnsJob> NetnsExecutor::NextJob() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
  if (stopping_) return nullptr;
  auto job = std::move(queue_.front());
  queue_.pop_front();
  stats_.queue_wait_ns += MonotonicNs() - job->submitted_ns;
  return job;
}

bool NetnsExecutor::ReturnHome(SysError* err) {
  NetnsId now;
  return EnterNetns(home_fd_, err) && CurrentThreadNetns(&now, err) && now.ino == home_id_.ino &&
         now.dev == home_id_.dev;
}

// Returns false when the thread could not get back to its home namespace.
bool NetnsExecutor::RunJob(NetnsJob* job) {
  bool entered =
      job->target_fd >= 0 ? EnterNetns(job->target_fd, &job->enter_error) : EnterFreshNetns(&job->enter_error);
  // A failed setns/unshare leaves the thread where it was, so only a successful entry needs
  // the way back.
  if (!entered) return true;
  job->RunInside();
  if (job->poison_return) return false;
  SysError err;
  return ReturnHome(&err);
}

// SCHED_BATCH: a worker woken by the JS thread never preempts it (the kernel skips wakeup
// preemption for batch threads), while the JS thread, woken by a worker's early result, still
// preempts the worker at its next return to user space (inside a long syscall, on a kernel
// without preemption, only YieldToWokenThread lets it in earlier). The event loop coordinates
// every pod (it tells ztunnel the moment lo is up); it must not sit behind a netns visit on its
// own CPU while the other one idles. Best effort: the policy only lowers our own priority, so it
// needs no capability.
void NetnsExecutor::RunAsBatchThread() {
  sched_param param{};
  param.sched_priority = 0;
  pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);
}

void NetnsExecutor::YieldToWokenThread() { sched_yield(); }

unsigned NetnsExecutor::PoolSize() {
  constexpr unsigned kDefault = 4;
  constexpr unsigned long kMax = 256;
  const char* raw = getenv("ANA_NETNS_THREADS");
  if (!raw || !*raw) return kDefault;
  char* end = nullptr;
  unsigned long n = strtoul(raw, &end, 10);
  return (*end != '\0' || n < 1 || n > kMax) ? kDefault : static_cast<unsigned>(n);
}

void NetnsExecutor::WorkerMain() {
  // A worker that cannot even reach home at birth is not replaced: that would loop forever.
  SysError birth;
  if (!ReturnHome(&birth)) return RetireUnborn(birth);
  RunAsBatchThread();
  bool healthy = true;
  while (healthy) {
    std::unique_ptr<NetnsJob> job = NextJob();
    if (!job) return Retire(false);
    healthy = RunJob(job.get());
    job->CloseTarget();
    {
      // Counted before its last results are posted: a caller that saw them sees the job counted.
      std::lock_guard<std::mutex> lock(mu_);
      stats_.jobs_run++;
    }
    NetnsJob* raw = job.get();
    raw->Complete(std::move(job));
  }
  // This thread may sit in a foreign namespace forever, so it must never take another job.
  Retire(true);
}

// The last worker that dies at birth turns the executor unusable and fails what is queued, so
// callers get setns's error (EPERM without CAP_SYS_ADMIN) instead of a promise that never settles.
void NetnsExecutor::RetireUnborn(const SysError& err) {
  SysError reported = err;
  if (reported.detail.empty()) {
    reported.detail = "the addon's namespace threads cannot switch network namespaces (the agent needs CAP_SYS_ADMIN)";
  }
  std::deque<std::unique_ptr<NetnsJob>> orphans;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.threads_alive--;
    if (stopping_) return;  // Stop() owns and joins the remaining threads
    stats_.threads_retired++;
    DetachSelfLocked();
    if (stats_.threads_alive == 0) {
      unusable_ = true;
      birth_error_ = reported;
      orphans.swap(queue_);
    }
  }
  // Nothing below touches the executor: this thread is detached and may outlive it.
  for (auto& job : orphans) FailJob(std::move(job), reported);
}

void NetnsExecutor::Retire(bool respawn) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.threads_alive--;
  if (stopping_) return;  // Stop() owns and joins the remaining threads
  stats_.threads_retired++;
  DetachSelfLocked();
  if (respawn) StartWorkerLocked();
}

void NetnsExecutor::DetachSelfLocked() {
  for (auto it = workers_.begin(); it != workers_.end(); ++it) {
    if (it->get_id() == std::this_thread::get_id()) {
      it->detach();  // the thread ends as soon as its caller returns
      workers_.erase(it);
      return;
    }
  }
}

}  // namespace ana
