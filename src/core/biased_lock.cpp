#include "core/biased_lock.hpp"

#include <thread>

namespace soma::detail {

void biased_lock::lock_shared() noexcept {
  mutex_.lock();
  const void* self = this_thread_identity();
  const void* owner = owner_.load(std::memory_order_relaxed);
  if (owner != nullptr && owner != self) revoke_locked();
  count_entry_locked(self);
}

void biased_lock::revoke_locked() noexcept {
  owner_.store(nullptr, std::memory_order_relaxed);
  // After the barrier the owner either shows inside_ set (it entered before: wait it out) or
  // reads the cleared owner on its next entry and takes the shared route. A refusal leaves
  // that unknown, so the barrier is tried again (Linux refuses only an unregistered process,
  // and the barrier is installed only after registering).
  bool (*barrier)() noexcept = process_barrier_.load(std::memory_order_acquire);
  while (barrier != nullptr && !barrier()) std::this_thread::yield();
  for (unsigned spins = 0; inside_.load(std::memory_order_acquire); ++spins) {
    spin_pause();
    if (spins > 64) {  // the owner may be preempted inside
      std::this_thread::yield();
      spins = 0;
    }
  }
  revocations_.fetch_add(1, std::memory_order_relaxed);
  streak_thread_ = nullptr;
  streak_ = 0;
}

void biased_lock::count_entry_locked(const void* self) noexcept {
  if (self != streak_thread_) {
    streak_thread_ = self;
    streak_ = 0;
  }
  if (++streak_ < bias_after_entries) return;
  streak_ = 0;
  if (favourite_ != nullptr && favourite_ != self) return;
  if (process_barrier_.load(std::memory_order_relaxed) == nullptr) return;
  favourite_ = self;
  owner_.store(self, std::memory_order_relaxed);
}

}  // namespace soma::detail
