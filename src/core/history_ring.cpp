#include "core/history_ring.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>

namespace soma::detail {

// Hands the thread's chunk back when the thread ends, so that the chunk can be reused. Reached
// only when a thread claims a chunk; rings live until exit, so the chunk is still there.
struct history_ring_thread_exit {
  history_ring::cursor* cursor = nullptr;
  history_ring_thread_exit() = default;
  history_ring_thread_exit(const history_ring_thread_exit&) = delete;
  history_ring_thread_exit& operator=(const history_ring_thread_exit&) = delete;
  ~history_ring_thread_exit() {
    if (cursor != nullptr) history_ring::release(*cursor);
  }
};

namespace {
thread_local history_ring_thread_exit thread_exit;

// Small rings get small chunks, so that a few threads' partly filled chunks do not hide them.
std::uint32_t events_per_chunk(std::size_t capacity) {
  return static_cast<std::uint32_t>(std::clamp<std::size_t>(capacity / 16, 1, 256));
}
}  // namespace

history_ring::history_ring(std::size_t capacity)
    : capacity_(std::max<std::size_t>(capacity, 1)),
      chunk_events_(events_per_chunk(capacity_)),
      chunk_count_((capacity_ + chunk_events_ - 1) / chunk_events_ + spare_chunks),
      chunks_(std::make_unique<chunk_header[]>(chunk_count_)),
      memory_(std::calloc(chunk_count_ * chunk_events_ + 1, sizeof(history_slot))) {
  if (memory_ == nullptr) throw std::bad_alloc();
  void* aligned = memory_;
  std::size_t space = (chunk_count_ * chunk_events_ + 1) * sizeof(history_slot);
  slots_ = static_cast<history_slot*>(std::align(
      alignof(history_slot), chunk_count_ * chunk_events_ * sizeof(history_slot), aligned, space));
  // Touch every page now, so that recording does not pay for first touches (a page fault per
  // 64 events would double the cost of the first pass through a large ring).
  const std::size_t words = chunk_count_ * chunk_events_ * 8;
  for (std::size_t w = 0; w < words; w += 4096 / sizeof(std::uint64_t))
    std::atomic_ref<std::uint64_t>(slots_[w / 8].words[w % 8]).store(0, std::memory_order_relaxed);
}

history_ring::~history_ring() { std::free(memory_); }

void history_ring::restart() noexcept {
  first_claim_.store(next_claim_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  dropped_.store(0, std::memory_order_relaxed);
  epoch_.fetch_add(1, std::memory_order_release);
}

void history_ring::release(cursor& c) noexcept {
  if (c.chunk != nullptr) c.chunk->state.store(filled, std::memory_order_release);
  c.chunk = nullptr;
}

bool history_ring::claim(cursor& c, std::uint32_t entry_words) noexcept {
  if (entry_words == 8) thread_exit.cursor = &c;  // so that the chunk goes back when it ends
  // A cursor of another ring hands its chunk back there (rings live until exit).
  release(c);
  c.ring = this;
  c.epoch = epoch_.load(std::memory_order_relaxed);
  // If no chunk is free, the next event tries again.
  c.index = entry_words == 8 ? chunk_events_ : log_entries();
  for (std::size_t tries = 0; tries < chunk_count_; ++tries) {
    const std::uint64_t n = next_claim_.fetch_add(1, std::memory_order_relaxed);
    chunk_header& h = chunks_[n % chunk_count_];
    std::uint32_t state = h.state.load(std::memory_order_relaxed);
    if (state == filling ||
        !h.state.compare_exchange_strong(state, filling, std::memory_order_acquire))
      continue;
    // Seqlock: readers that saw the old events see the claim change and skip the chunk.
    const std::uint64_t previous = h.claim.load(std::memory_order_relaxed);
    // (A log's chunk counts its entries, the few marks among them, and its runs' repeats.)
    if (previous != 0 && (previous / 2 - 1) >= first_claim_.load(std::memory_order_relaxed)) {
      dropped_.fetch_add(std::uint64_t{h.count.load(std::memory_order_relaxed)} +
                             h.repeats.load(std::memory_order_relaxed),
                         std::memory_order_relaxed);
    }
    h.claim.store(2 * n + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    h.count.store(0, std::memory_order_relaxed);
    h.repeats.store(0, std::memory_order_relaxed);
    h.entry_words.store(entry_words, std::memory_order_relaxed);
    h.claim.store(2 * n + 2, std::memory_order_release);
    c.chunk = &h;
    c.slots = slots_ + (n % chunk_count_) * chunk_events_;
    c.index = 0;
    return true;
  }
  dropped_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

std::vector<history_ring::chunk_events> history_ring::read(std::uint64_t* dropped) const {
  std::vector<chunk_events> out;
  const std::uint64_t first = first_claim_.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < chunk_count_; ++i) {
    const chunk_header& h = chunks_[i];
    const std::uint64_t claim = h.claim.load(std::memory_order_acquire);
    if (claim == 0 || claim % 2 == 1 || claim / 2 - 1 < first) continue;
    const std::uint32_t entry_words = h.entry_words.load(std::memory_order_relaxed);
    const std::size_t words =
        std::min<std::size_t>(std::size_t{h.count.load(std::memory_order_acquire)} * entry_words,
                              std::size_t{chunk_events_} * 8);
    chunk_events events{claim / 2 - 1, entry_words, std::vector<std::uint64_t>(words)};
    history_slot* slots = slots_ + i * chunk_events_;
    for (std::size_t w = 0; w < words; ++w) {
      events.words[w] =
          std::atomic_ref<std::uint64_t>(slots[w / 8].words[w % 8]).load(std::memory_order_relaxed);
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    if (h.claim.load(std::memory_order_relaxed) != claim) continue;  // reused while read
    if (words > 0) out.push_back(std::move(events));
  }
  std::sort(out.begin(), out.end(),
            [](const chunk_events& a, const chunk_events& b) { return a.claim < b.claim; });
  if (dropped != nullptr) *dropped = dropped_.load(std::memory_order_relaxed);
  return out;
}

}  // namespace soma::detail
