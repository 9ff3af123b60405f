// Slots that threads take one each, on a list that only grows: a slot outlives its thread, so
// that another thread may read it at any time (pool hazards, biased locks), and goes to a later
// thread once its thread gives it back.
#pragma once

#include <atomic>

namespace soma::detail {

/// A free slot of the list at `first`, taken, or a new one pushed on it. Slot has
/// `std::atomic<bool> taken` (true when made) and `Slot* next`. May throw std::bad_alloc.
template <typename Slot>
Slot* take_thread_slot(std::atomic<Slot*>& first) {
  for (Slot* s = first.load(std::memory_order_acquire); s != nullptr; s = s->next) {
    bool expected = false;
    if (s->taken.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) return s;
  }
  auto* fresh = new Slot();
  fresh->next = first.load(std::memory_order_relaxed);
  while (!first.compare_exchange_weak(fresh->next, fresh, std::memory_order_acq_rel)) {
  }
  return fresh;
}

}  // namespace soma::detail
