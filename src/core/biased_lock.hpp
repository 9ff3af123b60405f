// A lock that the thread which takes it most often takes with plain stores (the stream cache's:
// one thread usually runs a stream, and an atomic exchange at the pop and at the push was a
// fifth of a pair; docs/benchmarks.md, "One H100, 2026-12-05 19:27 UTC: a biased cache lock").
#pragma once

#include <atomic>
#include <cstdint>

#include "core/spin_lock.hpp"

namespace soma::detail {

#if !(defined(__x86_64__) && defined(__linux__))
inline constinit thread_local char thread_identity_anchor = 0;
#endif

/// The calling thread's identity among live threads: the thread pointer where it is one
/// register load, else a thread_local's address.
inline const void* this_thread_identity() noexcept {
#if defined(__x86_64__) && defined(__linux__)
  const void* self = nullptr;
  asm("mov %%fs:0, %0" : "=r"(self));  // glibc's thread control block points at itself
  return self;
#else
  return &thread_identity_anchor;
#endif
}

/// A thread's mark of the biased_lock it is inside with the bias (nullptr: none). Taken by one
/// thread, which alone writes `inside`: a thread that read a lock's owner late (preempted
/// between its two loads) and backs out clears its own mark only, never another owner's.
/// Never freed: when its thread ends the slot is given back (its identity cleared) for a later
/// thread, and a lock still biased to it is then biased to nobody who can enter.
struct alignas(64) bias_slot {
  std::atomic<const void*> identity{nullptr};  ///< the taker's this_thread_identity()
  std::atomic<const void*> inside{nullptr};
  std::atomic<bool> taken{true};
  bias_slot* next = nullptr;
  /// Its thread's own data for work done inside biased locks (memory history's per-thread
  /// state, history_log): found through the entry, without a thread_local. Only its thread
  /// reads or writes it; cleared when the slot is given back.
  void* thread_data = nullptr;
};

/// A spin lock with a bias. After `bias_after_entries` entries in a row by one thread, that
/// thread enters with plain stores and loads instead of an atomic exchange. Any other thread
/// that enters takes the bias away first: it clears the owner, runs the process barrier (every
/// thread of the process passes a full fence) and waits until the owner's slot shows it out.
/// The bias goes to whichever thread next makes such a run. Without a process barrier (none
/// installed: ThreadSanitizer builds, systems without Linux's membarrier, the core's own tests
/// unless they install one) nobody is biased: a spin lock. Critical sections must not take
/// another biased_lock's biased entry (stream caches: pop, push and drain are leaves).
/// Thread-safe.
class biased_lock {
 public:
  /// How lock() entered, for unlock(): the owner's slot, or nullptr for the shared entry.
  using entry = bias_slot*;
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

  /// Inline, the owner's entry: a slot whose identity is this thread's is this thread's own,
  /// so the owner finds its slot through the lock, without a thread_local. It marks the slot,
  /// then checks the bias is still there; a revoker clears the owner before its barrier and
  /// reads the slot after it, so one of the two sees the other.
  entry lock() noexcept {
    bias_slot* owner = owner_.load(std::memory_order_relaxed);
    if (owner != nullptr &&
        owner->identity.load(std::memory_order_relaxed) == this_thread_identity()) [[likely]] {
      owner->inside.store(this, std::memory_order_relaxed);
      std::atomic_signal_fence(std::memory_order_seq_cst);  // the revoker's barrier fences
      if (owner_.load(std::memory_order_acquire) == owner) [[likely]]
        return owner;
      owner->inside.store(nullptr, std::memory_order_release);
    }
    lock_shared();
    return nullptr;
  }
  void unlock(entry how) noexcept {
    if (how != nullptr) {
      how->inside.store(nullptr, std::memory_order_release);
    } else {
      unlock_shared();
    }
  }
  /// The shared entry alone (a holder of many locks at once: pool::used_now), never biased.
  void lock_shared() noexcept;
  void unlock_shared() noexcept { mutex_.unlock(); }

  /// Whether the calling thread holds the bias (tests).
  bool biased_to_this_thread() const noexcept {
    const bias_slot* owner = owner_.load(std::memory_order_relaxed);
    return owner != nullptr &&
           owner->identity.load(std::memory_order_relaxed) == this_thread_identity();
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
    /// The calling thread's slot where it entered with the bias, else nullptr.
    entry how() const noexcept { return how_; }

   private:
    biased_lock& lock_;
    entry how_;
  };

 private:
  void revoke_locked(bias_slot* owner) noexcept;
  void count_entry_locked(bias_slot* self) noexcept;

  static constinit inline std::atomic<bool (*)() noexcept> process_barrier_{nullptr};

  std::atomic<bias_slot*> owner_{nullptr};  // the biased thread's slot, or nullptr
  std::atomic<std::uint64_t> revocations_{0};
  spin_lock mutex_;
  // Under mutex_:
  const bias_slot* streak_thread_ = nullptr;
  std::uint32_t streak_ = 0;
};

}  // namespace soma::detail
