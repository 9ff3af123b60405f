// A work_graph for platforms without graphs of their own (cpu): the nodes, kept in the order
// they were added (each after its dependencies, so a topological order), are enqueued one by
// one on the launching stream. Running them in that one order satisfies every dependency.
#pragma once

#include <functional>
#include <vector>

#include "backend/backend.hpp"

namespace soma::detail::backend {

class sequential_graph final : public work_graph {
 public:
  result<node_index> add(dependencies after, const work_node& node) override;
  result<std::unique_ptr<work_graph_exec>> instantiate() override;

 private:
  std::vector<work_node> steps_;
};

}  // namespace soma::detail::backend
