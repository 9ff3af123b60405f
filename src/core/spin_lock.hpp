// A small lock for the fast path, where critical sections are a few dozen instructions.
#pragma once

#include <atomic>
#include <thread>

namespace soma::detail {

/// Test-and-test-and-set lock; yields the thread after a short spin so an oversubscribed
/// machine still makes progress. Meets BasicLockable (std::lock_guard works).
class spin_lock {
 public:
  void lock() noexcept {
    for (unsigned spins = 0;; ++spins) {
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins > 64) {
          std::this_thread::yield();
          spins = 0;
        }
      }
    }
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace soma::detail
