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
  result<node_index> add_empty(dependencies after) override;
  result<node_index> add_memset(dependencies after, void* destination, int value,
                                std::size_t bytes) override;
  result<node_index> add_memcpy(dependencies after, void* destination, const void* source,
                                std::size_t bytes) override;
  result<node_index> add_host(dependencies after, void (*function)(void*), void* data) override;
  result<node_index> add_event_record(dependencies after, event& e) override;
  result<node_index> add_event_wait(dependencies after, event& e) override;
  result<node_index> add_native_child(dependencies after, void* native_graph) override;
  result<std::unique_ptr<work_graph_exec>> instantiate() override;

  /// One node's work, enqueued on the launching stream.
  struct step {
    enum class kind { empty, memset, memcpy, host, event_record, event_wait } what = kind::empty;
    void* destination = nullptr;
    const void* source = nullptr;
    int value = 0;
    std::size_t bytes = 0;
    void (*function)(void*) = nullptr;
    void* data = nullptr;
    event* awaited = nullptr;  // event_record, event_wait
  };

 private:
  result<node_index> add(dependencies after, step s);
  std::vector<step> steps_;
};

}  // namespace soma::detail::backend
