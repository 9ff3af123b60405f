// What the threads of threads_fuzz share: explicit pools in slots that any thread may destroy
// and replace while others allocate from them (S5; CUDA allows it, and soma keeps a pool alive
// under an allocation in flight), and events that one thread records and others wait on.
//
// Only allocation races with a destroy: a program that changes, trims or reads a pool while
// another thread destroys it uses a dead handle, so those calls hold the slot's lock shared
// (with_pool) and replace_pool holds it exclusively. A slot's generation changes before its
// pool is destroyed, so a thread whose allocation failed with somaErrorInvalidResourceHandle
// can tell a legitimate race (the generation it read has changed) from a broken handle.
// Events live from before the threads start until after they join.
#pragma once

#include <soma/soma.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <shared_mutex>

#include "fuzz_config.hpp"

namespace soma_fuzz {

inline constexpr int kSharedPools = 3;
inline constexpr int kSharedEvents = 3;

/// A slot's pool as one thread saw it.
struct pool_view {
  somaMemPool_t handle = nullptr;
  std::uint64_t generation = 0;
  int device = 0;
  std::size_t cap_bytes = kDeviceMemoryBytes;
};

class shared_objects {
 public:
  /// Creates every pool (on the devices and with the caps the bits choose) and every event.
  explicit shared_objects(std::uint8_t setup_bits);
  shared_objects(const shared_objects&) = delete;
  shared_objects& operator=(const shared_objects&) = delete;

  pool_view pool(int slot) const;
  /// Whether the slot's pool changed since the view was taken.
  bool pool_changed(int slot, std::uint64_t generation) const;
  /// Runs use(view) while no thread can replace the slot's pool.
  template <typename Use>
  void with_pool(int slot, Use&& use) const {
    const pool_slot& entry = pools_[static_cast<std::size_t>(slot)];
    std::shared_lock lock(entry.mutex);
    use(entry.view);
  }
  /// Destroys the slot's pool (live allocations stay until freed, S5) and creates another.
  void replace_pool(int slot, int device, std::size_t max_size);

  somaEvent_t event(int slot) const { return events_[static_cast<std::size_t>(slot)]; }

  /// After every thread joined: destroys the pools and events.
  void destroy_all();

 private:
  struct pool_slot {
    mutable std::shared_mutex mutex;
    pool_view view;
  };

  static void create_pool(pool_slot& slot, int device, std::size_t max_size);

  std::array<pool_slot, kSharedPools> pools_;
  std::array<somaEvent_t, kSharedEvents> events_{};
};

}  // namespace soma_fuzz
