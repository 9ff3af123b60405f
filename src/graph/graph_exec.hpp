// An executable graph (somaGraphExec_t): the graph checked (S15 ordering), its memory laid
// out so that allocations whose lifetimes cannot overlap share physical memory, and the
// platform's work graph, launched as a whole.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "graph/graph_memory.hpp"
#include "graph/graph_model.hpp"
#include "runtime/runtime.hpp"

namespace soma::detail::graph {

enum : unsigned long long {
  instantiate_auto_free_on_launch = 1,
  instantiate_upload = 2,
  instantiate_device_launch = 4,
  instantiate_use_node_priority = 8,
};

class executable {
 public:
  static result<std::unique_ptr<executable>> instantiate(graph_model& source,
                                                         unsigned long long flags, runtime& rt,
                                                         graph_memory& memory);
  ~executable();
  executable(const executable&) = delete;
  executable& operator=(const executable&) = delete;

  status launch(stream_object& stream);
  status upload(stream_object& stream);
  /// S15: a memset update may not leave the graph allocation the node was made for.
  status set_memset(const node& n, void* destination, int value, std::size_t bytes);

 private:
  executable(runtime& rt, graph_memory& memory) : runtime_(rt), memory_(memory) {}
  status check_stream(const stream_object& stream, const char* call) const;

  struct memset_node {
    std::size_t work_index = 0;
    std::shared_ptr<graph_allocation> allocation;  ///< what it was made for, or null
  };

  runtime& runtime_;
  graph_memory& memory_;
  const void* source_ = nullptr;  ///< the graph's identity, to recognise its nodes
  std::shared_ptr<bool> exec_alive_;
  std::shared_ptr<exec_memory> layout_;
  std::unique_ptr<backend::work_graph_exec> work_;
  std::map<std::size_t, memset_node> memsets_;  ///< by node index
  std::vector<std::uintptr_t> recorded_events_;
  bool auto_free_ = false;
};

}  // namespace soma::detail::graph
