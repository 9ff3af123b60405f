// The process-wide table of live allocations: pointer -> block (S2, S14).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "core/block.hpp"
#include "core/spin_lock.hpp"

namespace soma::detail {

/// Maps the start address of every live allocation to its block. Sharded by address so
/// threads working on different allocations rarely meet on a lock; each shard is an
/// open-addressing table (linear probing, backward-shift deletion).
/// Thread-safe. Lookups by exact start address only: interior pointers miss here and are
/// diagnosed by the pool on the slow path (S14: never inferred from address ranges).
class pointer_table {
 public:
  pointer_table();

  void insert(block* live_block);
  /// Removes and returns the block that starts at address, or nullptr.
  block* remove(std::uintptr_t address);
  /// The block that starts at address, or nullptr. The result is only meaningful while the
  /// caller knows the allocation stays live.
  block* find(std::uintptr_t address) const;
  std::size_t size() const;

 private:
  static constexpr std::size_t shard_count = 64;

  struct alignas(64) shard {  // own cache line: threads on different shards do not meet
    mutable spin_lock mutex;
    std::vector<block*> slots;  // nullptr = empty; capacity is a power of two
    std::size_t used = 0;

    void grow();
    std::size_t home(std::uintptr_t address) const noexcept;
  };

  static std::size_t shard_of(std::uintptr_t address) noexcept;

  std::array<shard, shard_count> shards_;
};

}  // namespace soma::detail
