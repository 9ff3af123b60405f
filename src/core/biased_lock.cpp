#include "core/biased_lock.hpp"

#include "core/thread_slots.hpp"

#include <new>
#include <thread>

namespace soma::detail {
namespace {

// Never freed: a revoker may read the slot of a thread that has ended.
std::atomic<bias_slot*> first_slot{nullptr};

constinit thread_local bias_slot* this_thread_slot = nullptr;
constinit thread_local bool thread_ended = false;

// Gives the slot back when its thread ends; the thread's later entries (other thread_locals'
// destructors) take the shared route without a slot. Its identity is cleared first, so that a
// later thread with the same identity does not take it for its own.
struct slot_holder {
  bias_slot* slot = take_thread_slot(first_slot);
  slot_holder() { slot->identity.store(this_thread_identity(), std::memory_order_relaxed); }
  slot_holder(const slot_holder&) = delete;
  slot_holder& operator=(const slot_holder&) = delete;
  ~slot_holder() {
    this_thread_slot = nullptr;
    thread_ended = true;
    slot->identity.store(nullptr, std::memory_order_relaxed);
    slot->thread_data = nullptr;
    slot->inside.store(nullptr, std::memory_order_release);
    slot->taken.store(false, std::memory_order_release);
  }
};

// The calling thread's slot, taken on first use; nullptr once the thread is ending, or where
// host memory for a first slot ran out (the thread then stays unbiased).
bias_slot* slot_of_this_thread() noexcept {
  if (bias_slot* s = this_thread_slot) return s;
  if (thread_ended) return nullptr;
  try {
    thread_local slot_holder holder;
    this_thread_slot = holder.slot;
    return holder.slot;
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

}  // namespace

void biased_lock::lock_shared() noexcept {
  mutex_.lock();
  bias_slot* owner = owner_.load(std::memory_order_relaxed);
  // No owner and no process barrier (ThreadSanitizer, no membarrier): no bias can be granted,
  // so there is no run to count and this is the plain spin lock.
  if (owner == nullptr && process_barrier_.load(std::memory_order_relaxed) == nullptr) return;
  bias_slot* self = slot_of_this_thread();
  if (owner != nullptr && owner != self) revoke_locked(owner);
  count_entry_locked(self);
}

void biased_lock::revoke_locked(bias_slot* owner) noexcept {
  owner_.store(nullptr, std::memory_order_relaxed);
  // After the barrier the owner either shows in its slot that it is inside (it entered before:
  // wait it out) or reads the cleared owner on its next entry and takes the shared route. A
  // refusal leaves that unknown, so the barrier is tried again (Linux refuses only an
  // unregistered process, and the barrier is installed only after registering).
  bool (*barrier)() noexcept = process_barrier_.load(std::memory_order_acquire);
  while (barrier != nullptr && !barrier()) std::this_thread::yield();
  for (unsigned spins = 0; owner->inside.load(std::memory_order_acquire) == this; ++spins) {
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

void biased_lock::count_entry_locked(bias_slot* self) noexcept {
  if (self == nullptr) return;
  if (self != streak_thread_) {
    streak_thread_ = self;
    streak_ = 0;
  }
  if (++streak_ < bias_after_entries) return;
  streak_ = 0;
  if (process_barrier_.load(std::memory_order_relaxed) == nullptr) return;
  owner_.store(self, std::memory_order_relaxed);
}

}  // namespace soma::detail
