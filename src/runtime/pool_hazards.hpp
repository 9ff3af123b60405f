// Hazard pointers for pools: a thread publishes the pool it is using, so that a concurrent
// somaMemPoolDestroy (which CUDA allows while other threads allocate from the current pool)
// never deletes that pool under it (S4, S5).
#pragma once

#include <atomic>

namespace soma::detail {

/// One published pointer per thread, in a list that only grows (a slot is reused by a later
/// thread once its thread exits). Publishing is a store to the thread's own cache line: no
/// lock and no shared counter on the allocation path. Where the system has a process-wide
/// barrier (backend/process_barrier.hpp) the store needs no fence either: the rare scan
/// (is_in_use) runs that barrier instead. Thread-safe.
class pool_hazards {
 public:
  /// Publishes pool as used by this thread. Protocol: publish, load where it came from
  /// again, and retry if it changed; withdraw when done.
  static void publish(const void* pool) noexcept {
    thread_state& t = this_thread_;  // one reach of the thread_local: a call in a shared library
    if (t.slot == nullptr) [[unlikely]]
      take_slot_for_this_thread(t);
    if (t.asymmetric) {
      t.slot->store(pool, std::memory_order_relaxed);
      std::atomic_signal_fence(std::memory_order_seq_cst);  // the scan's barrier does the rest
    } else {
      t.slot->store(pool, std::memory_order_seq_cst);
    }
  }
  static void withdraw() noexcept {
    if (std::atomic<const void*>* slot = this_thread_.slot) [[likely]]
      slot->store(nullptr, std::memory_order_release);
  }
  /// True if some thread has published pool. Requires: the pool can no longer be reached
  /// where threads find pools (handle table, current pool), so no new thread publishes it.
  static bool is_in_use(const void* pool);
  /// Whether publish is a plain store (the process barrier exists and may be relied on: not
  /// under ThreadSanitizer, which does not model it), decided once.
  static bool asymmetric() noexcept;

 private:
  struct thread_state {
    std::atomic<const void*>* slot = nullptr;
    bool asymmetric = false;  // asymmetric(), set with the slot
  };
  static void take_slot_for_this_thread(thread_state& t);

  static constinit thread_local thread_state this_thread_;
};

}  // namespace soma::detail
