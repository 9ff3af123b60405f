// What an imported pool holds of another process's memory (S7): its link to the exporter and
// its mappings. They live with the runtime's pool, so that a free, a destroy or a synchronize
// sees them; how they travel between processes is src/ipc's business.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "core/block.hpp"
#include "core/status.hpp"
#include "core/stream_timeline.hpp"

namespace soma::detail {

/// The link between an imported pool and its exporter (src/ipc's connection). The runtime keeps
/// it while the pool lives and drops it when the pool is destroyed.
class import_link {
 public:
  virtual ~import_link() = default;
};

/// An imported pool as src/ipc needs it to import more of its memory.
struct imported_pool_view {
  int device = 0;                     ///< the exporter's device; -1 for host memory
  backend::memory_location location;  ///< where the exporter's memory is (S5, S7)
  std::shared_ptr<import_link> link;
};

/// The mappings of one imported pool: live ones, which the pointer table holds as allocations of
/// the pool, and freed ones waiting for their stream to pass the free before they are unmapped.
/// Thread-safe.
class import_table {
 public:
  /// Unmaps a mapping and closes what it holds; called once.
  using release_function = std::function<void()>;

  import_table() = default;
  import_table(const import_table&) = delete;
  import_table& operator=(const import_table&) = delete;
  ~import_table();

  std::shared_ptr<import_link> link() const;
  void set_link(std::shared_ptr<import_link> link);

  /// The live mapping imported under key, or nullptr.
  block* find(std::uint64_t key) const;
  /// Registers a live mapping of [address, address + bytes), unless key is live already: then
  /// release runs at once and the existing mapping is returned. The second member says whether
  /// the mapping is new.
  std::pair<block*, bool> add(std::uint64_t key, std::uintptr_t address, std::size_t bytes,
                              release_function release);
  /// The live mapping that contains address: {base, bytes}, or {0, 0}.
  std::pair<std::uintptr_t, std::size_t> containing(std::uintptr_t address) const;
  /// The free of a live mapping (already removed from the pointer table) on stream, after the
  /// work enqueued up to position.
  void free(block* live, const stream_timeline& stream, std::uint64_t position);
  /// Releases every freed mapping whose stream passed the free; true if nothing is left, live
  /// or freed.
  bool release_completed();

 private:
  struct mapping {
    block entry;  // what the pointer table holds
    std::uint64_t key = 0;
    release_function release;
    free_stamp freed;
  };

  mutable std::mutex mutex_;
  std::shared_ptr<import_link> link_;
  std::map<std::uintptr_t, std::unique_ptr<mapping>> live_;  // by address
  std::map<std::uint64_t, std::uintptr_t> live_keys_;
  std::vector<std::unique_ptr<mapping>> freed_;
};

}  // namespace soma::detail
