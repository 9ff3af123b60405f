// The process-wide table of live allocations: pointer -> block and its owner (S2, S14).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "core/block.hpp"
#include "core/check.hpp"
#include "core/spin_lock.hpp"

namespace soma::detail {

/// A live allocation as the table holds it: the block, and the object of the layer above that
/// made it (Owner), so that layer reaches its own type without a cast.
template <typename Owner>
struct live_entry {
  block* live = nullptr;
  Owner* owner = nullptr;
};

/// Maps the start address of every live allocation to its entry. Sharded by address so
/// threads working on different allocations rarely meet on a lock; each shard is an
/// open-addressing table (linear probing, backward-shift deletion).
/// Thread-safe. Lookups by exact start address only: interior pointers miss here and are
/// diagnosed by the pool on the slow path (S14: never inferred from address ranges).
template <typename Owner>
class pointer_table {
 public:
  using entry = live_entry<Owner>;

  pointer_table() {
    for (auto& s : shards_) s.slots.assign(64, entry{});
  }

  void insert(block* live_block, Owner& owner) {
    shard& s = shards_[shard_of(live_block->address)];
    std::lock_guard lock(s.mutex);
    if ((s.used + 1) * 2 > s.slots.size()) s.grow();
    std::size_t i = s.home(live_block->address);
    while (s.slots[i].live != nullptr) {
      SOMA_ASSERT(s.slots[i].live->address != live_block->address,
                  "an address is live at most once");
      i = (i + 1) & (s.slots.size() - 1);
    }
    s.slots[i] = entry{live_block, &owner};
    ++s.used;
  }

  /// Removes and returns the entry of the block that starts at address ({} if none).
  entry remove(std::uintptr_t address) {
    shard& s = shards_[shard_of(address)];
    std::lock_guard lock(s.mutex);
    const std::size_t mask = s.slots.size() - 1;
    std::size_t i = s.home(address);
    while (s.slots[i].live != nullptr && s.slots[i].live->address != address) i = (i + 1) & mask;
    const entry found = s.slots[i];
    if (found.live == nullptr) return found;
    // Backward-shift deletion keeps every probe chain unbroken without tombstones.
    std::size_t hole = i;
    for (std::size_t j = (i + 1) & mask; s.slots[j].live != nullptr; j = (j + 1) & mask) {
      const std::size_t want = s.home(s.slots[j].live->address);
      if (((j - want) & mask) >= ((j - hole) & mask)) {
        s.slots[hole] = s.slots[j];
        hole = j;
      }
    }
    s.slots[hole] = entry{};
    --s.used;
    return found;
  }

  /// The entry of the block that starts at address ({} if none). The result is only
  /// meaningful while the caller knows the allocation stays live.
  entry find(std::uintptr_t address) const {
    const shard& s = shards_[shard_of(address)];
    std::lock_guard lock(s.mutex);
    const std::size_t mask = s.slots.size() - 1;
    for (std::size_t i = s.home(address); s.slots[i].live != nullptr; i = (i + 1) & mask) {
      if (s.slots[i].live->address == address) return s.slots[i];
    }
    return entry{};
  }

  std::size_t size() const {
    std::size_t total = 0;
    for (const auto& s : shards_) {
      std::lock_guard lock(s.mutex);
      total += s.used;
    }
    return total;
  }

 private:
  static constexpr std::size_t shard_count = 64;

  // Allocations are 256-byte aligned: drop the zero bits, then spread (Fibonacci hashing).
  static std::uint64_t mix(std::uintptr_t address) noexcept {
    return (static_cast<std::uint64_t>(address) >> 8) * 0x9E3779B97F4A7C15ull;
  }
  static std::size_t shard_of(std::uintptr_t address) noexcept {
    return static_cast<std::size_t>(mix(address) >> 58);  // top 6 bits: 64 shards
  }

  struct alignas(64) shard {  // own cache line: threads on different shards do not meet
    mutable spin_lock mutex;
    std::vector<entry> slots;  // live == nullptr: empty; capacity is a power of two
    std::size_t used = 0;

    std::size_t home(std::uintptr_t address) const noexcept {
      return static_cast<std::size_t>(mix(address) >> 20) & (slots.size() - 1);
    }
    void grow() {
      std::vector<entry> old(slots.size() * 2, entry{});
      old.swap(slots);
      for (const entry& e : old) {
        if (e.live == nullptr) continue;
        std::size_t i = home(e.live->address);
        while (slots[i].live != nullptr) i = (i + 1) & (slots.size() - 1);
        slots[i] = e;
      }
    }
  };

  std::array<shard, shard_count> shards_;
};

}  // namespace soma::detail
