// A small lock for the fast path, where critical sections are a few dozen instructions.
#pragma once

#include <atomic>
#include <thread>

namespace soma::detail {

/// Tells the processor this thread spins: it yields the core's shared resources to the other
/// hardware thread and saves power.
inline void spin_pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// Test-and-test-and-set lock; yields the thread after a short spin so an oversubscribed
/// machine still makes progress. Meets Lockable (std::lock_guard and std::scoped_lock work).
class spin_lock {
 public:
  /// Inline, the uncontended take; the spin out of line, so that callers on the fast path keep
  /// a small frame.
  void lock() noexcept {
    if (!locked_.exchange(true, std::memory_order_acquire)) [[likely]]
      return;
    lock_contended();
  }
  bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) &&
           !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  [[gnu::noinline]] void lock_contended() noexcept {
    for (unsigned spins = 0;; ++spins) {
      while (locked_.load(std::memory_order_relaxed)) {
        spin_pause();
        if (++spins > 64) {
          std::this_thread::yield();
          spins = 0;
        }
      }
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
    }
  }

  std::atomic<bool> locked_{false};
};

}  // namespace soma::detail
