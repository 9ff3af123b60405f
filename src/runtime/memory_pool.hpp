// A runtime pool: the core pool plus what the runtime knows about it (device, handle,
// properties, default-ness, destruction state).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>

#include "backend/backend.hpp"
#include "core/pool.hpp"
#include "runtime/pool_sharing.hpp"

namespace soma::detail {

/// Creation-time properties after validation (mirrors somaMemPoolProps).
struct pool_properties {
  int device = 0;
  unsigned export_handle_types = 0;
  std::size_t max_size_bytes = 0;  // 0 = the device's memory
  bool imported = false;  // S7: memory another process exported; the pool cannot allocate
};

class memory_pool final : public pool {
 public:
  memory_pool(pool_config config, std::unique_ptr<pool_memory> memory,
              pool_properties properties, bool is_default)
      : pool(std::move(config), std::move(memory)),
        properties_(properties),
        is_default_(is_default),
        exports_(properties.export_handle_types != 0 ? std::make_unique<export_table>() : nullptr),
        imports_(properties.imported ? std::make_unique<import_table>() : nullptr) {}

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

 private:
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
  bool can_decommit_part() const override {
    // Memory of an exportable pool goes back in whole commits: giving back part of one would
    // drop pages an importer may still map (S7 lifetime), while closing a whole commit leaves
    // them to the importer's mapping.
    return export_handle_types_ == 0 && platform_.can_discard_physical_part();
  }

 private:
  std::map<std::uint64_t, std::size_t> mapped_bytes_;  // per physical handle; pool lock held
  backend::backend& platform_;
  const int device_;
  const unsigned export_handle_types_;
  const std::size_t granularity_bytes_;
};

}  // namespace soma::detail
