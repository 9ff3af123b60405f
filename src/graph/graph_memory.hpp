// The per-device graph pool (S15): address space for alloc nodes, and the physical memory
// ("backings") that executables map there at launch. A backing belongs to one stream at a
// time, so graphs launched into one stream share physical memory and graphs that may run at
// the same time never do; memory an unfreed allocation holds pins its backing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "graph/graph_allocation.hpp"
#include "runtime/graph_memory_hooks.hpp"
#include "runtime/runtime.hpp"

namespace soma::detail::graph {

/// Where one allocation of an executable sits in its backing's physical memory.
struct placed_allocation {
  std::shared_ptr<graph_allocation> allocation;
  std::size_t offset = 0;
  bool freed_in_graph = false;  ///< a free node of the same graph ends it
};

struct backing;

/// The memory side of one executable graph: its layout, where it is mapped, and what its last
/// launch left live. Outlives the executable while allocations it left live are unfreed.
struct exec_memory {
  int device = -1;
  std::vector<placed_allocation> allocations;
  std::size_t footprint = 0;  ///< physical bytes its layout needs
  /// Allocations of other graphs that free nodes of this graph free.
  std::vector<std::shared_ptr<graph_allocation>> frees_of_others;

  // graph_memory's lock:
  backing* mapped = nullptr;
  struct piece {
    std::uintptr_t address;
    std::size_t bytes;
  };
  std::vector<piece> pieces;  ///< what is mapped, as mapped
  std::shared_ptr<stream_object> last_stream;
  std::uint64_t last_position = 0;
  std::vector<graph_allocation*> outstanding;  ///< left live by the last launch
};

/// Physical memory for graphs, bound to the stream that last launched a graph on it.
struct backing {
  struct chunk {
    std::uint64_t handle = 0;
    std::size_t bytes = 0;
  };
  int device = 0;
  std::vector<chunk> chunks;
  std::size_t capacity = 0;
  std::shared_ptr<stream_object> bound;  ///< the stream of its last launch
  std::uint64_t last_position = 0;       ///< on bound
  /// Frees of pinned allocations on other streams: a launch on it waits for these first.
  std::vector<std::pair<std::shared_ptr<stream_object>, std::uint64_t>> waits;
  int pins = 0;  ///< live allocations in it
  std::vector<exec_memory*> mapped;
};

class graph_memory final : public graph_memory_hooks {
 public:
  explicit graph_memory(runtime& owner);
  graph_memory(const graph_memory&) = delete;
  graph_memory& operator=(const graph_memory&) = delete;

  /// Address space for an alloc node of bytes on device, fixed from now on.
  result<std::shared_ptr<graph_allocation>> create_allocation(int device, std::size_t bytes,
                                                              std::vector<access_grant> access);
  /// The graph allocation whose address range holds address (any state), or null.
  std::shared_ptr<graph_allocation> find(std::uintptr_t address) const;
  /// Marks allocation as freed by graph; invalid_value if a graph frees it already.
  status claim_free(graph_allocation& allocation, const void* graph, const char* call);
  void unclaim_free(graph_allocation& allocation, const void* graph);

  /// Before a launch or upload on stream: frees (auto_free) or refuses what the last launch
  /// left live, chooses a backing of the stream and maps the executable there.
  status prepare(exec_memory& exec, stream_object& stream, bool auto_free, bool for_launch);
  /// At instantiation: maps the executable on an idle backing (or a new one) without binding
  /// it to a stream. The cuda driver checks memset and copy addresses when their nodes are
  /// made, so graph memory is mapped before the platform's graph is built.
  status map_for_instantiation(exec_memory& exec);
  /// After a launch that ended at position: allocations left live, frees of other graphs'.
  void launched(exec_memory& exec, stream_object& stream, std::uint64_t position);
  /// The executable is gone: unmapped once its last launch completed and nothing it left live
  /// remains.
  void retire(std::shared_ptr<exec_memory> exec);

  status trim(int device);
  result<std::uint64_t> attribute(int device, int which);
  status reset_attribute(int device, int which);

  bool owns_address(std::uintptr_t address) const override;
  bool describe(std::uintptr_t address, pointer_info& info) const override;
  std::optional<status> free(std::uintptr_t address, stream_object& stream) override;

  /// Called by ~graph_allocation: the address range goes back.
  void release_address(const graph_allocation& allocation) noexcept;

 private:
  struct device_space {
    std::vector<std::pair<std::uintptr_t, std::size_t>> reservations;
    std::map<std::uintptr_t, std::size_t> free_ranges;  // by base
    std::vector<std::unique_ptr<backing>> backings;
    std::size_t used_high = 0;
    std::size_t reserved_high = 0;
  };

  std::shared_ptr<graph_allocation> find_locked(std::uintptr_t address) const;
  bool owns_address_locked(std::uintptr_t address) const;
  result<std::uintptr_t> take_address_locked(device_space& space, int device, std::size_t span);
  bool complete_locked(const backing& b) const;
  /// stream null: for instantiation, any idle backing.
  backing* choose_backing_locked(exec_memory& exec, const stream_object* stream);
  status grow_locked(backing& b, std::size_t bytes);
  status map_locked(exec_memory& exec, backing& b);
  /// The end of the reservation of space that holds address (UINTPTR_MAX if none).
  static std::uintptr_t reservation_end(const device_space& space, std::uintptr_t address);
  void unmap_locked(exec_memory& exec);
  status release_live_locked(exec_memory& exec, graph_allocation& a, stream_object& stream);
  void reap_retired_locked(std::vector<std::shared_ptr<exec_memory>>& dropped);
  void note_highs_locked(device_space& space);
  std::size_t used_locked(const device_space& space) const;
  std::size_t reserved_locked(const device_space& space) const;

  runtime& runtime_;
  backend::backend& platform_;
  mutable std::mutex mutex_;
  std::vector<device_space> devices_;
  std::map<std::uintptr_t, std::weak_ptr<graph_allocation>> allocations_;  // by address
  std::vector<std::shared_ptr<exec_memory>> retired_;
  std::uint64_t next_id_ = 1;
};

}  // namespace soma::detail::graph
