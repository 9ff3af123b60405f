// What instantiation learns from a graph's structure (S15): an order that respects every
// dependency, which node reaches which, whether each node touching graph memory lies between
// its allocation's alloc and free nodes, and where each allocation sits in physical memory.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "graph/graph_memory.hpp"
#include "graph/graph_model.hpp"

namespace soma::detail::graph {

class graph_analysis {
 public:
  explicit graph_analysis(const graph_model& g);

  /// Node indices, each after its dependencies.
  const std::vector<std::size_t>& order() const { return order_; }
  /// Whether from reaches to by dependencies (a node reaches itself).
  bool reaches(std::size_t from, std::size_t to) const;
  /// S15: every node touching graph memory of this graph is reached from the alloc node and
  /// reaches the free node; each free node is reached from its alloc node.
  status check_memory_order() const;
  /// Offsets for the graph's own allocations: two share physical memory only when one's free
  /// node reaches the other's alloc node. Fills layout.allocations, footprint, frees_of_others.
  void lay_out(exec_memory& layout) const;

 private:
  std::size_t alloc_node_of(const graph_allocation* a) const;  // or npos
  std::size_t free_node_of(const graph_allocation* a) const;   // or npos

  const graph_model& graph_;
  std::vector<std::size_t> order_;
  std::size_t words_ = 0;
  std::vector<std::uint64_t> ancestors_;  // row i: bit j set when j reaches i (j != i)
  // The alloc and free node of each allocation of this graph, found once.
  std::unordered_map<const graph_allocation*, std::size_t> alloc_nodes_;
  std::unordered_map<const graph_allocation*, std::size_t> free_nodes_;
};

}  // namespace soma::detail::graph
