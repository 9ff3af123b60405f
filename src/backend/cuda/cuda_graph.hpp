// A cuda backend work_graph: a CUgraph in one device's primary context, built node by node and
// instantiated into CUgraphExecs, each launched as one stream operation (S15).
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cuda/driver_api.hpp"

namespace soma::detail::backend::cuda {

class cuda_event;

/// Behaves as sequential_graph does on the cpu backend, with the driver ordering the nodes by
/// their dependencies instead of one after another:
/// - memset: 1-byte elements, one row; memcpy: a 1-D copy between unified addresses (pool
///   memory, page-locked or pageable host memory);
/// - host: the function on a driver thread once its dependencies completed;
/// - event record / wait: the event's CUevent in this graph's context (cuda_event::event_in).
///   After each launch an event of a record node stands for that launch's record, as if
///   record() had been called at the launch's position. A wait node waits for the latest
///   record of that CUevent: records of the event on this device's streams and graphs, not on
///   another device's;
/// - native child: cuGraphAddChildGraphNode, which copies the child graph in.
/// Dependencies are indices of earlier nodes; duplicates are ignored.
///
/// The CUgraph is destroyed, in its context, once the graph and every exec instantiated from it
/// are gone (an exec's set_memset names the graph's nodes). Not thread-safe, like the driver's
/// graphs: one thread builds a graph; one launches a given exec at a time.
class cuda_graph final : public work_graph {
 public:
  /// cuGraphCreate in context (device's primary context).
  static result<std::unique_ptr<cuda_graph>> create(const driver_api& driver, CUcontext context,
                                                    int device);

  /// A native child's native_graph is a CUgraph (end_native_capture's), copied in.
  result<node_index> add(dependencies after, const work_node& node) override;
  /// cuGraphInstantiateWithFlags(..., 0).
  result<std::unique_ptr<work_graph_exec>> instantiate() override;

  CUgraph native() const noexcept;

  /// An event a record node records, with the CUevent the node names.
  struct recorded_event {
    cuda_event* event = nullptr;
    CUevent handle = nullptr;
  };
  /// The CUgraph and its context, shared by the graph and its execs.
  struct owned;

 private:
  cuda_graph(const driver_api& driver, std::shared_ptr<owned> graph, int device);
  /// Maps after to CUgraphNodes, then add_node(node, dependencies, count) adds the driver's.
  template <typename Add>
  result<node_index> add_with(dependencies after, work_node::kind kind, Add&& add_node);
  result<node_index> add_empty(dependencies after);
  result<node_index> add_memset(dependencies after, void* destination, int value,
                                std::size_t bytes);
  result<node_index> add_memcpy(dependencies after, void* destination, const void* source,
                                std::size_t bytes);
  result<node_index> add_host(dependencies after, void (*function)(void*), void* data);
  result<node_index> add_event_record(dependencies after, event& e);
  result<node_index> add_event_wait(dependencies after, event& e);
  result<node_index> add_native_child(dependencies after, void* native_graph);

  const driver_api& driver_;
  std::shared_ptr<owned> graph_;
  const int device_;
  std::vector<CUgraphNode> nodes_;       // by node index
  std::vector<work_node::kind> kinds_;   // by node index
  std::vector<recorded_event> records_;  // the events of record nodes, in node order
  std::vector<CUgraphNode> mapped_;      // scratch: one node's dependencies
};

}  // namespace soma::detail::backend::cuda
