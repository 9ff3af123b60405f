// pool: release: proven-free memory given back at synchronize points down to the release
// threshold, trim, and carving free blocks at chunk boundaries (S9, S12, S5).
#include <algorithm>

#include "core/pool.hpp"

namespace soma::detail {

// ---- release -------------------------------------------------------------------------------

void pool::carve_locked(block* b, std::uintptr_t from, std::uintptr_t to) {
  // Up to two free pieces remain around the hole, which is no longer mapped: they are not
  // adjacent to anything across it. The block and the nodes were made ahead (prepare_locked).
  index_.remove(b);
  const std::uintptr_t b_end = b->end();
  block* after = nullptr;
  if (to < b_end) {
    after = blocks_.make();
    after->address = to;
    after->size_bytes = b_end - to;
    after->stamp = b->stamp;  // still freed where b was (remap carves pending blocks too)
    after->small_region = b->small_region;
    after->next_adjacent = b->next_adjacent;
    if (after->next_adjacent != nullptr) after->next_adjacent->previous_adjacent = after;
    all_blocks_.emplace(after->address, after);
  } else if (b->next_adjacent != nullptr) {
    b->next_adjacent->previous_adjacent = nullptr;
  }
  if (b->address < from) {
    b->size_bytes = from - b->address;
    b->next_adjacent = nullptr;
    index_.insert(b);
  } else {
    if (b->previous_adjacent != nullptr) b->previous_adjacent->next_adjacent = nullptr;
    all_blocks_.erase(b->address);
    blocks_.recycle(b);
  }
  if (after != nullptr) index_.insert(after);
}

std::size_t pool::release_range_locked(std::uintptr_t from, std::uintptr_t to,
                                       std::size_t limit_bytes) {
  // Requires: [from, to) lies in one chunk and in one proven free block. Releases at most
  // limit_bytes of it, from the high end, in whole granules (or the whole chunk).
  auto it = std::prev(chunks_.upper_bound(from));
  const std::uintptr_t chunk_start = it->first;
  const chunk c = it->second;
  const std::uintptr_t chunk_end = chunk_start + c.size_bytes;
  if (!memory_->can_decommit_part(c.token)) {
    if (from != chunk_start || to != chunk_end || c.size_bytes > limit_bytes) return 0;
  } else {
    from = round_up(from, granularity_bytes_);
    to = to / granularity_bytes_ * granularity_bytes_;
    if (to <= from) return 0;
    const std::size_t limit = limit_bytes / granularity_bytes_ * granularity_bytes_;
    if (to - from > limit) from = to - limit;
    if (to <= from) return 0;
  }
  // Memory still mapped at a retired address goes back once that address is unmapped.
  if (is_aliased_locked(c.token, c.offset_bytes + (from - chunk_start), to - from)) return 0;
  // Host memory first: the carve, the chunk cut in up to two and the range given back.
  prepare_locked(1, carve_nodes + 2);
  address_space_.prepare(1);
  carve_locked(block_containing_locked(from), from, to);
  const physical_piece cut = cut_chunk_locked(from, to);
  memory_->decommit(from, to - from, cut.token, cut.offset_bytes);
  reserved_bytes_.fetch_sub(to - from, std::memory_order_acq_rel);
  note_history(history_kind::release, from, to - from);
  address_space_.give_back(from, to - from);
  return to - from;
}

physical_piece pool::cut_chunk_locked(std::uintptr_t from, std::uintptr_t to) {
  // Requires: [from, to) lies in one chunk.
  auto it = std::prev(chunks_.upper_bound(from));
  const std::uintptr_t chunk_start = it->first;
  const chunk c = it->second;
  const std::uintptr_t chunk_end = chunk_start + c.size_bytes;
  chunks_.erase(it);
  if (chunk_start < from)
    chunks_.emplace(chunk_start, chunk{from - chunk_start, c.token, c.offset_bytes});
  if (to < chunk_end) {
    chunks_.emplace(to, chunk{chunk_end - to, c.token, c.offset_bytes + (to - chunk_start)});
  }
  return physical_piece{from, to - from, c.token, c.offset_bytes + (from - chunk_start)};
}

void pool::release_locked(std::size_t keep_bytes) {
  drain_caches_locked();
  index_.promote(/*only_proven=*/true);
  unmap_retired_locked(/*all=*/false);
  // Highest addresses first, so what stays is dense at the start of the reservation. The
  // cursor walks down chunk by chunk; inside a chunk, free blocks from the top.
  std::uintptr_t cursor = UINTPTR_MAX;
  for (;;) {
    const std::uint64_t reserved = reserved_bytes_.load(std::memory_order_relaxed);
    if (reserved <= keep_bytes) return;
    auto it = chunks_.lower_bound(cursor);
    if (it == chunks_.begin()) return;
    --it;
    const std::uintptr_t chunk_start = it->first;
    std::uintptr_t top = chunk_start + it->second.size_bytes;
    while (top > chunk_start) {
      block* b = block_containing_locked(top - 1);
      if (b == nullptr) break;
      const std::uintptr_t from = std::max(b->address, chunk_start);
      const bool free_and_proven =
          b->current_state() == block_state::indexed && b->stamp.timeline == nullptr;
      if (free_and_proven) {
        const std::uint64_t now = reserved_bytes_.load(std::memory_order_relaxed);
        if (now <= keep_bytes) return;
        release_range_locked(from, top, static_cast<std::size_t>(now - keep_bytes));
      }
      top = from;
    }
    cursor = chunk_start;
  }
  check_invariants_locked();
}

void pool::on_synchronize() {
  check_used_if_quiet();
  const std::uint64_t threshold = release_threshold_bytes();
  if (reserved_bytes_.load(std::memory_order_acquire) <= threshold) return;
  std::lock_guard lock(mutex_);
  release_locked(threshold);
}

void pool::trim_to(std::size_t keep_bytes) {
  note_history(history_kind::trim, 0, keep_bytes);
  {
    std::lock_guard lock(mutex_);
    release_locked(keep_bytes);
  }
  check_used_if_quiet();
}

bool pool::try_release_everything() {
  if (has_live_allocations()) return false;
  std::lock_guard lock(mutex_);
  drain_caches_locked();
  for (const auto& [address, b] : all_blocks_) {
    if (b->current_state() != block_state::indexed || !b->stamp.is_complete()) return false;
  }
  for (const retired_range& r : retired_) {
    if (!r.stamp.is_complete()) return false;
  }
  // Work that used the memory has finished: every free may be treated as proven.
  index_.promote(/*only_proven=*/false);
  unmap_retired_locked(/*all=*/true);
  release_locked(0);
  return chunks_.empty();
}

}  // namespace soma::detail
