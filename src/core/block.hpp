// One contiguous range of a pool's address space: a live allocation or free memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/spin_lock.hpp"
#include "core/stream_timeline.hpp"

namespace soma::detail {

/// Every allocation is aligned to and sized in multiples of this (as CUDA's pools).
inline constexpr std::size_t allocation_alignment_bytes = 256;

constexpr std::size_t round_up(std::size_t value, std::size_t multiple) noexcept {
  return (value + multiple - 1) / multiple * multiple;
}

enum class block_state : std::uint8_t {
  live,      ///< handed to the application
  freeing,   ///< live, claimed by a free in progress (runtime::free), briefly
  cached,    ///< freed into a stream cache (fast path); not coalesced
  indexed,   ///< in the pool's free index; coalesced with indexed neighbours
  detached,  ///< taken out of the index under the pool lock (being split, carved, handed out)
};

/// How a live block came to its allocation: the rule of S11 that let the stream reuse it, or
/// growth. Recorded in memory history; the numbers are part of soma's trace format.
enum class served_by : std::uint8_t {
  stream_cache = 0,         ///< the fast path: the stream's own earlier free (same stream)
  same_stream = 1,          ///< the free index, freed on the same stream
  proven_free = 2,          ///< the free index, free proven complete (a synchronize, S12)
  event_dependency = 3,     ///< follow event dependencies: the stream already waits on the free
  opportunistic = 4,        ///< the free had already run on its stream
  internal_dependency = 5,  ///< the allocator ordered the stream after the free
  growth = 6,               ///< memory committed for this allocation
  remap = 7,                ///< free granules mapped again as one range (design §3 "Remapping")
};

/// Blocks of one mapped run are linked in address order, so the free index can coalesce a
/// block with its neighbours. Fields other than `state`, `requested_bytes`, `stamp` and
/// `next_in_bin` change only under the owning pool's lock.
struct block {
  std::uintptr_t address = 0;
  std::size_t size_bytes = 0;          ///< capacity, a multiple of allocation_alignment_bytes
  std::size_t requested_bytes = 0;     ///< what the application asked for (live blocks)
  block* previous_adjacent = nullptr;  ///< block that ends where this one starts, if mapped
  block* next_adjacent = nullptr;
  block* next_in_bin = nullptr;  ///< link in a stream cache bin, or a list of the pool
  free_stamp stamp;              ///< where it was last freed
  std::atomic<block_state> state{block_state::detached};
  served_by how = served_by::growth;  ///< live blocks: set by the allocating call
  /// Lies in the pool's small region (pool::serves_small_apart): never linked with, so never
  /// merged into, a block of the other region.
  bool small_region = false;
  /// Live blocks: memory_history's scope label, 0 = none. Set by the runtime after the block
  /// went live (snapshots may read it meanwhile), hence atomic.
  std::atomic<std::uint32_t> scope{0};
  /// memory_history's stamp of this block's last allocation or free while recording, which the
  /// next one's stamp must pass (history_clock::cheap).
  std::atomic<std::uint64_t> history_stamp{0};

  std::uintptr_t end() const noexcept { return address + size_bytes; }
  block_state current_state() const noexcept { return state.load(std::memory_order_acquire); }
  /// Handed to the application and not yet freed (a free in progress still counts).
  bool is_live() const noexcept {
    const block_state now = current_state();
    return now == block_state::live || now == block_state::freeing;
  }
  /// Claims a live block for its free: false if it is not live. Two frees of one block never
  /// both succeed; a free that finds another one in progress waits for it to finish.
  bool claim_for_free() noexcept {
    for (;;) {
      block_state expected = block_state::live;
      if (state.compare_exchange_strong(expected, block_state::freeing, std::memory_order_acq_rel))
        return true;
      if (expected != block_state::freeing) return false;
      spin_pause();
    }
  }
  void set_state(block_state next) noexcept { state.store(next, std::memory_order_release); }
};

}  // namespace soma::detail
