// Where a pool's blocks come from and go back to.
#pragma once

#include <memory>
#include <vector>

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

  /// A block in its initial state (detached, no neighbours, no stamp), recycled if one is kept.
  block* make() {
    if (kept_.empty()) return new block();
    block* b = kept_.back().release();
    kept_.pop_back();
    reset(*b);
    return b;
  }
  /// Keeps b for a later make(). Requires: b is in no structure of the pool any more, and room
  /// was reserved (reserve_for_recycling) where the caller must not fail.
  void recycle(block* b) {
    b->set_state(block_state::detached);
    kept_.emplace_back(b);
  }
  /// Room for `count` more recycles that then allocate nothing (may throw std::bad_alloc).
  void reserve_for_recycling(std::size_t count) {
    if (kept_.capacity() - kept_.size() < count)
      kept_.reserve(kept_.size() + count + kept_.size() / 2);
  }
  std::size_t kept() const noexcept { return kept_.size(); }

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

  std::vector<std::unique_ptr<block>> kept_;
};

}  // namespace soma::detail
