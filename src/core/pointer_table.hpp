// The process-wide table of the blocks a free may name: pointer -> block and its owner (S2,
// S14).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/block.hpp"
#include "core/check.hpp"
#include "core/spin_lock.hpp"

namespace soma::detail {

/// A block as the table holds it: the block, and the object of the layer above that made it
/// (Owner), so that layer reaches its own type without a cast.
template <typename Owner>
struct live_entry {
  block* live = nullptr;
  Owner* owner = nullptr;
};

/// Maps the start address of a block to its entry. Sharded by address; each shard is an
/// open-addressing table (linear probing, backward-shift deletion).
/// Writers take the shard's lock; readers (find) take none: each shard is a sequence lock, so
/// a free, which only reads here, writes no cache line that other threads read. An entry
/// found is a snapshot: the caller confirms it on the block (a free claims the block's state,
/// then checks its address).
/// Thread-safe. Lookups by exact start address only: interior pointers miss here and are
/// diagnosed by the pool on the slow path (S14: never inferred from address ranges).
template <typename Owner>
class pointer_table {
 public:
  using entry = live_entry<Owner>;

  pointer_table() = default;
  pointer_table(const pointer_table&) = delete;
  pointer_table& operator=(const pointer_table&) = delete;

  void insert(block* live_block, Owner& owner) {
    const std::uintptr_t address = live_block->address;
    shard& s = shards_[shard_of(address)];
    std::lock_guard lock(s.mutex);
    if ((s.used + 1) * 2 > s.capacity()) s.grow();
    const writing_scope writing(s);
    slot_array& slots = *s.slots.load(std::memory_order_relaxed);
    std::size_t i = slots.home(address);
    while (slots[i].address.load(std::memory_order_relaxed) != 0) {
      SOMA_ASSERT(slots[i].address.load(std::memory_order_relaxed) != address,
                  "an address is in the table at most once");
      i = slots.next(i);
    }
    slots[i].store(address, entry{live_block, &owner});
    ++s.used;
  }

  /// Removes and returns the entry of the block that starts at address ({} if none).
  entry remove(std::uintptr_t address) {
    shard& s = shards_[shard_of(address)];
    std::lock_guard lock(s.mutex);
    slot_array& slots = *s.slots.load(std::memory_order_relaxed);
    std::size_t i = slots.home(address);
    for (;; i = slots.next(i)) {
      const std::uintptr_t at = slots[i].address.load(std::memory_order_relaxed);
      if (at == 0) return entry{};
      if (at == address) break;
    }
    const entry found = slots[i].load();
    const writing_scope writing(s);
    // Backward-shift deletion keeps every probe chain unbroken without tombstones.
    std::size_t hole = i;
    for (std::size_t j = slots.next(i);; j = slots.next(j)) {
      const std::uintptr_t at = slots[j].address.load(std::memory_order_relaxed);
      if (at == 0) break;
      const std::size_t want = slots.home(at);
      if (((j - want) & slots.mask) >= ((j - hole) & slots.mask)) {
        slots[hole].store(at, slots[j].load());
        hole = j;
      }
    }
    slots[hole].store(0, entry{});
    --s.used;
    return found;
  }

  /// The entry of the block that starts at address ({} if none), as it stood at some moment
  /// during the call. Takes no lock and writes nothing.
  entry find(std::uintptr_t address) const noexcept {
    const shard& s = shards_[shard_of(address)];
    for (;;) {
      const std::uint64_t before = s.sequence.load(std::memory_order_acquire);
      if ((before & 1U) == 0) {
        const slot_array& slots = *s.slots.load(std::memory_order_acquire);
        entry found{};
        for (std::size_t i = slots.home(address);; i = slots.next(i)) {
          const std::uintptr_t at = slots[i].address.load(std::memory_order_relaxed);
          if (at == 0) break;
          if (at == address) {
            found = slots[i].load();
            break;
          }
        }
        std::atomic_thread_fence(std::memory_order_acquire);
        if (s.sequence.load(std::memory_order_relaxed) == before) return found;
      }
      spin_pause();
    }
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
  static constexpr std::size_t initial_slots = 64;

  // Allocations are 256-byte aligned: drop the zero bits, then spread (Fibonacci hashing).
  static std::uint64_t mix(std::uintptr_t address) noexcept {
    return (static_cast<std::uint64_t>(address) >> 8) * 0x9E3779B97F4A7C15ull;
  }
  static std::size_t shard_of(std::uintptr_t address) noexcept {
    return static_cast<std::size_t>(mix(address) >> 58);  // top 6 bits: 64 shards
  }

  // Every field atomic: readers read while a writer writes, and retry if the sequence moved.
  struct slot {
    std::atomic<std::uintptr_t> address{0};  // 0: empty
    std::atomic<block*> live{nullptr};
    std::atomic<Owner*> owner{nullptr};

    entry load() const noexcept {
      return entry{live.load(std::memory_order_relaxed), owner.load(std::memory_order_relaxed)};
    }
    void store(std::uintptr_t at, entry e) noexcept {
      address.store(at, std::memory_order_relaxed);
      live.store(e.live, std::memory_order_relaxed);
      owner.store(e.owner, std::memory_order_relaxed);
    }
  };

  struct slot_array {
    explicit slot_array(std::size_t count) : mask(count - 1), slots(new slot[count]) {}
    std::size_t mask;  // capacity - 1; capacity is a power of two
    std::unique_ptr<slot[]> slots;

    slot& operator[](std::size_t i) noexcept { return slots[i]; }
    const slot& operator[](std::size_t i) const noexcept { return slots[i]; }
    std::size_t home(std::uintptr_t address) const noexcept {
      return static_cast<std::size_t>(mix(address) >> 20) & mask;
    }
    std::size_t next(std::size_t i) const noexcept { return (i + 1) & mask; }
  };

  struct alignas(64) shard {  // own cache line: threads on different shards do not meet
    mutable spin_lock mutex;  // writers
    std::atomic<std::uint64_t> sequence{0};  // odd while a writer changes the slots
    std::atomic<slot_array*> slots{nullptr};
    std::size_t used = 0;
    // Every array this shard had: a reader may still probe an old one after a grow.
    std::vector<std::unique_ptr<slot_array>> arrays;

    shard() {
      arrays.push_back(std::make_unique<slot_array>(initial_slots));
      slots.store(arrays.back().get(), std::memory_order_relaxed);
    }
    std::size_t capacity() const noexcept {
      return slots.load(std::memory_order_relaxed)->mask + 1;
    }
    void grow() {
      const slot_array& old = *slots.load(std::memory_order_relaxed);
      auto grown = std::make_unique<slot_array>(capacity() * 2);
      for (std::size_t i = 0; i <= old.mask; ++i) {
        const std::uintptr_t at = old[i].address.load(std::memory_order_relaxed);
        if (at == 0) continue;
        std::size_t j = grown->home(at);
        while ((*grown)[j].address.load(std::memory_order_relaxed) != 0) j = grown->next(j);
        (*grown)[j].store(at, old[i].load());
      }
      // Readers see the old array whole or the new one whole; either holds every entry.
      slots.store(grown.get(), std::memory_order_release);
      arrays.push_back(std::move(grown));
    }
  };

  // Marks a shard's slots as changing (odd sequence) for its lifetime. Requires: the lock.
  class writing_scope {
   public:
    explicit writing_scope(shard& s) noexcept : s_(s) {
      s_.sequence.store(s_.sequence.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_release);
    }
    ~writing_scope() {
      s_.sequence.store(s_.sequence.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    }
    writing_scope(const writing_scope&) = delete;
    writing_scope& operator=(const writing_scope&) = delete;

   private:
    shard& s_;
  };

  std::array<shard, shard_count> shards_;
};

}  // namespace soma::detail
