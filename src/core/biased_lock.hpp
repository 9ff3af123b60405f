// A lock that the thread which takes it most often takes with plain stores (the stream cache's:
// one thread usually runs a stream, and an atomic exchange at the pop and at the push was a
// fifth of a pair; docs/benchmarks.md, "A biased cache lock").
#pragma once

#include <atomic>
#include <cstdint>

#include "core/spin_lock.hpp"

namespace soma::detail {

#if !(defined(__x86_64__) && defined(__linux__))
inline constinit thread_local char thread_identity_anchor = 0;
#endif

/// The calling thread's identity: the thread pointer where it is one register load, else a
/// thread_local's address. A new thread may get the identity of one that has finished, which
/// holds nothing, so taking over its bias is harmless.
inline const void* this_thread_identity() noexcept {
#if defined(__x86_64__) && defined(__linux__)
  const void* self = nullptr;
  asm("mov %%fs:0, %0" : "=r"(self));  // glibc's thread control block points at itself
  return self;
#else
  return &thread_identity_anchor;
#endif
}

/// A spin lock with a bias. After `bias_after_entries` entries in a row by one thread, that
/// thread enters with two plain stores and two loads instead of an atomic exchange. Only the
/// first thread to earn the bias ever holds it: `inside_` then has one writer, where a second
/// owner could meet a first that read the owner late (preempted between its two loads) and
/// their stores to `inside_` would mix. Any other thread that enters takes the bias away first:
/// it clears the owner, runs the process barrier (every thread of the process passes a full
/// fence) and waits until the owner is out. The owner earns it back by another run of entries.
/// Without a process barrier (none installed: ThreadSanitizer builds, systems without Linux's
/// membarrier, the core's own tests unless they install one) nobody is biased: a spin lock.
/// Critical sections must not take another biased_lock's biased entry (stream caches: pop,
/// push and drain are leaves). Thread-safe.
class biased_lock {
 public:
  /// How lock() entered: unlock() takes it back.
  enum class entry : bool { shared, biased };
  /// Entries in a row by one thread that earn it the bias. A revocation costs one process
  /// barrier (microseconds), so this bounds what threads taking turns pay per entry.
  static constexpr std::uint32_t bias_after_entries = 4096;

  biased_lock() = default;
  biased_lock(const biased_lock&) = delete;
  biased_lock& operator=(const biased_lock&) = delete;

  /// Installs the process barrier (once, at start; nullptr for none). It returns false if the
  /// system refused; the revocation then tries again.
  static void use_process_barrier(bool (*barrier)() noexcept) noexcept {
    process_barrier_.store(barrier, std::memory_order_release);
  }

  /// Inline, the owner's entry: announce, then check the bias is still there. A revoker clears
  /// the owner before its barrier and reads `inside_` after it, so one of the two sees the other.
  entry lock() noexcept {
    const void* self = this_thread_identity();
    if (owner_.load(std::memory_order_relaxed) == self) [[likely]] {
      inside_.store(true, std::memory_order_relaxed);
      std::atomic_signal_fence(std::memory_order_seq_cst);  // the revoker's barrier fences
      if (owner_.load(std::memory_order_acquire) == self) [[likely]]
        return entry::biased;
      inside_.store(false, std::memory_order_release);
    }
    lock_shared();
    return entry::shared;
  }
  void unlock(entry how) noexcept {
    if (how == entry::biased) {
      inside_.store(false, std::memory_order_release);
    } else {
      unlock_shared();
    }
  }
  /// The shared entry alone (a holder of many locks at once: pool::used_now), never biased.
  void lock_shared() noexcept;
  void unlock_shared() noexcept { mutex_.unlock(); }

  /// Whether the calling thread holds the bias (tests).
  bool biased_to_this_thread() const noexcept {
    return owner_.load(std::memory_order_relaxed) == this_thread_identity();
  }
  /// Biases taken away so far (tests, benchmarks).
  std::uint64_t revocations() const noexcept {
    return revocations_.load(std::memory_order_relaxed);
  }

  /// Holds a biased_lock for a scope.
  class scope {
   public:
    explicit scope(biased_lock& lock) noexcept : lock_(lock), how_(lock.lock()) {}
    scope(const scope&) = delete;
    scope& operator=(const scope&) = delete;
    ~scope() { lock_.unlock(how_); }

   private:
    biased_lock& lock_;
    entry how_;
  };

 private:
  void revoke_locked() noexcept;
  void count_entry_locked(const void* self) noexcept;

  static constinit inline std::atomic<bool (*)() noexcept> process_barrier_{nullptr};

  std::atomic<const void*> owner_{nullptr};  // the biased thread, or nullptr
  std::atomic<bool> inside_{false};          // written by the owner only
  std::atomic<std::uint64_t> revocations_{0};
  spin_lock mutex_;
  // Under mutex_:
  const void* favourite_ = nullptr;  // the one thread that may hold the bias
  const void* streak_thread_ = nullptr;
  std::uint32_t streak_ = 0;
};

}  // namespace soma::detail
