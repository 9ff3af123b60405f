#include "backend/sequential_graph.hpp"

namespace soma::detail::backend {
namespace {

class sequential_exec final : public work_graph_exec {
 public:
  explicit sequential_exec(std::vector<sequential_graph::step> steps) : steps_(std::move(steps)) {}

  status launch(stream& s) override {
    for (const sequential_graph::step& step : steps_) {
      if (status ok = enqueue(s, step); !ok.ok()) return ok;
    }
    return status::success();
  }

  status upload(stream&) override { return status::success(); }

  status set_memset(std::size_t node, void* destination, int value, std::size_t bytes) override {
    if (node >= steps_.size() || steps_[node].what != sequential_graph::step::kind::memset)
      return status(error_code::invalid_value,
                    "node " + std::to_string(node) + " is no memset node");
    steps_[node].destination = destination;
    steps_[node].value = value;
    steps_[node].bytes = bytes;
    return status::success();
  }

 private:
  static status enqueue(stream& s, const sequential_graph::step& step) {
    using kind = sequential_graph::step::kind;
    switch (step.what) {
      case kind::empty:
        return status::success();
      case kind::memset:
        return s.enqueue_memset(step.destination, step.value, step.bytes);
      case kind::memcpy:
        return s.enqueue_memcpy(step.destination, step.source, step.bytes);
      case kind::host: {
        auto* function = step.function;
        void* data = step.data;
        return s.enqueue_host_task([function, data] {
          function(data);
          return status::success();
        });
      }
      case kind::event_record:
        return step.awaited->record(s);
      case kind::event_wait:
        return s.enqueue_wait(*step.awaited);
    }
    return status::success();
  }

  std::vector<sequential_graph::step> steps_;
};

}  // namespace

result<work_graph::node_index> sequential_graph::add(dependencies after, step s) {
  for (node_index d : after) {
    if (d >= steps_.size())
      return status(error_code::invalid_value,
                    "dependency " + std::to_string(d) + " is no node yet");
  }
  steps_.push_back(s);
  return steps_.size() - 1;
}

result<work_graph::node_index> sequential_graph::add_empty(dependencies after) {
  return add(after, step{});
}

result<work_graph::node_index> sequential_graph::add_memset(dependencies after, void* destination,
                                                            int value, std::size_t bytes) {
  return add(
      after,
      {.what = step::kind::memset, .destination = destination, .value = value, .bytes = bytes});
}

result<work_graph::node_index> sequential_graph::add_memcpy(dependencies after, void* destination,
                                                            const void* source, std::size_t bytes) {
  return add(
      after,
      {.what = step::kind::memcpy, .destination = destination, .source = source, .bytes = bytes});
}

result<work_graph::node_index> sequential_graph::add_host(dependencies after,
                                                          void (*function)(void*), void* data) {
  return add(after, {.what = step::kind::host, .function = function, .data = data});
}

result<work_graph::node_index> sequential_graph::add_event_record(dependencies after, event& e) {
  return add(after, {.what = step::kind::event_record, .awaited = &e});
}

result<work_graph::node_index> sequential_graph::add_event_wait(dependencies after, event& e) {
  return add(after, {.what = step::kind::event_wait, .awaited = &e});
}

result<work_graph::node_index> sequential_graph::add_native_child(dependencies, void*) {
  return status(error_code::not_supported,
                "this backend has no native graphs: a native child graph needs the cuda backend");
}

result<std::unique_ptr<work_graph_exec>> sequential_graph::instantiate() {
  return std::unique_ptr<work_graph_exec>(std::make_unique<sequential_exec>(steps_));
}

}  // namespace soma::detail::backend
