// What each kind of step costs the thread that runs it: the kernel's clock of that thread's own
// CPU time (CLOCK_THREAD_CPUTIME_ID: user and kernel, nothing else that runs meanwhile) and the
// wall time around it. The two together say whether a step works or waits, in place, on every
// pod, which a benchmark of the step alone cannot say. Process-wide totals, by step name.
#pragma once

#include <stdint.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace ana {

struct StepTimeTotal {
  std::string step;      // the op as TypeScript spells it
  uint64_t count = 0;    // steps run (failed ones too)
  uint64_t cpu_ns = 0;   // the running thread's CPU time in them
  uint64_t wall_ns = 0;  // the wall time around them
};

// CLOCK_MONOTONIC in nanoseconds (the executor's and the settlements' waits use it too).
uint64_t MonotonicNs();

// The calling thread's own CPU time (CLOCK_THREAD_CPUTIME_ID, user + kernel) in nanoseconds.
// Exact for a running thread: the kernel brings its account up to date for this clock, which
// getrusage(RUSAGE_THREAD) does not (it reports the runtime as of the thread's last tick or
// context switch).
uint64_t ThreadCpuNs();

// Started just before a step on the thread that runs it; Stop() adds the step to the totals.
class StepClock {
 public:
  StepClock();
  void Stop(const std::string& step);

  static std::vector<StepTimeTotal> Totals();

 private:
  uint64_t wall_start_;  // declared first: initialised first (see the constructor)
  uint64_t cpu_start_;
};

}  // namespace ana
