// The fast path of one stream in one pool: blocks freed on that stream, by exact size.
#pragma once

#include <cstddef>
#include <atomic>
#include <cstdint>
#include <new>
#include <vector>

#include "core/block.hpp"
#include "core/check.hpp"
#include "core/biased_lock.hpp"
#include "core/history_log.hpp"
#include "core/stream_timeline.hpp"

namespace soma::detail {

/// What a free into the cache records in memory history (history_log::freed), given where
/// recording is on.
struct free_note {
  const stream_timeline* stream;  ///< the freeing stream
  std::uint32_t scope;            ///< the block's scope label, taken off it
  bool elsewhere;                 ///< the block's allocation may be recorded in another chunk
};

/// Blocks freed on one stream, kept for that stream's next allocations of the same size.
/// Reuse within one stream needs no ordering check (S11: always allowed), so a hit is a
/// lock of this cache alone and a pop: no lock shared with other streams, no backend call. The
/// lock is biased (biased_lock): the thread that runs the stream takes it with plain stores.
/// The pool drains caches into its free index when it needs the memory elsewhere (other
/// streams, growth, release), so nothing stays stranded here.
/// Thread-safe: every member takes the cache's own lock.
class alignas(64) stream_cache {  // own cache lines: streams on other cores never touch them
 public:
  /// A free beyond this many cached bytes goes to the pool's index instead.
  static constexpr std::size_t default_capacity_bytes = std::size_t{1} << 30;

  explicit stream_cache(std::size_t capacity_bytes = default_capacity_bytes);

  /// A cached block of exactly size_bytes, or nullptr. On a hit, requested_bytes join this
  /// stream's used share; if the share turns positive it is taken out into *publish (else 0)
  /// for the caller to publish pool-wide. Where memory history records, the hit goes into the
  /// cache's log as an allocation on `stream` (nullptr: a stream named 0).
  /// Inline with push: they are the pool's fast path.
  [[gnu::always_inline]] block* pop(std::size_t size_bytes, std::int64_t requested_bytes = 0,
                                    std::int64_t* publish = nullptr,
                                    const stream_timeline* stream = nullptr) {
    std::int64_t ignored = 0;
    if (publish == nullptr) publish = &ignored;
    *publish = 0;
    const biased_lock::scope lock(mutex_);
    bin* b = find_bin_fast(size_bytes, false);
    if (b == nullptr || b->head == nullptr) return nullptr;
    block* taken = b->head;
    b->head = taken->next_in_bin;
    taken->next_in_bin = nullptr;
    cached_bytes_ -= taken->size_bytes;
    // A re-use of this stream's frees keeps the share at or below 0: nothing to publish.
    const std::int64_t share = used_delta_bytes_.load(std::memory_order_relaxed) + requested_bytes;
    if (share > 0) *publish = share;
    used_delta_bytes_.store(share > 0 ? 0 : share, std::memory_order_release);
    if (memory_history::recording()) [[unlikely]]
      log_.allocated(*taken, static_cast<std::uint64_t>(requested_bytes),
                     stream != nullptr ? stream->history_name() : 0, lock.how());
    return taken;
  }
  /// Takes freed_bytes off this stream's used share and caches the block; false if over
  /// capacity, or if a new size's bin could not be made for want of host memory (the caller
  /// sends it to the index; the share is taken off either way). With a note (memory history
  /// records), a cached block's free goes into the cache's log. Never throws.
  [[gnu::always_inline]] bool push(block* freed, std::int64_t freed_bytes = 0,
                                   const free_note* note = nullptr) noexcept {
    SOMA_ASSERT(freed->next_in_bin == nullptr && freed->size_bytes != 0,
                "a block is in one bin at most, and has a size");
    const biased_lock::scope lock(mutex_);
    add_used_locked(-freed_bytes);
    if (cached_bytes_ + freed->size_bytes > capacity_bytes_) return false;
    bin* b = nullptr;
    try {
      b = find_bin_fast(freed->size_bytes, true);
    } catch (const std::bad_alloc&) {
      return false;
    }
    freed->next_in_bin = b->head;
    b->head = freed;
    cached_bytes_ += freed->size_bytes;
    if (note != nullptr) [[unlikely]] {
      log_.freed(*freed, static_cast<std::uint64_t>(freed_bytes), note->stream->history_name(),
                 note->scope, note->elsewhere, lock.how());
    }
    return true;
  }
  /// Takes every cached block out: the first of them, linked by next_in_bin (nullptr if none).
  block* drain() noexcept;
  std::size_t cached_bytes() const;
  /// Slots of the bin table (tests: what a drain walks).
  std::size_t bin_slots() const;

  /// This stream's share of the pool's used bytes not yet published pool-wide (S10). Kept here
  /// so the fast path touches no cache line shared with other streams, and changed only under
  /// the cache's lock, with the pop or push it goes with: no atomic read-modify-write of its own.
  std::int64_t take_used() noexcept;
  std::int64_t peek_used() const noexcept {
    return used_delta_bytes_.load(std::memory_order_acquire);
  }
  /// Holds the cache still, so that a reader can add its share to the published figure
  /// without a push or pop of this stream moving bytes between the two (pool::used_now).
  /// Never the biased entry: a holder holds many caches at once.
  void hold() const noexcept { mutex_.lock_shared(); }
  void release_hold() const noexcept { mutex_.unlock_shared(); }
  /// The cache's lock (tests: its bias and revocations).
  const biased_lock& lock() const noexcept { return mutex_; }

  /// Names the cache's pool in its memory history (at creation).
  void set_history_pool(std::uint32_t serial, int device) noexcept {
    const biased_lock::scope lock(mutex_);
    log_.set_pool(serial, device);
  }

  /// Next cache of the same pool (a list readers walk without the pool lock).
  stream_cache* next_in_pool = nullptr;

 private:
  struct bin {
    std::size_t size_bytes = 0;  // 0 = never used
    block* head = nullptr;
  };

  bin* find_bin(std::size_t size_bytes, bool create);
  /// find_bin, trying the bin of the last call first (a stream tends to repeat its sizes).
  bin* find_bin_fast(std::size_t size_bytes, bool create) {
    bin* last = &bins_[last_bin_];
    if (last->size_bytes == size_bytes) return last;
    bin* found = find_bin(size_bytes, create);
    if (found != nullptr) last_bin_ = static_cast<std::size_t>(found - bins_.data());
    return found;
  }

  static constexpr std::size_t initial_bin_slots = 32;

  mutable biased_lock mutex_;
  history_log log_;        // under mutex_
  std::vector<bin> bins_;  // open addressing by size; power-of-two capacity
  std::size_t bins_used_ = 0;
  std::size_t last_bin_ = 0;  // reset with bins_ by drain, so it stays in range
  std::size_t cached_bytes_ = 0;
  std::size_t capacity_bytes_;
  // Written under mutex_ only; atomic so that peek_used may read it without the lock.
  std::atomic<std::int64_t> used_delta_bytes_{0};
  void add_used_locked(std::int64_t bytes) noexcept {
    used_delta_bytes_.store(used_delta_bytes_.load(std::memory_order_relaxed) + bytes,
                            std::memory_order_release);
  }
};

}  // namespace soma::detail
