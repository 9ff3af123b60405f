// One stream capture (S15): the graph being recorded and, for each stream taking part (the
// origin and those that joined through events), the nodes its next work depends on.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.hpp"
#include "graph/graph_model.hpp"

namespace soma::detail {
struct stream_object;
}

namespace soma::detail::graph {

struct stream_capture {
  struct member {
    std::uintptr_t stream = 0;
    stream_object* object = nullptr;
    std::vector<std::size_t> frontier;  ///< the stream's last nodes
    bool joined = false;                ///< joined through an event (not the origin)
    std::size_t own_nodes = 0;          ///< nodes added on this stream
  };

  std::unique_ptr<graph_model> graph;
  std::uintptr_t origin = 0;
  int mode = 0;
  status failure;  ///< not ok once invalidated
  std::vector<member> members;

  member* find(std::uintptr_t stream) {
    for (member& m : members) {
      if (m.stream == stream) return &m;
    }
    return nullptr;
  }
};

}  // namespace soma::detail::graph
