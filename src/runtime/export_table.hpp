// What an exportable pool shares with other processes (S7): the records of its exported
// allocations. They live with the runtime's pool, so that a free or a destroy sees them; how
// they travel between processes is src/ipc's business.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "backend/backend.hpp"
#include "core/status.hpp"

namespace soma::detail {

/// Random bits the exporter puts into export data and checks when an importer presents it.
using export_nonce = std::array<std::uint8_t, 16>;

/// One allocation exported by somaMemPoolExportPointer.
struct export_record {
  std::uint64_t export_id = 0;  ///< 1, 2, ... in one pool; never reused
  export_nonce nonce{};
  std::uintptr_t address = 0;
  std::size_t bytes = 0;  ///< the allocation's requested size
};

/// What somaMemPoolExportPointer puts into export data (src/ipc encodes it).
struct pointer_export {
  std::uint64_t pool_id = 0;
  std::uint64_t export_id = 0;
  export_nonce nonce{};
  std::size_t offset_bytes = 0;  ///< where the allocation starts in its first physical piece
  std::size_t bytes = 0;
};

/// The physical memory behind an exported allocation, as OS handles for another process:
/// whole physical allocations in address order, each with a descriptor the receiver owns.
struct exported_memory {
  struct piece {
    std::size_t bytes = 0;
    int fd = -1;
  };
  std::size_t offset_bytes = 0;  ///< where the allocation starts in the first piece
  std::size_t bytes = 0;         ///< the allocation's requested size
  std::vector<piece> pieces;
};

/// The export records of one exportable pool. A record lives from the first export of an
/// allocation to its free; export data naming a record that is gone is stale. Thread-safe.
class export_table {
 public:
  /// The pool's identity in export data: `proposed` the first time, the same value after.
  std::uint64_t pool_id(std::uint64_t proposed);
  /// The record of the live allocation at address, created with `fresh` on its first export;
  /// later exports of the same allocation give the same record.
  export_record record_for(std::uintptr_t address, std::size_t bytes, const export_nonce& fresh);
  /// At the free of the allocation at address: its export data is stale from now on.
  void forget(std::uintptr_t address);
  /// Calls use with the live record export_id if nonce and bytes match it, holding the table's
  /// lock so that a concurrent free waits until use returned. Otherwise invalid_value saying
  /// why: stale (exported, freed since), never issued, or not matching (forged or corrupted).
  status with_live_record(std::uint64_t export_id, const export_nonce& nonce, std::size_t bytes,
                          const std::function<status(const export_record&)>& use);

 private:
  mutable std::mutex mutex_;
  std::uint64_t pool_id_ = 0;
  std::uint64_t next_export_id_ = 1;
  std::map<std::uintptr_t, export_record> by_address_;
  std::map<std::uint64_t, std::uintptr_t> by_id_;
  std::atomic<std::size_t> live_records_{0};  // lets a free skip the lock when nothing is exported
};

}  // namespace soma::detail
