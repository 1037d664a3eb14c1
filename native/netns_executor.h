// A small pool of threads that the addon owns and that exist only to run work inside other
// network namespaces. The JS thread and libuv's pool never call setns: a pool thread left in a
// pod's namespace would silently run later fs/dns work there. A worker that cannot prove it is
// back in its home namespace after a job is retired (it exits and is replaced), never reused.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "netns.h"
#include "sys_error.h"

namespace ana {

class NetnsJob {
 public:
  virtual ~NetnsJob() = default;

  // Runs on a worker thread while it is inside the target namespace.
  virtual void RunInside() = 0;
  // Runs on the worker thread after it left the namespace (or failed to enter it). Takes
  // ownership of the job and must hand the result to whoever waits for it.
  virtual void Complete(std::unique_ptr<NetnsJob> self) = 0;

  // The namespace to enter: an fd the job owns (closed when the job ends), or -1 for a
  // fresh, private namespace that disappears when the job is done.
  int target_fd = -1;
  SysError enter_error;        // set when the worker could not enter the namespace
  bool poison_return = false;  // test hook: make the way back home fail
  uint64_t submitted_ns = 0;   // CLOCK_MONOTONIC at Submit (the queue wait's start)

  void CloseTarget();
};

struct ExecutorStats {
  unsigned threads_started = 0;
  unsigned threads_retired = 0;
  unsigned threads_alive = 0;
  unsigned long long jobs_run = 0;
  // Submit to a worker's pick-up, summed over the jobs picked up: waking a worker and its
  // getting a CPU (or a busy pool).
  unsigned long long queue_wait_ns = 0;
};

class NetnsExecutor {
 public:
  // Records the calling thread's namespace as "home"; every worker starts by switching there
  // (a replacement may be spawned by a retiring thread that sits in a foreign namespace).
  NetnsExecutor(unsigned threads, SysError* err);

  // 4, or ANA_NETNS_THREADS (1-256): the pool size for a process whose jobs block for long (the
  // node benchmark's CNI driver holds a thread per plugin exec until the plugin exits).
  static unsigned PoolSize();
  ~NetnsExecutor();
  NetnsExecutor(const NetnsExecutor&) = delete;
  NetnsExecutor& operator=(const NetnsExecutor&) = delete;

  void Submit(std::unique_ptr<NetnsJob> job);

  // For a job that has just woken the event loop with an early result and still has kernel work
  // ahead (the nft batch): lets the event loop run first if the scheduler put it on this CPU.
  // Such a kernel is often built without preemption (PREEMPT_NONE, this VM's), where the woken
  // loop otherwise waits out the whole syscall while ztunnel waits for the loop's add. With
  // nothing else runnable here the call returns at once.
  static void YieldToWokenThread();
  // Stops taking jobs, drops queued ones and joins the workers.
  void Stop();
  ExecutorStats Stats();

 private:
  void StartWorkerLocked();
  void WorkerMain();
  static void RunAsBatchThread();
  std::unique_ptr<NetnsJob> NextJob();
  bool RunJob(NetnsJob* job);
  bool ReturnHome(SysError* err);
  void Retire(bool respawn);
  void RetireUnborn(const SysError& err);
  void DetachSelfLocked();
  static void FailJob(std::unique_ptr<NetnsJob> job, const SysError& err);

  int home_fd_ = -1;
  NetnsId home_id_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<NetnsJob>> queue_;
  std::vector<std::thread> workers_;
  bool stopping_ = false;
  // Set when every worker died at birth (setns home refused, e.g. without CAP_SYS_ADMIN): jobs
  // then fail at once with this error instead of waiting in a queue no thread will ever drain.
  bool unusable_ = false;
  SysError birth_error_;
  ExecutorStats stats_;
};

}  // namespace ana
