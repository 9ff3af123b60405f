#include "core/pointer_table.hpp"

namespace soma::detail {
namespace {

std::uint64_t mix(std::uintptr_t address) noexcept {
  // Allocations are 256-byte aligned: drop the zero bits, then spread (Fibonacci hashing).
  return (static_cast<std::uint64_t>(address) >> 8) * 0x9E3779B97F4A7C15ull;
}

}  // namespace

pointer_table::pointer_table() {
  for (auto& s : shards_) s.slots.assign(64, nullptr);
}

std::size_t pointer_table::shard_of(std::uintptr_t address) noexcept {
  return static_cast<std::size_t>(mix(address) >> 58);  // top 6 bits: 64 shards
}

std::size_t pointer_table::shard::home(std::uintptr_t address) const noexcept {
  return static_cast<std::size_t>(mix(address) >> 20) & (slots.size() - 1);
}

void pointer_table::shard::grow() {
  std::vector<block*> old(slots.size() * 2, nullptr);
  old.swap(slots);
  for (block* b : old) {
    if (b == nullptr) continue;
    std::size_t i = home(b->address);
    while (slots[i] != nullptr) i = (i + 1) & (slots.size() - 1);
    slots[i] = b;
  }
}

void pointer_table::insert(block* live_block) {
  shard& s = shards_[shard_of(live_block->address)];
  std::lock_guard lock(s.mutex);
  if ((s.used + 1) * 2 > s.slots.size()) s.grow();
  std::size_t i = s.home(live_block->address);
  while (s.slots[i] != nullptr) i = (i + 1) & (s.slots.size() - 1);
  s.slots[i] = live_block;
  ++s.used;
}

block* pointer_table::remove(std::uintptr_t address) {
  shard& s = shards_[shard_of(address)];
  std::lock_guard lock(s.mutex);
  const std::size_t mask = s.slots.size() - 1;
  std::size_t i = s.home(address);
  while (s.slots[i] != nullptr && s.slots[i]->address != address) i = (i + 1) & mask;
  block* found = s.slots[i];
  if (found == nullptr) return nullptr;
  // Backward-shift deletion keeps every probe chain unbroken without tombstones.
  std::size_t hole = i;
  for (std::size_t j = (i + 1) & mask; s.slots[j] != nullptr; j = (j + 1) & mask) {
    const std::size_t want = s.home(s.slots[j]->address);
    const bool movable = ((j - want) & mask) >= ((j - hole) & mask);
    if (movable) {
      s.slots[hole] = s.slots[j];
      hole = j;
    }
  }
  s.slots[hole] = nullptr;
  --s.used;
  return found;
}

block* pointer_table::find(std::uintptr_t address) const {
  const shard& s = shards_[shard_of(address)];
  std::lock_guard lock(s.mutex);
  const std::size_t mask = s.slots.size() - 1;
  for (std::size_t i = s.home(address); s.slots[i] != nullptr; i = (i + 1) & mask) {
    if (s.slots[i]->address == address) return s.slots[i];
  }
  return nullptr;
}

std::size_t pointer_table::size() const {
  std::size_t total = 0;
  for (const auto& s : shards_) {
    std::lock_guard lock(s.mutex);
    total += s.used;
  }
  return total;
}

}  // namespace soma::detail
