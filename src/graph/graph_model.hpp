// A soma graph (somaGraph_t): nodes with their dependencies and parameters, and the S15
// ordering checks that can be made while it is built. Not thread-safe (as the C API says).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "graph/graph_allocation.hpp"

namespace soma::detail::graph {

class graph_model;

enum class node_kind {
  empty,
  mem_alloc,
  mem_free,
  memset,
  memcpy,
  host,
  event_record,
  event_wait,
  native_child
};

/// A range a node touches: in graph memory (allocation set) or elsewhere.
struct touched_range {
  std::uintptr_t address = 0;
  std::size_t bytes = 0;
  std::shared_ptr<graph_allocation> allocation;  ///< the graph allocation holding it, or null
};

struct node {
  graph_model* owner = nullptr;
  std::size_t index = 0;
  node_kind kind = node_kind::empty;
  std::vector<std::size_t> after;  ///< dependencies, by index

  std::shared_ptr<graph_allocation> allocation;  ///< mem_alloc: its own; mem_free: the freed one
  void* destination = nullptr;                   ///< memset, memcpy
  const void* source = nullptr;                  ///< memcpy
  int value = 0;
  std::size_t bytes = 0;
  void (*function)(void*) = nullptr;  ///< host
  void* data = nullptr;
  std::uintptr_t event = 0;            ///< event_record, event_wait: the soma event handle
  void* native_graph = nullptr;        ///< native_child
  std::vector<touched_range> touches;  ///< memset, memcpy, host with declared access
  /// mem_alloc: the access list somaGraphMemAllocNodeGetParams hands out (C layout:
  /// somaMemAccessDesc is {int type, int id, int flags}).
  struct access_desc {
    int location_type;
    int location_id;
    int flags;
  };
  std::vector<access_desc> access_descs;

  /// "memset node 3", for messages.
  std::string name() const;
};

class graph_model {
 public:
  explicit graph_model(backend::backend& platform) : platform_(platform) {}
  ~graph_model();
  graph_model(const graph_model&) = delete;
  graph_model& operator=(const graph_model&) = delete;

  /// Checks the dependency list (nodes of this graph, no repeats) and adds n with it.
  result<node*> add(node n, std::span<node* const> dependencies, const char* call);
  /// Adds the edges from[i] -> to[i], all or none (cycles, other graphs: invalid_value).
  status add_edges(std::span<node* const> from, std::span<node* const> to);
  /// Whether a path of dependencies leads from `from` to `to` (or they are the same node).
  bool reaches(std::size_t from, std::size_t to) const;
  /// S15: the node about to depend on `after` must not already follow the free node of a
  /// graph allocation it touches (the graph shows that now; the rest is checked at instantiate).
  status check_not_after_free(const node& n, std::span<node* const> dependencies,
                              const char* call) const;

  const std::vector<std::unique_ptr<node>>& nodes() const { return nodes_; }
  bool has_memory_nodes() const { return has_memory_nodes_; }
  int memory_device() const { return memory_device_; }
  /// A native graph soma made (capture segments): destroyed with this graph.
  void own_native_graph(void* native) { owned_native_.push_back(native); }

  /// One executable at a time for graphs with memory nodes; shared with the executable, which
  /// may outlive the graph.
  std::shared_ptr<bool> exec_alive = std::make_shared<bool>(false);

 private:
  backend::backend& platform_;
  std::vector<std::unique_ptr<node>> nodes_;
  bool has_memory_nodes_ = false;
  int memory_device_ = -1;
  std::vector<void*> owned_native_;
};

}  // namespace soma::detail::graph
