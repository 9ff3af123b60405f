// Opaque handles for streams, events and pools that can be checked for validity and kind.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "core/status.hpp"

namespace soma::detail {

/// The kind a handle names; its top byte, so a handle of one kind is never valid as another.
enum class handle_kind : std::uint8_t { stream = 0xa1, event = 0xa2, pool = 0xa3 };

/// Maps opaque handle values to objects. A handle holds its kind in the top byte and the
/// slot and that slot's generation, mixed with a per-table random salt, below it. So a
/// destroyed handle, a handle of another kind, a small integer or a pointer is recognised
/// instead of dereferenced: no valid handle is below 2^56. Lookups take no lock.
/// Thread-safe. The table does not own the objects.
template <typename T, handle_kind Kind>
class handle_table {
 public:
  static constexpr std::uint32_t slots_per_segment = 1024;
  static constexpr std::uint32_t segment_count = 1024;
  static constexpr std::uint32_t no_slot = UINT32_MAX;

  handle_table() : salt_(random_salt()), serial_(next_serial()) {}
  handle_table(const handle_table&) = delete;
  handle_table& operator=(const handle_table&) = delete;
  ~handle_table() {
    for (auto& s : segments_) delete s.load(std::memory_order_relaxed);
  }

  /// Registers object; returns its handle and its dense slot index (handle 0 when full).
  std::uintptr_t add(T* object, std::uint32_t* slot_index = nullptr) {
    std::lock_guard lock(mutex_);
    const std::uint32_t index = take_slot_locked();
    if (index == no_slot) return 0;
    slot& s = slot_at(index);
    const std::uint32_t generation = next_generation(s.generation.load(std::memory_order_relaxed));
    s.object.store(object, std::memory_order_relaxed);
    s.generation.store(generation, std::memory_order_release);
    if (slot_index != nullptr) *slot_index = index;
    return encode(index, generation);
  }

  /// A slot index that no handle names (for objects reached otherwise, such as a device's
  /// default stream), or no_slot when full. Given back with release_slot.
  std::uint32_t reserve_slot() {
    std::lock_guard lock(mutex_);
    return take_slot_locked();
  }

  /// The object, or nullptr for a handle that was never issued, was invalidated, or names
  /// another kind.
  T* find(std::uintptr_t handle) const noexcept {
    // A thread tends to name the same handle again and again (its stream): the slot and
    // generation of its last successful lookup are kept, so a repeat is a compare and the
    // slot's generation check, not a decode.
    recent_lookup* recent = recent_;
    if (recent[0].handle == handle && recent[0].table == serial_) [[likely]] {
      if (recent[0].at->generation.load(std::memory_order_acquire) == recent[0].generation)
        return recent[0].at->object.load(std::memory_order_acquire);
    } else if (recent[1].handle == handle && recent[1].table == serial_) {
      // The one before (a ping-pong between two streams or two events names two in turn).
      if (recent[1].at->generation.load(std::memory_order_acquire) == recent[1].generation)
        return recent[1].at->object.load(std::memory_order_acquire);
    }
    return find_and_remember(handle);
  }

  /// find without the thread's memory of its last lookup.
  T* find_and_remember(std::uintptr_t handle) const noexcept {
    std::uint32_t index = 0;
    std::uint32_t generation = 0;
    if (!decode(handle, &index, &generation)) return nullptr;
    const segment_type* segment =
        segments_[index / slots_per_segment].load(std::memory_order_acquire);
    if (segment == nullptr) return nullptr;
    const slot& s = (*segment)[index % slots_per_segment];
    if (s.generation.load(std::memory_order_acquire) != generation) return nullptr;
    T* object = s.object.load(std::memory_order_acquire);
    if (object != nullptr) {
      recent_lookup* recent = recent_;
      recent[1] = recent[0];
      recent[0] = recent_lookup{serial_, handle, &s, generation};
    }
    return object;
  }

  /// find, or invalid_handle saying "<noun> 0x... is not a live <noun> (destroyed, or never
  /// created by <creator>)".
  /// Inline where it finds the object (event record and wait resolve one each call); the
  /// message is built out of line.
  result<T*> resolve(std::uintptr_t handle, const char* noun, const char* creator) const {
    if (T* object = find(handle); object != nullptr) [[likely]]
      return object;
    return not_live(handle, noun, creator);
  }

  /// Invalidates handle but keeps its slot out of use until release_slot: the caller still
  /// has state keyed by the slot to clear. Returns the slot, or no_slot if handle was not valid.
  std::uint32_t invalidate(std::uintptr_t handle) {
    std::lock_guard lock(mutex_);
    if (find(handle) == nullptr) return no_slot;
    std::uint32_t index = 0;
    std::uint32_t generation = 0;
    decode(handle, &index, &generation);
    slot& s = slot_at(index);
    // A new generation: every handle issued for this slot no longer matches.
    s.generation.store(next_generation(generation), std::memory_order_release);
    s.object.store(nullptr, std::memory_order_release);
    return index;
  }

  /// Lets a slot from invalidate or reserve_slot serve new objects.
  void release_slot(std::uint32_t index) {
    std::lock_guard lock(mutex_);
    free_slots_.push_back(index);
  }

  /// Invalidates handle and frees its slot at once; false if it was not valid.
  bool remove(std::uintptr_t handle) {
    const std::uint32_t index = invalidate(handle);
    if (index == no_slot) return false;
    release_slot(index);
    return true;
  }

 private:
  struct slot {
    std::atomic<T*> object{nullptr};
    std::atomic<std::uint32_t> generation{0};
  };
  using segment_type = std::array<slot, slots_per_segment>;
  // A thread's last two successful lookups in tables of this kind, the newest first. Slots live
  // as long as their table, and a handle is valid only while its slot has its generation.
  struct recent_lookup {
    std::uint64_t table = 0;  // the table's serial: a table made later at the same address differs
    std::uintptr_t handle = 0;
    const slot* at = nullptr;
    std::uint32_t generation = 0;
  };
  static constinit inline thread_local recent_lookup recent_[2]{};
  static constexpr std::uint64_t low_bits = (std::uint64_t{1} << 56) - 1;
  static constexpr std::uint32_t generation_mask = 0xffffff;

  [[gnu::noinline]] static status not_live(std::uintptr_t handle, const char* noun,
                                           const char* creator) {
    return status(error_code::invalid_handle,
                  std::string(noun) + " " + format_address(handle) + " is not a live " + noun +
                      " (destroyed, or never created by " + creator + ")");
  }
  static std::uint64_t random_salt() {
    std::random_device device;
    const std::uint64_t high = device();
    return ((high << 32) | device()) & low_bits;
  }
  static std::uint32_t next_generation(std::uint32_t generation) noexcept {
    generation = (generation + 1) & generation_mask;
    return generation == 0 ? 1 : generation;
  }

  std::uint32_t take_slot_locked() {
    if (!free_slots_.empty()) {
      const std::uint32_t index = free_slots_.back();
      free_slots_.pop_back();
      return index;
    }
    if (next_slot_ >= slots_per_segment * segment_count) return no_slot;
    const std::uint32_t index = next_slot_++;
    auto& segment = segments_[index / slots_per_segment];
    if (segment.load(std::memory_order_relaxed) == nullptr)
      segment.store(new segment_type(), std::memory_order_release);
    return index;
  }
  slot& slot_at(std::uint32_t index) {
    return (*segments_[index / slots_per_segment].load(
        std::memory_order_acquire))[index % slots_per_segment];
  }

  std::uintptr_t encode(std::uint32_t index, std::uint32_t generation) const noexcept {
    const std::uint64_t mixed =
        ((static_cast<std::uint64_t>(generation) << 32) | (static_cast<std::uint64_t>(index) + 1)) ^
        salt_;
    return static_cast<std::uintptr_t>((static_cast<std::uint64_t>(Kind) << 56) | mixed);
  }
  bool decode(std::uintptr_t handle, std::uint32_t* index,
              std::uint32_t* generation) const noexcept {
    const auto value = static_cast<std::uint64_t>(handle);
    if ((value >> 56) != static_cast<std::uint64_t>(Kind)) return false;
    const std::uint64_t plain = (value & low_bits) ^ salt_;
    const auto slot_plus_one = static_cast<std::uint32_t>(plain & 0xffffffffu);
    *generation = static_cast<std::uint32_t>(plain >> 32);
    if (slot_plus_one == 0 || *generation == 0 || *generation > generation_mask) return false;
    *index = slot_plus_one - 1;
    return *index < slots_per_segment * segment_count;
  }

  static std::uint64_t next_serial() noexcept {
    static std::atomic<std::uint64_t> serials{0};
    return serials.fetch_add(1, std::memory_order_relaxed) + 1;
  }

  const std::uint64_t salt_;
  const std::uint64_t serial_;  // never 0, so no table matches a thread's empty recent_lookup
  std::mutex mutex_;
  std::array<std::atomic<segment_type*>, segment_count> segments_{};
  std::vector<std::uint32_t> free_slots_;
  std::uint32_t next_slot_ = 0;
};

}  // namespace soma::detail
