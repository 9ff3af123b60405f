#include "backend/sequential_graph.hpp"

namespace soma::detail::backend {
namespace {

class sequential_exec final : public work_graph_exec {
 public:
  explicit sequential_exec(std::vector<work_node> steps) : steps_(std::move(steps)) {}

  status launch(stream& s) override {
    for (const work_node& step : steps_) {
      if (status ok = enqueue(s, step); !ok.ok()) return ok;
    }
    return status::success();
  }

  status upload(stream&) override { return status::success(); }

  status set_memset(std::size_t node, void* destination, int value, std::size_t bytes) override {
    if (node >= steps_.size() || steps_[node].what != work_node::kind::memset)
      return status(error_code::invalid_value,
                    "node " + std::to_string(node) + " is no memset node");
    steps_[node].destination = destination;
    steps_[node].value = value;
    steps_[node].bytes = bytes;
    return status::success();
  }

 private:
  static status enqueue(stream& s, const work_node& step) {
    using kind = work_node::kind;
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
        return step.target->record(s);
      case kind::event_wait:
        return s.enqueue_wait(*step.target);
      case kind::native_child:
        break;  // refused by add
    }
    return status::success();
  }

  std::vector<work_node> steps_;
};

}  // namespace

result<work_graph::node_index> sequential_graph::add(dependencies after, const work_node& node) {
  if (node.what == work_node::kind::native_child) {
    return status(error_code::not_supported,
                  "this backend has no native graphs: a native child graph needs the cuda backend");
  }
  for (node_index d : after) {
    if (d >= steps_.size())
      return status(error_code::invalid_value,
                    "dependency " + std::to_string(d) + " is no node yet");
  }
  steps_.push_back(node);
  return steps_.size() - 1;
}

result<std::unique_ptr<work_graph_exec>> sequential_graph::instantiate() {
  return std::unique_ptr<work_graph_exec>(std::make_unique<sequential_exec>(steps_));
}

}  // namespace soma::detail::backend
