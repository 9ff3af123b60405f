// Pools (S3, S4, S5, S6, S9, S10): creation with checked properties, each device's default and
// current pool, attributes, trim, access, deferred destruction, and what is asked of all pools
// at once (addresses, synchronizes, streams that go).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "core/status.hpp"
#include "runtime/device_table.hpp"
#include "runtime/handle_table.hpp"
#include "runtime/pointer_info.hpp"
#include "runtime/pool_hazards.hpp"
#include "runtime/pool_object.hpp"
#include "runtime/stream_registry.hpp"

namespace soma::detail {

/// Values of somaMemLocationType and somaMemAllocationType, as the C API passes them (ints: C
/// callers may pass any value, and each is checked).
enum location_type : int {
  location_type_device = 1,
  location_type_host = 2,
  location_type_host_numa = 3,
  location_type_host_numa_current = 4,
};
enum allocation_type : int { allocation_type_pinned = 1, allocation_type_managed = 2 };

/// Why a managed pool is refused (not_supported), wherever one is asked for.
inline constexpr const char* managed_reason =
    "managed memory is not supported: soma's pools are built on the driver's virtual memory "
    "calls (cuMemCreate, cuMemMap), which make pinned device or host memory only, never "
    "managed memory";

/// somaMemPoolProps as the C API received it, checked by pool_registry::create.
struct raw_pool_properties {
  int allocation_type = 0;
  unsigned handle_types = 0;
  int location_type = 0;
  int location_id = 0;
  bool has_win32_security_attributes = false;
  std::size_t max_size_bytes = 0;
  unsigned usage = 0;
  bool reserved_is_zero = true;
};

/// Pool attributes, numbered as somaMemPoolAttr (capi/soma_capi_memory.cpp checks each), in
/// families.
enum class pool_attribute : int {
  // the reuse policies (S11) and the release threshold (S9), settable
  reuse_follow_event_dependencies = 1,
  reuse_allow_opportunistic,
  reuse_allow_internal_dependencies,
  release_threshold,
  // statistics (S10): currents read only, highs set only to 0 (reset)
  reserved_current,
  reserved_high,
  used_current,
  used_high,
  // read only, as CUDA 13.2's cudaMemPoolAttr 9-13 (S5: what the pool was created with)
  allocation_type,
  export_handle_types,
  location_id,
  location_type,
  max_pool_size,
  // soma's own
  compact_before_growth = 1000,
  remap_free_memory,
  remap_count,
  remapped_bytes,
  remap_kept_bytes,
};

/// S6: one entry of somaMemPoolSetAccess, {location type, location id, flags} as
/// somaMemAccessDesc holds them.
struct access_request {
  int location_type = 0;
  int location_id = 0;
  int flags = 0;
};

/// Thread-safe. A destroyed pool stays (destroyed-but-busy) until nothing is live in it, its
/// frees are complete and no thread uses it (pool_hazards); reap() then deletes it.
class pool_registry final : public stream_listener {
 public:
  /// pointers: the process's table of blocks by address, which each pool keeps current with
  /// its blocks (core/block_directory.hpp).
  pool_registry(backend::backend& platform, const device_table& devices,
                pointer_table<pool_object>& pointers);
  pool_registry(const pool_registry&) = delete;
  pool_registry& operator=(const pool_registry&) = delete;

  /// Creates each device's default pool, which is its current pool.
  status start();

  result<pool_object*> resolve(std::uintptr_t handle) const;
  result<std::uintptr_t> create(const raw_pool_properties& properties);
  /// S7: a pool of device holding memory another process exported; it cannot allocate.
  result<pool_object*> create_imported(backend::memory_location where, std::string name);
  status destroy(std::uintptr_t handle);
  result<std::uintptr_t> default_pool(int device) const;
  status set_current(int device, std::uintptr_t pool_handle);
  result<std::uintptr_t> current(int device) const;
  // -- pools keyed by location and allocation type (somaMemGetDefaultMemPool, ...) -------
  /// The default pool of a location (a device's, or the host's and each host NUMA node's,
  /// made at the first call); invalid_value for a location or type CUDA refuses here.
  result<std::uintptr_t> default_pool_at(int location_type, int location_id, int allocation_type);
  result<std::uintptr_t> current_at(int location_type, int location_id, int allocation_type);
  /// Requires of pool_handle: its location and allocation type are the ones given.
  status set_current_at(int location_type, int location_id, int allocation_type,
                        std::uintptr_t pool_handle);
  status set_attribute(std::uintptr_t handle, pool_attribute attribute, const void* value);
  status get_attribute(std::uintptr_t handle, pool_attribute attribute, void* value) const;
  status trim(std::uintptr_t handle, std::size_t keep_bytes);
  status set_name(std::uintptr_t handle, const char* name);
  status set_access(std::uintptr_t handle, const access_request* requests, std::size_t count);
  /// S6: whether a list of count access entries may be read at all: not NULL with a count, and
  /// no more entries than there are devices (each device needs one entry at most, as CUDA
  /// bounds a graph alloc node's access list). Callers check it before copying the list.
  status check_access_list(const void* list, std::size_t count) const;
  result<int> access(std::uintptr_t handle, int location_type, int location_id) const;

  // -- use by allocations: a pool found here is not deleted until release() ------------
  /// The device's current pool, published as in use by this thread (pool_hazards) so that a
  /// concurrent destroy does not delete it under the caller; release() ends the use.
  pool_object* acquire_current(int device) const {
    const std::atomic<pool_object*>& current = current_of(device);
    pool_object* pool = current.load(std::memory_order_acquire);
    for (;;) {
      pool_hazards::publish(pool);
      pool_object* again = current.load(std::memory_order_seq_cst);
      if (again == pool) return pool;
      pool = again;
    }
  }
  /// The pool of handle, published as in use by this thread, or an error.
  result<pool_object*> acquire(std::uintptr_t handle) const;
  /// acquire() without the error: nullptr (and nothing published) where acquire() would fail.
  pool_object* acquire_live(std::uintptr_t handle) const noexcept {
    for (;;) {
      pool_object* found = handles_.find(handle);
      if (found == nullptr) {
        pool_hazards::withdraw();  // a pool published by a pass before
        return nullptr;
      }
      pool_hazards::publish(found);
      if (handles_.find(handle) == found) return found;
    }
  }
  static void release() noexcept { pool_hazards::withdraw(); }
  /// Runs fn(pool or nullptr if it is gone) under the registry lock, so the pool is not
  /// deleted meanwhile (S7: export and import work on a pool outside an allocation).
  status with_pool(std::uintptr_t handle, const std::function<status(pool_object*)>& fn) const;

  /// Runs fn on every pool not destroyed, under the registry lock: default pools first, then
  /// the others in creation order.
  void for_each_live(const std::function<void(const pool_object&)>& fn) const;

  // -- questions about addresses (S14) -------------------------------------------------
  /// invalid_value explaining why address is not a live allocation (action names the call).
  status explain_unknown_pointer(std::uintptr_t address, const char* action) const;
  /// The pool with a live allocation around address (base and size into *info), or nullptr.
  const pool_object* find_interior(std::uintptr_t address, pointer_info* info) const;
  /// Whether address lies in any pool's address space, imported mappings included.
  bool owns_address(std::uintptr_t address) const;
  /// S7: the imported pool whose live mapping holds address (base and size into *info, if
  /// not null), or nullptr.
  const pool_object* find_imported(std::uintptr_t address, pointer_info* info) const;
  /// S7: frees an imported mapping; it goes once stream ran what was enqueued before.
  status free_imported(pool_object& owner, block* live, const stream_timeline& stream);

  /// Deletes destroyed pools that are done (see the class comment).
  void reap();

  // -- stream_listener -----------------------------------------------------------------
  void stream_destroyed(const stream_timeline& timeline) override;
  void timeline_forgotten(const stream_timeline& timeline, free_stamp instead) override;
  void synchronized() override;

 private:
  /// set_attribute's work; set_attribute then records the pool's settings in memory history.
  status change_attribute(pool_object& p, pool_attribute attribute, const void* value);
  struct device_pools {
    pool_object* default_pool = nullptr;
    std::atomic<pool_object*> current{nullptr};
  };
  /// The location a (type, id, allocation type) names, checked as CUDA checks it (call names
  /// the C function in messages).
  result<backend::memory_location> checked_location(const char* call, int location_type,
                                                    int location_id, int allocation_type) const;
  /// The default and current pools of a host location, made at the first use (call names
  /// the C function in messages).
  result<device_pools*> host_pools_of(const char* call, backend::memory_location where);
  /// The default or the current pool (current_pool) of a location: default_pool_at and
  /// current_at, whose C function call names in messages.
  result<std::uintptr_t> pool_at(const char* call, bool current_pool, int location_type,
                                 int location_id, int allocation_type);
  /// What a pool at `where` may be created with; an error where the platform has none.
  status check_host_location(const char* call, backend::memory_location where,
                             unsigned handle_types) const;

  result<pool_object*> add(const pool_properties& properties, bool is_default, std::string name);
  std::atomic<pool_object*>& current_of(int device) const {
    return per_device_[static_cast<std::size_t>(device)]->current;
  }
  /// Releases the mappings whose free completed; true if pool holds none any more.
  static bool release_imported(pool_object& pool);

  backend::backend& platform_;
  const device_table& devices_;
  pointer_table<pool_object>& pointers_;
  handle_table<pool_object, handle_kind::pool> handles_;
  std::vector<std::unique_ptr<device_pools>> per_device_;
  // Host locations' default and current pools, by (type, NUMA node); under mutex_ while
  // found or made, never removed (the pointers stay valid).
  std::map<std::pair<int, int>, std::unique_ptr<device_pools>> per_host_location_;
  std::atomic<bool> has_imported_pools_{false};

  // Held shared while pools are used outside the registry lock (synchronized), exclusive
  // while destroyed pools are deleted, so no pool is deleted under a caller. Taken before
  // mutex_.
  std::shared_mutex reap_mutex_;
  mutable std::mutex mutex_;                         // pools_
  std::vector<std::unique_ptr<pool_object>> pools_;  // live and destroyed-but-busy
};

}  // namespace soma::detail
