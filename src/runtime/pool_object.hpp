// A pool as the runtime holds it (somaMemPool_t): the core pool plus what the runtime knows
// about it (device, handle, properties, default-ness, destruction state, sharing).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "backend/backend.hpp"
#include "core/block_directory.hpp"
#include "core/pointer_table.hpp"
#include "core/pool.hpp"
#include "runtime/backend_memory_provider.hpp"
#include "runtime/out_of_memory_advice.hpp"
#include "runtime/export_table.hpp"
#include "runtime/import_table.hpp"

namespace soma::detail {

/// Creation-time properties after validation (mirrors somaMemPoolProps).
struct pool_properties {
  int device = 0;  ///< the owning device; -1 for a host pool
  /// Where the memory is (S5): the device, or host memory (anywhere, or one NUMA node).
  backend::memory_location location;
  unsigned export_handle_types = 0;
  std::size_t max_size_bytes = 0;  // 0 = the location's memory
  bool imported = false;           // S7: memory another process exported; the pool cannot allocate
};

class pool_object final : public pool {
 public:
  pool_object(pool_config config, std::unique_ptr<backend_memory_provider> memory,
              pool_properties properties, bool is_default);
  ~pool_object();
  pool_object(const pool_object&) = delete;
  pool_object& operator=(const pool_object&) = delete;

  const pool_properties& properties() const noexcept { return properties_; }
  bool is_default() const noexcept { return is_default_; }
  bool is_destroyed() const noexcept { return destroyed_.load(std::memory_order_acquire); }
  void mark_destroyed() noexcept { destroyed_.store(true, std::memory_order_release); }
  std::uintptr_t handle() const noexcept { return handle_; }
  void set_handle(std::uintptr_t handle) noexcept { handle_ = handle; }
  /// From now on this pool's blocks that a free may name have entries in pointers (live
  /// ones, and those cached on a stream: block_directory). Call once, before any allocation.
  void keep_blocks_in(pointer_table<pool_object>& pointers);
  /// S7: imported from another process (somaMemPoolImportFromShareableHandle).
  bool is_imported() const noexcept { return properties_.imported; }
  /// Export records of an exportable pool; nullptr for the others.
  export_table* exports() const noexcept { return exports_.get(); }
  /// Mappings of an imported pool; nullptr for the others.
  import_table* imports() const noexcept { return imports_.get(); }

  /// Access of `device` to every allocation of the pool, present and future (S6): read-write
  /// for the owning device, what somaMemPoolSetAccess granted (none by default) for others.
  backend::access_flags access(int device) const;
  /// Whether turning remapping on (instead of failing) could map this pool's free memory
  /// again (backend_memory_provider::remaps_any_commit): the out-of-memory advice asks.
  bool remaps_any_commit() const { return memory_.remaps_any_commit(); }
  /// Grants or revokes access of a device other than the owner, on all mapped memory and on
  /// every later growth. Requires: checked by the caller (device in range, not the owner).
  status set_access(int device, backend::access_flags flags);
  /// S6 for S7: memory mapped outside the pool's own growth (an imported allocation) gets the
  /// grants made so far and every later one, until forget_mapping.
  status adopt_mapping(std::uintptr_t address, std::size_t bytes);
  void forget_mapping(std::uintptr_t address);
  /// S9: compaction before growth (somaMemPoolAttrCompactBeforeGrowth).
  void set_compaction(bool enabled);
  /// S9: remapping free granules instead of growing (somaMemPoolAttrRemapFreeMemory).
  void set_remap(remap_mode mode);
  /// S9: the release threshold (somaMemPoolAttrReleaseThreshold).
  void set_release_threshold(std::uint64_t bytes);
  /// The latest out-of-memory failure of an allocation from this pool, kept for
  /// somaMemPoolGetLastOutOfMemory.
  void note_out_of_memory(out_of_memory_record record);
  std::optional<out_of_memory_record> last_out_of_memory() const;

 private:
  pool_object(pool_config config, backend_memory_provider* memory, pool_properties properties,
              bool is_default);

  /// Where the platform gives back physical memory whole only (cuda), commits are made of
  /// granule-sized physical allocations when compaction or remapping before growth needs them,
  /// the latter only in a pool that keeps memory (release threshold above 0): one that gives
  /// memory back at every synchronize would pay a driver call per granule each time. Remapping
  /// instead of failing (the default) does not ask for them: growth stays one driver call per
  /// commit, and such a pool remaps only commits it made per granule.
  void update_commit_mode();

  // The pool's entries in the table of blocks by address.
  class directory final : public block_directory {
   public:
    directory(pointer_table<pool_object>& pointers, pool_object& owner)
        : pointers_(pointers), owner_(owner) {}
    void add(block* live) override { pointers_.insert(live, owner_); }
    void forget(block* b) override {
      [[maybe_unused]] const live_entry<pool_object> gone = pointers_.remove(b->address);
      SOMA_ASSERT(gone.live == b, "a block the pool forgets had its entry");
    }

   private:
    pointer_table<pool_object>& pointers_;
    pool_object& owner_;
  };

  backend_memory_provider& memory_;  // owned by the base class
  std::unique_ptr<directory> directory_;
  const pool_properties properties_;
  const bool is_default_;
  std::atomic<bool> destroyed_{false};
  std::uintptr_t handle_ = 0;
  const std::unique_ptr<export_table> exports_;
  const std::unique_ptr<import_table> imports_;
  mutable std::mutex out_of_memory_mutex_;
  std::optional<out_of_memory_record> last_out_of_memory_;
};

}  // namespace soma::detail
