#include "runtime/pool_hazards.hpp"

#include "backend/process_barrier.hpp"
#include "core/thread_slots.hpp"

namespace soma::detail {
namespace {

struct alignas(64) hazard_slot {
  std::atomic<const void*> pointer{nullptr};
  std::atomic<bool> taken{true};
  hazard_slot* next = nullptr;
};

// Never freed: a reaper may scan a slot whose thread has gone.
std::atomic<hazard_slot*> first_slot{nullptr};

// Gives the slot back when its thread exits.
struct thread_slot {
  hazard_slot* slot = take_thread_slot(first_slot);
  thread_slot() = default;
  thread_slot(const thread_slot&) = delete;
  thread_slot& operator=(const thread_slot&) = delete;
  ~thread_slot();
};

}  // namespace

constinit thread_local pool_hazards::thread_state pool_hazards::this_thread_{};

thread_slot::~thread_slot() {
  slot->pointer.store(nullptr, std::memory_order_release);
  slot->taken.store(false, std::memory_order_release);
}

void pool_hazards::take_slot_for_this_thread(thread_state& t) {
  thread_local thread_slot own;
  t.asymmetric = asymmetric();
  t.slot = &own.slot->pointer;
}

bool pool_hazards::asymmetric() noexcept {
#if defined(__SANITIZE_THREAD__)
  return false;  // ThreadSanitizer does not model the process barrier
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
  return false;
#endif
#endif
  static const bool available = backend::process_barrier_available();
  return available;
}

bool pool_hazards::is_in_use(const void* pool) {
  // The barrier orders every thread's earlier publish before the scan below, as the fence a
  // publish leaves out would have. Refused, nothing can be known: the pool counts as in use.
  if (asymmetric() && !backend::process_barrier()) return true;
  for (hazard_slot* s = first_slot.load(std::memory_order_acquire); s != nullptr; s = s->next) {
    if (s->pointer.load(std::memory_order_seq_cst) == pool) return true;
  }
  return false;
}

}  // namespace soma::detail
