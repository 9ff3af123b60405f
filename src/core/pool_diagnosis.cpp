// pool: statistics (S10), what an address is to the pool (diagnosis for messages, S14), and
// the physical pieces behind an allocation (for S7 export).
#include <algorithm>

#include "core/check.hpp"
#include "core/pool.hpp"

namespace soma::detail {

// ---- statistics and diagnosis -------------------------------------------------------------

pool_statistics pool::statistics() const noexcept {
  pool_statistics s;
  s.reserved_bytes = reserved_bytes_.load(std::memory_order_acquire);
  s.reserved_high_bytes = reserved_high_bytes_.load(std::memory_order_acquire);
  s.used_bytes = used_now();
  // A rise not yet published is still the true figure: the watermark is never below it.
  s.used_high_bytes = std::max(used_high_bytes_.load(std::memory_order_acquire), s.used_bytes);
  return s;
}

void pool::reset_reserved_high() noexcept {
  reserved_high_bytes_.store(reserved_bytes_.load(std::memory_order_acquire),
                             std::memory_order_release);
}

void pool::reset_used_high() noexcept {
  fold_used_shares();
  used_high_bytes_.store(used_now(), std::memory_order_release);
}

status pool::visit_physical_pieces(
    std::uintptr_t address, std::size_t bytes,
    const std::function<status(const physical_piece&)>& visit) const {
  std::lock_guard lock(mutex_);
  const std::uintptr_t end = address + bytes;
  auto it = chunks_.upper_bound(address);
  if (it != chunks_.begin()) --it;
  std::uintptr_t covered = address;  // everything below is backed and visited
  for (; it != chunks_.end() && it->first < end; ++it) {
    const std::uintptr_t piece_end = it->first + it->second.size_bytes;
    if (piece_end <= covered) continue;
    if (it->first > covered) break;  // a hole
    const physical_piece piece{it->first, it->second.size_bytes, it->second.token,
                               it->second.offset_bytes};
    if (status visited = visit(piece); !visited.ok()) return visited;
    covered = piece_end;
  }
  if (covered < end) {
    return status(error_code::invalid_value, describe() + ": " + format_address(covered) +
                                                 " is not backed by physical memory");
  }
  return status::success();
}

bool pool::owns_address(std::uintptr_t address) const {
  std::lock_guard lock(mutex_);
  return address_space_.contains(address);
}

address_diagnosis pool::diagnose(std::uintptr_t address) const {
  std::lock_guard lock(mutex_);
  address_diagnosis d;
  if (!address_space_.contains(address)) return d;
  block* b = block_containing_locked(address);
  if (b == nullptr) {
    d.what = address_diagnosis::kind::unallocated;
    return d;
  }
  d.block_address = b->address;
  if (b->is_live()) {
    d.what = address_diagnosis::kind::interior_of_live;
    d.block_bytes = b->requested_bytes;
  } else {
    d.what = address_diagnosis::kind::freed;
    d.block_bytes = b->size_bytes;
  }
  return d;
}

void pool::check_invariants_locked() const {
  if constexpr (!expensive_checks) return;
  SOMA_EXPENSIVE_ASSERT(index_.free_bytes() == index_.recount_bytes(),
                        "the free index's byte count is the sum over its blocks");
  std::uint64_t committed = 0;
  for (const auto& [address, piece] : chunks_) committed += piece.size_bytes;
  SOMA_EXPENSIVE_ASSERT(committed == reserved_bytes_.load(std::memory_order_relaxed),
                        "reserved bytes are the sum over the commits");
  const block* before = nullptr;
  std::uint64_t block_bytes = 0;
  for (const auto& [address, b] : all_blocks_) {
    block_bytes += b->size_bytes;
    SOMA_EXPENSIVE_ASSERT(b->address == address, "a block is filed under its address");
    SOMA_EXPENSIVE_ASSERT(before == nullptr || before->address + before->size_bytes <= address,
                          "blocks do not overlap");
    if (const block* next = b->next_adjacent; next != nullptr) {
      SOMA_EXPENSIVE_ASSERT(next->previous_adjacent == b, "adjacency links are symmetric");
      SOMA_EXPENSIVE_ASSERT(b->address + b->size_bytes == next->address, "adjacent blocks touch");
    }
    if (const block* previous = b->previous_adjacent; previous != nullptr)
      SOMA_EXPENSIVE_ASSERT(previous->next_adjacent == b, "adjacency links are symmetric");
    before = b;
  }
  SOMA_EXPENSIVE_ASSERT(block_bytes == committed, "the blocks cover exactly the commits");
}

void pool::check_used_if_quiet() const {
  if constexpr (!expensive_checks) return;
  const call_census::mark before = calls_.take_mark();
  if (!before.quiet) return;
  std::uint64_t live_bytes = 0;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [address, b] : all_blocks_) {
      if (b->is_live()) live_bytes += b->requested_bytes;
    }
  }
  const std::uint64_t used = used_now();
  if (!calls_.still_quiet(before)) return;
  SOMA_EXPENSIVE_ASSERT(used == live_bytes, "used bytes are the sum over the live blocks");
}

pool_snapshot pool::snapshot() const {
  pool_snapshot out;
  const pool_statistics stats = statistics();
  out.reserved_bytes = stats.reserved_bytes;
  out.reserved_high_bytes = stats.reserved_high_bytes;
  out.used_bytes = stats.used_bytes;
  out.used_high_bytes = stats.used_high_bytes;
  std::lock_guard lock(mutex_);
  out.reservations = address_space_.reservations();
  for (const auto& [address, piece] : chunks_) out.commits.push_back({address, piece.size_bytes});
  out.blocks.reserve(all_blocks_.size());
  for (const auto& [address, b] : all_blocks_) {
    block_view view;
    view.address = address;
    view.size_bytes = b->size_bytes;
    if (b->is_live()) {
      view.what = block_view::state::live;
      view.requested_bytes = b->requested_bytes;
      view.scope = b->scope.load(std::memory_order_relaxed);
    } else if (!b->stamp.is_proven_complete()) {
      view.what = block_view::state::pending;
      view.stream_id = b->stamp.timeline->id();
      view.position = b->stamp.position;
    }
    out.blocks.push_back(view);
  }
  return out;
}

}  // namespace soma::detail
