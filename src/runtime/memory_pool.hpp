// A runtime pool: the core pool plus what the runtime knows about it (device, handle,
// properties, default-ness, destruction state).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "backend/backend.hpp"
#include "core/pool.hpp"
#include "runtime/pool_sharing.hpp"

namespace soma::detail {

/// Creation-time properties after validation (mirrors somaMemPoolProps).
struct pool_properties {
  int device = 0;
  unsigned export_handle_types = 0;
  std::size_t max_size_bytes = 0;  // 0 = the device's memory
  bool imported = false;           // S7: memory another process exported; the pool cannot allocate
};

class backend_pool_memory;

class memory_pool final : public pool {
 public:
  memory_pool(pool_config config, std::unique_ptr<backend_pool_memory> memory,
              pool_properties properties, bool is_default);

  const pool_properties& properties() const noexcept { return properties_; }
  bool is_default() const noexcept { return is_default_; }
  bool is_destroyed() const noexcept { return destroyed_.load(std::memory_order_acquire); }
  void mark_destroyed() noexcept { destroyed_.store(true, std::memory_order_release); }
  std::uintptr_t handle() const noexcept { return handle_; }
  void set_handle(std::uintptr_t handle) noexcept { handle_ = handle; }
  /// S7: imported from another process (somaMemPoolImportFromShareableHandle).
  bool is_imported() const noexcept { return properties_.imported; }
  /// Export records of an exportable pool; nullptr for the others.
  export_table* exports() const noexcept { return exports_.get(); }
  /// Mappings of an imported pool; nullptr for the others.
  import_table* imports() const noexcept { return imports_.get(); }

  /// Access of `device` to every allocation of the pool, present and future (S6): read-write
  /// for the owning device, what somaMemPoolSetAccess granted (none by default) for others.
  backend::access_flags access(int device) const;
  /// Grants or revokes access of a device other than the owner, on all mapped memory and on
  /// every later growth. Requires: checked by the caller (device in range, not the owner).
  status set_access(int device, backend::access_flags flags);
  /// S6 for S7: memory mapped outside the pool's own growth (an imported allocation) gets the
  /// grants made so far and every later one, until forget_mapping.
  status adopt_mapping(std::uintptr_t address, std::size_t bytes);
  void forget_mapping(std::uintptr_t address);
  /// S9: compaction before growth (somaMemPoolAttrCompactBeforeGrowth).
  void set_compaction(bool enabled);

 private:
  memory_pool(pool_config config, backend_pool_memory* memory, pool_properties properties,
              bool is_default);

  backend_pool_memory& memory_;  // owned by the base class
  const pool_properties properties_;
  const bool is_default_;
  std::atomic<bool> destroyed_{false};
  std::uintptr_t handle_ = 0;
  const std::unique_ptr<export_table> exports_;
  const std::unique_ptr<import_table> imports_;
};

/// pool_memory over the backend: reservations and chunks of one pool on one device.
class backend_pool_memory final : public pool_memory {
 public:
  backend_pool_memory(backend::backend& platform, int device, unsigned export_handle_types);

  std::size_t granularity_bytes() const override { return granularity_bytes_; }
  result<std::uintptr_t> reserve(std::size_t bytes) override;
  void free_reservation(std::uintptr_t base, std::size_t bytes) override;
  result<std::uint64_t> commit(std::uintptr_t address, std::size_t bytes) override;
  void decommit(std::uintptr_t address, std::size_t bytes, std::uint64_t token,
                std::size_t offset_bytes) override;
  result<std::uint64_t> commit_by_granule(std::uintptr_t address, std::size_t bytes);
  bool can_decommit_part(std::uint64_t token) const override {
    if (split_commits_.count(token) != 0) return true;  // one physical allocation a granule
    // Memory of an exportable pool goes back in whole commits: giving back part of one would
    // drop pages an importer may still map (S7 lifetime), while closing a whole commit leaves
    // them to the importer's mapping.
    return export_handle_types_ == 0 && platform_.can_discard_physical_part();
  }
  /// From now on, where the platform gives back physical allocations whole only (cuda), make
  /// each commit of a granule-sized physical allocation per granule, so that free granules
  /// inside a commit can go back (compaction, S9). Not for exportable pools (S7 exports whole
  /// commits). Requires: the pool lock is held.
  void set_granule_commits(bool enabled) { granule_commits_ = enabled; }

  /// Access other devices have to this memory (S6). set_access applies to every reservation
  /// and is applied again to each new one, under one lock, so growth never misses a grant.
  backend::access_flags access(int device) const;
  status set_access(int device, backend::access_flags flags);
  /// A range mapped by someone else (imports) that grants reach as they reach reservations.
  status adopt_range(std::uintptr_t address, std::size_t bytes);
  void forget_range(std::uintptr_t address);

 private:
  std::map<std::uint64_t, std::size_t> mapped_bytes_;  // per physical handle; pool lock held
  // Commits made of one physical allocation per granule: token -> handle by address. Tokens
  // are minted above 2^63, apart from the platform's handles. Pool lock held.
  std::map<std::uint64_t, std::map<std::uintptr_t, std::uint64_t>> split_commits_;
  std::uint64_t next_split_token_ = std::uint64_t{1} << 63;
  bool granule_commits_ = false;
  mutable std::mutex access_mutex_;                     // the two maps below
  std::map<std::uintptr_t, std::size_t> reservations_;  // base -> bytes
  std::map<int, backend::access_flags> granted_;        // devices other than the owner
  backend::backend& platform_;
  const int device_;
  const unsigned export_handle_types_;
  const std::size_t granularity_bytes_;
};

}  // namespace soma::detail
