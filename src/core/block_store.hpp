// Where a pool's blocks come from and go back to.
#pragma once

#include <cstddef>

#include "core/block.hpp"

namespace soma::detail {

/// Recycles the blocks a pool no longer needs (merged into a neighbour, released) instead of
/// deleting them, so that a block's memory stays a block while its pool lives: a free that
/// found a block through the pointer table without a lock may read a stale one, and claiming
/// its state then fails or names another address (runtime::free) instead of touching freed
/// memory. Not thread-safe: the owning pool's lock guards it.
class block_store {
 public:
  block_store() = default;
  block_store(const block_store&) = delete;
  block_store& operator=(const block_store&) = delete;
  ~block_store() {
    for (block* list : {kept_, aside_}) {
      while (list != nullptr) {
        block* next = list->next_in_bin;
        delete list;
        list = next;
      }
    }
  }

  /// A block in its initial state (detached, no neighbours, no stamp), recycled if one is kept.
  block* make() {
    if (kept_ == nullptr) return new block();
    block* b = kept_;
    kept_ = b->next_in_bin;
    --count_;
    reset(*b);
    return b;
  }
  /// Keeps b for a later make(); allocates nothing (kept blocks are linked through
  /// next_in_bin). Requires: b is in no structure of the pool any more.
  void recycle(block* b) noexcept {
    b->set_state(block_state::detached);
    b->next_in_bin = kept_;
    kept_ = b;
    ++count_;
  }
  /// At least `count` blocks are kept after this: the next `count` make() calls allocate
  /// nothing. May throw std::bad_alloc; the blocks already made stay.
  void reserve(std::size_t count) {
    while (count_ < count) recycle(new block());
  }
  std::size_t kept() const noexcept { return count_; }
  /// Puts the kept blocks beyond `count` aside, where make() does not find them (tests, as
  /// node_reserve::keep_at_most). They stay blocks until the store goes.
  void set_aside_beyond(std::size_t count) noexcept {
    while (count_ > count) {
      block* b = kept_;
      kept_ = b->next_in_bin;
      --count_;
      b->next_in_bin = aside_;
      aside_ = b;
    }
  }

 private:
  static void reset(block& b) noexcept {
    b.address = 0;
    b.size_bytes = 0;
    b.requested_bytes = 0;
    b.previous_adjacent = nullptr;
    b.next_adjacent = nullptr;
    b.next_in_bin = nullptr;
    b.stamp = {};
    b.how = served_by::growth;
    b.small_region = false;
    b.scope.store(0, std::memory_order_relaxed);
    // history_stamp stays: stamps of one block only ever rise (history_clock).
  }

  block* kept_ = nullptr;
  block* aside_ = nullptr;
  std::size_t count_ = 0;
};

}  // namespace soma::detail
