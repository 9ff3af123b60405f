#include "core/memory_history.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

namespace soma::detail {
namespace {

using event_words = std::array<std::uint64_t, 8>;
static_assert(sizeof(history_event) == sizeof(event_words), "an event fills one slot");

thread_local std::vector<std::uint32_t> scopes;  // the calling thread's open scope labels

std::uint64_t steady_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

}  // namespace

memory_history& memory_history::process() {
  static memory_history* const history = new memory_history();  // lives past static teardown
  return *history;
}

std::uint64_t memory_history::ticks() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  // The time stamp counter: a third of a clock_gettime's cost, constant-rate on the CPUs soma
  // runs on; events() turns it into steady-clock nanoseconds.
  return __rdtsc();
#else
  return steady_ns();
#endif
}

void memory_history::start(std::size_t capacity) {
  std::lock_guard lock(mutex_);
  clock_start_ = {ticks(), steady_ns()};
  rings_.push_back(std::make_unique<ring>(std::max<std::size_t>(capacity, 1)));
  ring_.store(rings_.back().get(), std::memory_order_release);
  enabled_.store(true, std::memory_order_release);
}

std::size_t memory_history::capacity() const {
  const ring* r = ring_.load(std::memory_order_acquire);
  return r != nullptr ? r->size : 0;
}

void memory_history::record(history_event e) noexcept {
  if (!enabled()) return;
  ring* r = ring_.load(std::memory_order_acquire);
  if (r == nullptr) return;
  e.time_ns = ticks();
  const std::uint64_t n = r->next.fetch_add(1, std::memory_order_relaxed);
  slot& s = r->slots[n % r->size];
  s.sequence.store(2 * n + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  const auto words = std::bit_cast<event_words>(e);
  for (std::size_t i = 0; i < words.size(); ++i)
    s.words[i].store(words[i], std::memory_order_relaxed);
  s.sequence.store(2 * n + 2, std::memory_order_release);
}

std::vector<history_event> memory_history::events(std::uint64_t* dropped) const {
  std::vector<history_event> out;
  const ring* r = ring_.load(std::memory_order_acquire);
  if (dropped != nullptr) *dropped = 0;
  if (r == nullptr) return out;
  const std::uint64_t end = r->next.load(std::memory_order_acquire);
  const std::uint64_t begin = end > r->size ? end - r->size : 0;
  if (dropped != nullptr) *dropped = begin;
  out.reserve(end - begin);
  for (std::uint64_t n = begin; n < end; ++n) {
    const slot& s = r->slots[n % r->size];
    if (s.sequence.load(std::memory_order_acquire) != 2 * n + 2) continue;  // being written
    event_words words{};
    for (std::size_t i = 0; i < words.size(); ++i)
      words[i] = s.words[i].load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.sequence.load(std::memory_order_relaxed) != 2 * n + 2) continue;  // overwritten
    out.push_back(std::bit_cast<history_event>(words));
  }
  // Ticks to steady-clock nanoseconds, by the rate measured from start() to now.
  std::pair<std::uint64_t, std::uint64_t> from;
  {
    std::lock_guard lock(mutex_);
    from = clock_start_;
  }
  const std::uint64_t now_ticks = ticks();
  const std::uint64_t now_ns = steady_ns();
  const double ns_per_tick =
      now_ticks > from.first
          ? static_cast<double>(now_ns - from.second) / static_cast<double>(now_ticks - from.first)
          : 1.0;
  for (history_event& e : out) {
    const double since = static_cast<double>(static_cast<std::int64_t>(e.time_ns - from.first));
    e.time_ns = from.second + static_cast<std::uint64_t>(std::max(0.0, since * ns_per_tick));
  }
  // Writers claim slots before they read the clock: order by time for readers.
  std::stable_sort(out.begin(), out.end(), [](const history_event& a, const history_event& b) {
    return a.time_ns < b.time_ns;
  });
  return out;
}

std::uint32_t memory_history::label(const std::string& text) {
  if (text.empty()) return 0;
  std::lock_guard lock(mutex_);
  auto [it, added] = ids_.emplace(text, static_cast<std::uint32_t>(texts_.size()));
  if (added) texts_.push_back(text);
  return it->second;
}

std::string memory_history::label_text(std::uint32_t id) const {
  std::lock_guard lock(mutex_);
  return id < texts_.size() ? texts_[id] : std::string();
}

const char* memory_history::label_c_str(std::uint32_t id) const {
  std::lock_guard lock(mutex_);
  return id != 0 && id < texts_.size() ? texts_[id].c_str() : nullptr;
}

std::uint32_t memory_history::current_scope() noexcept {
  return scopes.empty() ? 0 : scopes.back();
}

void memory_history::push_scope(std::uint32_t label) { scopes.push_back(label); }

bool memory_history::pop_scope() noexcept {
  if (scopes.empty()) return false;
  scopes.pop_back();
  return true;
}

}  // namespace soma::detail
