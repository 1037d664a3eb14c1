// The C library's heap: glibc keeps memory that was freed in its arenas (for the next malloc)
// instead of giving it back to the kernel, except at the very top of an arena. V8's compiler
// threads allocate and free their working memory there, so after the agent's hot functions are
// optimised that memory stays counted in the agent's RSS. ReleaseFreeHeap() gives back every
// whole free page of every arena (malloc_trim(0), which madvises them away).
#pragma once

#include <stdint.h>

namespace ana {

struct HeapRelease {
  bool released = false;     // malloc_trim gave at least one page back
  uint64_t free_bytes = 0;   // free bytes the arenas held before (mallinfo2 fordblks)
  uint64_t arena_bytes = 0;  // bytes the arenas had from the kernel before (mallinfo2 arena)
  uint64_t duration_ns = 0;  // how long the trim took (it holds each arena's lock meanwhile)
};

// Blocking (walks every arena under its lock): run it off the JS thread.
HeapRelease ReleaseFreeHeap();

}  // namespace ana
