// What a pool holds at one moment, for people to read (S10, soma's own): its address ranges, the
// physical memory behind them and every block with its state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/address_space.hpp"

namespace soma::detail {

/// One block of a pool's mapped memory.
struct block_view {
  enum class state {
    live,     ///< handed to the application
    free,     ///< free for every stream (its free proven complete, or no free pending)
    pending,  ///< freed on a stream whose work up to `position` is not proven complete yet
  };
  std::uintptr_t address = 0;
  std::size_t size_bytes = 0;       ///< capacity (a multiple of 256 bytes)
  std::size_t requested_bytes = 0;  ///< live: what the application asked for
  state what = state::free;
  std::uint64_t stream_id = 0;  ///< pending: the freeing stream's timeline id
  std::uint64_t position = 0;   ///< pending: the position its free waits for
  std::uint32_t scope = 0;      ///< live: memory_history's scope label, 0 = none
};

/// Taken under the pool lock. Blocks that the lock-free path changes meanwhile (another thread
/// allocating or freeing in this pool) may show their state before or after that change; with
/// the pool quiet the snapshot is exact: the live blocks' requested bytes sum to used bytes,
/// and the blocks tile the commits.
struct pool_snapshot {
  std::vector<address_range> reservations;  ///< address space, in address order
  std::vector<address_range> commits;       ///< physical memory mapped, in address order
  std::vector<block_view> blocks;           ///< in address order
  std::uint64_t reserved_bytes = 0;
  std::uint64_t reserved_high_bytes = 0;
  std::uint64_t used_bytes = 0;
  std::uint64_t used_high_bytes = 0;
};

}  // namespace soma::detail
