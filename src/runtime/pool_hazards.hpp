// Hazard pointers for pools: a thread publishes the pool it is using, so that a concurrent
// somaMemPoolDestroy (which CUDA allows while other threads allocate from the current pool)
// never deletes that pool under it (S4, S5).
#pragma once

#include <atomic>

namespace soma::detail {

/// One published pointer per thread, in a list that only grows (a slot is reused by a later
/// thread once its thread exits). Publishing is a store to the thread's own cache line: no
/// lock and no shared counter on the allocation path. Thread-safe.
class pool_hazards {
 public:
  /// This thread's slot. Protocol: store the pool (seq_cst), load where it came from again,
  /// and retry if it changed; store nullptr when done.
  static std::atomic<const void*>& mine();
  /// True if some thread has published pool. Requires: the pool can no longer be reached
  /// where threads find pools (handle table, current pool), so no new thread publishes it.
  static bool is_in_use(const void* pool);
};

}  // namespace soma::detail
