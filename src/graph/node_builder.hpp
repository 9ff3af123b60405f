// Makes the nodes of a graph, for somaGraphAdd*Node and for stream capture alike: each maker
// checks its parameters and the S15 rules the graph already shows, then adds the node.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "graph/graph_memory.hpp"
#include "graph/graph_model.hpp"
#include "runtime/runtime.hpp"

namespace soma::detail::graph {

class node_builder {
 public:
  using dependencies = std::span<node* const>;
  node_builder(runtime& rt, graph_memory& memory) : runtime_(rt), memory_(memory) {}

  result<node*> alloc(graph_model& g, dependencies after, int device, std::size_t bytes,
                      std::vector<access_grant> access, const char* call);
  result<node*> free(graph_model& g, dependencies after, void* address, const char* call);
  result<node*> memset(graph_model& g, dependencies after, void* destination, int value,
                       std::size_t bytes, const char* call);
  result<node*> memcpy(graph_model& g, dependencies after, void* destination, const void* source,
                       std::size_t bytes, const char* call);
  result<node*> host(graph_model& g, dependencies after, void (*function)(void*), void* data,
                     const runtime::host_access* accesses, std::size_t count, const char* call);
  result<node*> event(graph_model& g, dependencies after, node_kind kind, std::uintptr_t event,
                      const char* call);
  result<node*> empty(graph_model& g, dependencies after, const char* call);
  /// owned: soma made the native graph (a capture segment) and the graph destroys it.
  result<node*> native_child(graph_model& g, dependencies after, void* native, bool owned,
                             const char* call);

 private:
  /// The range as a node touches it: inside one graph allocation, or memory the runtime
  /// accepts for a stream of the graph's device.
  result<touched_range> touch(const graph_model& g, const void* pointer, std::size_t bytes,
                              backend::access_flags needed, const std::string& what) const;
  /// A memset or memcpy node of kind writing bytes at destination, the destination checked
  /// as touch does (read-write).
  result<node> writing(const graph_model& g, node_kind kind, void* destination, std::size_t bytes,
                       const char* call) const;
  result<node*> add_touching(graph_model& g, dependencies after, node n, const char* call);

  runtime& runtime_;
  graph_memory& memory_;
};

}  // namespace soma::detail::graph
