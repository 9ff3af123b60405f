#include "backend/cuda/cuda_graph.hpp"

#include <algorithm>

#include "backend/cuda/cuda_event.hpp"
#include "backend/cuda/cuda_stream.hpp"

namespace soma::detail::backend::cuda {

struct cuda_graph::owned {
  owned(const driver_api& driver, CUcontext context, CUgraph graph) noexcept
      : driver(driver), context(context), graph(graph) {}
  ~owned() {
    context_scope scope(driver, context);
    if (scope.entered().ok()) driver.cuGraphDestroy(graph);
  }
  owned(const owned&) = delete;
  owned& operator=(const owned&) = delete;

  const driver_api& driver;
  const CUcontext context;
  const CUgraph graph;
};

namespace {

CUdeviceptr device_pointer(const void* pointer) {
  return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(pointer));
}

CUDA_MEMSET_NODE_PARAMS memset_params(void* destination, int value, std::size_t bytes) {
  CUDA_MEMSET_NODE_PARAMS params;
  params.dst = device_pointer(destination);
  params.pitch = bytes;  // unused for one row
  params.value = static_cast<unsigned char>(value);
  params.elementSize = 1;
  params.width = bytes;
  params.height = 1;
  return params;
}

std::string memset_text(void* destination, int value, std::size_t bytes) {
  return "memset of " + format_bytes(bytes) + " at " +
         format_address(reinterpret_cast<std::uintptr_t>(destination)) + " to " +
         std::to_string(static_cast<unsigned char>(value));
}

class cuda_graph_exec final : public work_graph_exec {
 public:
  cuda_graph_exec(const driver_api& driver, std::shared_ptr<cuda_graph::owned> graph,
                  CUgraphExec exec, std::vector<CUgraphNode> nodes,
                  std::vector<work_node::kind> kinds,
                  std::vector<cuda_graph::recorded_event> records, CUcontext context)
      : driver_(driver),
        graph_(std::move(graph)),
        exec_(exec),
        nodes_(std::move(nodes)),
        kinds_(std::move(kinds)),
        records_(std::move(records)),
        context_(context) {}

  ~cuda_graph_exec() override {
    // An exec still running is freed by the driver once it completes.
    context_scope scope(driver_, context_);
    if (scope.entered().ok()) driver_.cuGraphExecDestroy(exec_);
  }
  cuda_graph_exec(const cuda_graph_exec&) = delete;
  cuda_graph_exec& operator=(const cuda_graph_exec&) = delete;

  status launch(stream& s) override {
    auto& target = static_cast<cuda_stream&>(s);
    return target.enqueue_graph(exec_, [&](std::uint64_t position) {
      for (const cuda_graph::recorded_event& r : records_)
        r.event->note_recorded(r.handle, context_, target.sticky(), position);
    });
  }

  status upload(stream& s) override { return static_cast<cuda_stream&>(s).upload_graph(exec_); }

  status set_memset(std::size_t node, void* destination, int value, std::size_t bytes) override {
    if (node >= kinds_.size() || kinds_[node] != work_node::kind::memset)
      return status(error_code::invalid_value,
                    "node " + std::to_string(node) + " is no memset node");
    context_scope scope(driver_, context_);
    if (!scope.entered().ok()) return scope.entered();
    const CUDA_MEMSET_NODE_PARAMS params = memset_params(destination, value, bytes);
    return driver_.check(
        driver_.cuGraphExecMemsetNodeSetParams(exec_, nodes_[node], &params, context_),
        "cuGraphExecMemsetNodeSetParams",
        "node " + std::to_string(node) + ", " + memset_text(destination, value, bytes));
  }

 private:
  const driver_api& driver_;
  std::shared_ptr<cuda_graph::owned> graph_;  // the graph nodes_ belong to
  const CUgraphExec exec_;
  const std::vector<CUgraphNode> nodes_;
  const std::vector<work_node::kind> kinds_;
  const std::vector<cuda_graph::recorded_event> records_;
  const CUcontext context_;
};

}  // namespace

result<std::unique_ptr<cuda_graph>> cuda_graph::create(const driver_api& driver, CUcontext context,
                                                       int device) {
  context_scope scope(driver, context);
  if (!scope.entered().ok()) return scope.entered();
  CUgraph graph = nullptr;
  if (status s = driver.check(driver.cuGraphCreate(&graph, 0), "cuGraphCreate",
                              "a graph on device " + std::to_string(device));
      !s.ok())
    return s;
  return std::unique_ptr<cuda_graph>(
      new cuda_graph(driver, std::make_shared<owned>(driver, context, graph), device));
}

cuda_graph::cuda_graph(const driver_api& driver, std::shared_ptr<owned> graph, int device)
    : driver_(driver), graph_(std::move(graph)), device_(device) {}

CUgraph cuda_graph::native() const noexcept { return graph_->graph; }

template <typename Add>
result<work_graph::node_index> cuda_graph::add_with(dependencies after, work_node::kind kind,
                                                    Add&& add_node) {
  mapped_.clear();
  for (node_index d : after) {
    if (d >= nodes_.size())
      return status(error_code::invalid_value,
                    "dependency " + std::to_string(d) + " is no node yet");
    // The driver refuses a dependency named twice; sequential_graph accepts it.
    if (std::find(mapped_.begin(), mapped_.end(), nodes_[d]) == mapped_.end())
      mapped_.push_back(nodes_[d]);
  }
  context_scope scope(driver_, graph_->context);
  if (!scope.entered().ok()) return scope.entered();
  CUgraphNode node = nullptr;
  if (status s = add_node(&node, mapped_.empty() ? nullptr : mapped_.data(), mapped_.size());
      !s.ok())
    return s;
  nodes_.push_back(node);
  kinds_.push_back(kind);
  return nodes_.size() - 1;
}

result<work_graph::node_index> cuda_graph::add_empty(dependencies after) {
  return add_with(after, work_node::kind::empty,
                  [&](CUgraphNode* node, const CUgraphNode* deps, std::size_t n) {
                    return driver_.check(driver_.cuGraphAddEmptyNode(node, graph_->graph, deps, n),
                                         "cuGraphAddEmptyNode");
                  });
}

result<work_graph::node_index> cuda_graph::add_memset(dependencies after, void* destination,
                                                      int value, std::size_t bytes) {
  const CUDA_MEMSET_NODE_PARAMS params = memset_params(destination, value, bytes);
  return add_with(
      after, work_node::kind::memset,
      [&](CUgraphNode* node, const CUgraphNode* deps, std::size_t n) {
        return driver_.check(
            driver_.cuGraphAddMemsetNode(node, graph_->graph, deps, n, &params, graph_->context),
            "cuGraphAddMemsetNode", memset_text(destination, value, bytes));
      });
}

result<work_graph::node_index> cuda_graph::add_memcpy(dependencies after, void* destination,
                                                      const void* source, std::size_t bytes) {
  // Unified addressing: the driver tells device, page-locked and pageable host memory apart.
  CUDA_MEMCPY3D params;
  params.src.MemoryType = CU_MEMORYTYPE_UNIFIED;
  params.src.Device = device_pointer(source);
  params.dst.MemoryType = CU_MEMORYTYPE_UNIFIED;
  params.dst.Device = device_pointer(destination);
  params.WidthInBytes = bytes;
  params.Height = 1;
  params.Depth = 1;
  return add_with(
      after, work_node::kind::memcpy,
      [&](CUgraphNode* node, const CUgraphNode* deps, std::size_t n) {
        return driver_.check(
            driver_.cuGraphAddMemcpyNode(node, graph_->graph, deps, n, &params, graph_->context),
            "cuGraphAddMemcpyNode",
            "copy of " + format_bytes(bytes) + " from " +
                format_address(reinterpret_cast<std::uintptr_t>(source)) + " to " +
                format_address(reinterpret_cast<std::uintptr_t>(destination)));
      });
}

result<work_graph::node_index> cuda_graph::add_host(dependencies after, void (*function)(void*),
                                                    void* data) {
  CUDA_HOST_NODE_PARAMS params;
  params.fn = function;
  params.userData = data;
  return add_with(
      after, work_node::kind::host, [&](CUgraphNode* node, const CUgraphNode* deps, std::size_t n) {
        return driver_.check(driver_.cuGraphAddHostNode(node, graph_->graph, deps, n, &params),
                             "cuGraphAddHostNode");
      });
}

result<work_graph::node_index> cuda_graph::add_event_record(dependencies after, event& e) {
  auto& recorded = static_cast<cuda_event&>(e);
  CUevent handle = nullptr;
  result<node_index> added =
      add_with(after, work_node::kind::event_record,
               [&](CUgraphNode* node, const CUgraphNode* deps, std::size_t n) {
                 result<CUevent> in_context = recorded.event_in(graph_->context, device_);
                 if (!in_context.ok()) return in_context.take_error();
                 handle = in_context.value();
                 return driver_.check(
                     driver_.cuGraphAddEventRecordNode(node, graph_->graph, deps, n, handle),
                     "cuGraphAddEventRecordNode", "device " + std::to_string(device_));
               });
  if (added.ok()) records_.push_back({&recorded, handle});
  return added;
}

result<work_graph::node_index> cuda_graph::add_event_wait(dependencies after, event& e) {
  auto& awaited = static_cast<cuda_event&>(e);
  return add_with(
      after, work_node::kind::event_wait,
      [&](CUgraphNode* node, const CUgraphNode* deps, std::size_t n) {
        result<CUevent> in_context = awaited.event_in(graph_->context, device_);
        if (!in_context.ok()) return in_context.take_error();
        return driver_.check(
            driver_.cuGraphAddEventWaitNode(node, graph_->graph, deps, n, in_context.value()),
            "cuGraphAddEventWaitNode", "device " + std::to_string(device_));
      });
}

result<work_graph::node_index> cuda_graph::add_native_child(dependencies after,
                                                            void* native_graph) {
  if (native_graph == nullptr)
    return status(error_code::invalid_value, "no native graph to add as a child");
  return add_with(after, work_node::kind::native_child,
                  [&](CUgraphNode* node, const CUgraphNode* deps, std::size_t n) {
                    return driver_.check(
                        driver_.cuGraphAddChildGraphNode(node, graph_->graph, deps, n,
                                                         static_cast<CUgraph>(native_graph)),
                        "cuGraphAddChildGraphNode", "device " + std::to_string(device_));
                  });
}

result<work_graph::node_index> cuda_graph::add(dependencies after, const work_node& node) {
  switch (node.what) {
    case work_node::kind::empty:
      return add_empty(after);
    case work_node::kind::memset:
      return add_memset(after, node.destination, node.value, node.bytes);
    case work_node::kind::memcpy:
      return add_memcpy(after, node.destination, node.source, node.bytes);
    case work_node::kind::host:
      return add_host(after, node.function, node.data);
    case work_node::kind::event_record:
      return add_event_record(after, *node.target);
    case work_node::kind::event_wait:
      return add_event_wait(after, *node.target);
    case work_node::kind::native_child:
      return add_native_child(after, node.native_graph);
  }
  return status(error_code::invalid_value, "unknown work node kind");
}

result<std::unique_ptr<work_graph_exec>> cuda_graph::instantiate() {
  context_scope scope(driver_, graph_->context);
  if (!scope.entered().ok()) return scope.entered();
  CUgraphExec exec = nullptr;
  if (status s = driver_.check(driver_.cuGraphInstantiateWithFlags(&exec, graph_->graph, 0),
                               "cuGraphInstantiateWithFlags",
                               "a graph of " + std::to_string(nodes_.size()) + " nodes on device " +
                                   std::to_string(device_));
      !s.ok())
    return s;
  return std::unique_ptr<work_graph_exec>(std::make_unique<cuda_graph_exec>(
      driver_, graph_, exec, nodes_, kinds_, records_, graph_->context));
}

}  // namespace soma::detail::backend::cuda
