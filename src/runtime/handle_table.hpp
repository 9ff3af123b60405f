// Opaque handles for streams, events and pools that can be checked for validity.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace soma::detail {

/// Maps opaque handle values to objects. A handle encodes a slot and that slot's
/// generation, so a destroyed handle (or a forged value) is recognised instead of
/// dereferenced. Lookups take no lock. Handles are never 0 (0 is the default stream).
/// Thread-safe. The table does not own the objects.
template <typename T>
class handle_table {
 public:
  static constexpr std::uint32_t slots_per_segment = 1024;
  static constexpr std::uint32_t segment_count = 1024;

  handle_table() = default;
  handle_table(const handle_table&) = delete;
  handle_table& operator=(const handle_table&) = delete;
  ~handle_table() {
    for (auto& s : segments_) delete s.load(std::memory_order_relaxed);
  }

  /// Registers object; returns its handle and its dense slot index (0 when full).
  std::uintptr_t add(T* object, std::uint32_t* slot_index = nullptr) {
    std::lock_guard lock(mutex_);
    std::uint32_t index = 0;
    if (!free_slots_.empty()) {
      index = free_slots_.back();
      free_slots_.pop_back();
    } else {
      if (next_slot_ >= slots_per_segment * segment_count) return 0;
      index = next_slot_++;
      auto& segment = segments_[index / slots_per_segment];
      if (segment.load(std::memory_order_relaxed) == nullptr)
        segment.store(new segment_type(), std::memory_order_release);
    }
    slot& s = (*segments_[index / slots_per_segment].load(std::memory_order_acquire))[index % slots_per_segment];
    const std::uint32_t generation = s.generation.load(std::memory_order_relaxed) + 1;
    s.object.store(object, std::memory_order_relaxed);
    s.generation.store(generation, std::memory_order_release);
    if (slot_index != nullptr) *slot_index = index;
    return encode(index, generation);
  }

  /// The object, or nullptr for a handle that was never issued or was removed.
  T* find(std::uintptr_t handle) const noexcept {
    const std::uint32_t index = static_cast<std::uint32_t>(handle & 0xffffffffu) - 1;
    const auto generation = static_cast<std::uint32_t>(handle >> 32);
    if (index >= slots_per_segment * segment_count || generation == 0) return nullptr;
    const segment_type* segment = segments_[index / slots_per_segment].load(std::memory_order_acquire);
    if (segment == nullptr) return nullptr;
    const slot& s = (*segment)[index % slots_per_segment];
    if (s.generation.load(std::memory_order_acquire) != generation) return nullptr;
    return s.object.load(std::memory_order_acquire);
  }

  /// Invalidates handle; false if it was not valid.
  bool remove(std::uintptr_t handle) {
    std::lock_guard lock(mutex_);
    if (find(handle) == nullptr) return false;
    const std::uint32_t index = static_cast<std::uint32_t>(handle & 0xffffffffu) - 1;
    slot& s = (*segments_[index / slots_per_segment].load(std::memory_order_acquire))[index % slots_per_segment];
    // A new generation: every handle issued for this slot no longer matches.
    s.generation.store(s.generation.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    s.object.store(nullptr, std::memory_order_release);
    free_slots_.push_back(index);
    return true;
  }

 private:
  struct slot {
    std::atomic<T*> object{nullptr};
    std::atomic<std::uint32_t> generation{0};
  };
  using segment_type = std::array<slot, slots_per_segment>;

  static std::uintptr_t encode(std::uint32_t index, std::uint32_t generation) noexcept {
    return (static_cast<std::uintptr_t>(generation) << 32) | (static_cast<std::uintptr_t>(index) + 1);
  }

  std::mutex mutex_;
  std::array<std::atomic<segment_type*>, segment_count> segments_{};
  std::vector<std::uint32_t> free_slots_;
  std::uint32_t next_slot_ = 0;
};

}  // namespace soma::detail
