// What the runtime offers src/ipc to share pools between processes (S7): exportable pools and
// their export records, the physical memory behind an export, imported pools and their
// mappings as live allocations.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "backend/backend.hpp"
#include "core/pointer_table.hpp"
#include "core/status.hpp"
#include "runtime/pool_registry.hpp"
#include "runtime/export_table.hpp"
#include "runtime/import_table.hpp"

namespace soma::detail {

/// Thread-safe.
class ipc_hooks {
 public:
  ipc_hooks(backend::backend& platform, pool_registry& pools, pointer_table<pool_object>& pointers)
      : platform_(platform), pools_(pools), pointers_(pointers) {}

  /// The backend, to import, map and unmap physical memory.
  backend::backend& platform() noexcept { return platform_; }

  // -- exporter ------------------------------------------------------------------------
  /// Checks that pool_handle may be exported as handle_type (call names the API call in
  /// messages); returns the pool's identity in export data, `proposed_pool_id` if it has none.
  result<std::uint64_t> exportable_pool(std::uintptr_t pool_handle, unsigned handle_type,
                                        std::uint64_t proposed_pool_id, const char* call);
  /// Device of a pool (any kind), for the exporter's handshake.
  /// Where a pool's memory is: its device, or host memory (S5).
  result<backend::memory_location> pool_location(std::uintptr_t pool_handle) const;
  /// Export data fields for the live allocation that starts at pointer.
  result<pointer_export> export_pointer(const void* pointer, std::uint64_t proposed_pool_id,
                                        const export_nonce& fresh_nonce);
  /// The physical memory behind export export_id of pool_handle as descriptors the caller
  /// owns, if the record is live and nonce and bytes match it (invalid_value otherwise).
  result<exported_memory> export_memory(std::uintptr_t pool_handle, std::uint64_t export_id,
                                        const export_nonce& nonce, std::size_t bytes);

  // -- importer ------------------------------------------------------------------------
  /// A new imported pool of device, holding link until it is destroyed.
  result<std::uintptr_t> create_imported_pool(backend::memory_location where,
                                              std::shared_ptr<import_link> link, std::string name);
  /// An imported pool's device and link (call names the API call in messages).
  result<imported_pool_view> imported_pool(std::uintptr_t pool_handle, const char* call) const;
  /// The live allocation imported under key into pool_handle, or nullptr.
  void* find_imported_allocation(std::uintptr_t pool_handle, std::uint64_t key) const;
  /// Makes [address, address + bytes) a live allocation of the imported pool; release unmaps
  /// it once its free completed. If key is live already, release runs now and the existing
  /// allocation is returned.
  result<void*> add_imported_allocation(std::uintptr_t pool_handle, std::uint64_t key,
                                        std::uintptr_t address, std::size_t bytes,
                                        std::function<void()> release);

 private:
  backend::backend& platform_;
  pool_registry& pools_;
  pointer_table<pool_object>& pointers_;
};

}  // namespace soma::detail
