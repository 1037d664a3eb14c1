#include "heap.h"

#include <malloc.h>

#include "step_clock.h"

namespace ana {

HeapRelease ReleaseFreeHeap() {
  HeapRelease out;
  const struct mallinfo2 before = mallinfo2();
  out.free_bytes = before.fordblks;
  out.arena_bytes = before.arena;
  const uint64_t start = MonotonicNs();
  out.released = malloc_trim(0) != 0;
  out.duration_ns = MonotonicNs() - start;
  return out;
}

}  // namespace ana
