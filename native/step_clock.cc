#include "step_clock.h"

#include <time.h>

namespace ana {
namespace {

uint64_t Now(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_nsec);
}

// One lock per step (a few steps per pod, microseconds each): uncontended, it costs nanoseconds.
std::mutex& TotalsLock() {
  static std::mutex mu;
  return mu;
}

std::map<std::string, StepTimeTotal>& TotalsByStep() {
  static std::map<std::string, StepTimeTotal> totals;
  return totals;
}

}  // namespace

uint64_t MonotonicNs() { return Now(CLOCK_MONOTONIC); }

uint64_t ThreadCpuNs() { return Now(CLOCK_THREAD_CPUTIME_ID); }

// The wall interval encloses the CPU one (wall read first at the start, last at the end), so a
// step that never waits reports CPU <= wall up to the two clocks' own disagreement.
StepClock::StepClock() : wall_start_(Now(CLOCK_MONOTONIC)), cpu_start_(Now(CLOCK_THREAD_CPUTIME_ID)) {}

void StepClock::Stop(const std::string& step) {
  uint64_t cpu = Now(CLOCK_THREAD_CPUTIME_ID) - cpu_start_;
  uint64_t wall = Now(CLOCK_MONOTONIC) - wall_start_;
  std::lock_guard<std::mutex> lock(TotalsLock());
  StepTimeTotal& t = TotalsByStep()[step];
  if (t.step.empty()) t.step = step;
  t.count++;
  t.cpu_ns += cpu;
  t.wall_ns += wall;
}

std::vector<StepTimeTotal> StepClock::Totals() {
  std::lock_guard<std::mutex> lock(TotalsLock());
  std::vector<StepTimeTotal> out;
  out.reserve(TotalsByStep().size());
  for (const auto& [name, total] : TotalsByStep()) out.push_back(total);
  return out;
}

}  // namespace ana
