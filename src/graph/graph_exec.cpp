#include "graph/graph_exec.hpp"

#include <algorithm>
#include <mutex>

#include "graph/graph_analysis.hpp"

namespace soma::detail::graph {
namespace {

// The platform node for one soma node; alloc and free nodes are the runtime's, so the
// platform sees an empty node that keeps their place in the order.
result<std::size_t> add_work(backend::work_graph& work, const node& x,
                             backend::work_graph::dependencies after, runtime& rt) {
  using kind = backend::work_node::kind;
  backend::work_node w;
  switch (x.kind) {
    case node_kind::empty:
    case node_kind::mem_alloc:
    case node_kind::mem_free:
      break;
    case node_kind::memset:
      w = {.what = kind::memset, .destination = x.destination, .value = x.value, .bytes = x.bytes};
      break;
    case node_kind::memcpy:
      w = {
          .what = kind::memcpy, .destination = x.destination, .source = x.source, .bytes = x.bytes};
      break;
    case node_kind::host:
      w = {.what = kind::host, .function = x.function, .data = x.data};
      break;
    case node_kind::event_record:
    case node_kind::event_wait: {
      result<event_object*> e = rt.streams().resolve_event(x.event);
      if (!e.ok()) {
        return status(e.error().code(), "somaGraphInstantiate: the event of " + x.name() + ": " +
                                            e.error().message());
      }
      w.what = x.kind == node_kind::event_record ? kind::event_record : kind::event_wait;
      w.target = e.value()->backend_event.get();
      break;
    }
    case node_kind::native_child:
      w = {.what = kind::native_child, .native_graph = x.native_graph};
      break;
  }
  return work.add(after, w);
}

}  // namespace

result<std::unique_ptr<executable>> executable::instantiate(graph_model& source,
                                                            unsigned long long flags, runtime& rt,
                                                            graph_memory& memory) {
  const unsigned long long known = instantiate_auto_free_on_launch | instantiate_upload |
                                   instantiate_device_launch | instantiate_use_node_priority;
  if ((flags & ~known) != 0) {
    return status(error_code::invalid_value,
                  "somaGraphInstantiate: flags " + std::to_string(flags) +
                      " are not a combination of somaGraphInstantiateFlag*");
  }
  if ((flags & instantiate_device_launch) != 0) {
    return status(
        error_code::not_supported,
        "somaGraphInstantiate: somaGraphInstantiateFlagDeviceLaunch; soma launches graphs "
        "from the host only");
  }
  if (source.has_memory_nodes() && *source.exec_alive) {
    return status(error_code::not_supported,
                  "somaGraphInstantiate: the graph holds memory nodes and has an executable graph "
                  "already; such a graph has one at a time (somaGraphExecDestroy the other first)");
  }
  graph_analysis analysis(source);
  if (status ordered = analysis.check_memory_order(); !ordered.ok()) return ordered;

  std::unique_ptr<executable> made(new executable(rt, memory));
  made->source_ = &source;
  made->auto_free_ = (flags & instantiate_auto_free_on_launch) != 0;
  made->layout_ = std::make_shared<exec_memory>();
  made->layout_->device = source.memory_device();
  analysis.lay_out(*made->layout_);
  if (source.has_memory_nodes()) {
    if (status mapped = memory.map_for_instantiation(*made->layout_); !mapped.ok()) return mapped;
  }

  const int device = source.memory_device() >= 0 ? source.memory_device() : rt.devices().current();
  result<std::unique_ptr<backend::work_graph>> work = rt.platform().create_work_graph(device);
  if (!work.ok()) return work.take_error();
  const auto& nodes = source.nodes();
  std::vector<std::size_t> work_index(nodes.size(), 0);
  for (std::size_t at : analysis.order()) {
    const node& x = *nodes[at];
    std::vector<std::size_t> after;
    for (std::size_t before : x.after) after.push_back(work_index[before]);
    result<std::size_t> added = add_work(*work.value(), x, after, rt);
    if (!added.ok()) return added.take_error();
    work_index[at] = added.value();
    if (x.kind == node_kind::memset) {
      made->memsets_[at] = {added.value(),
                            x.touches.empty() ? nullptr : x.touches.front().allocation};
    }
    if (x.kind == node_kind::event_record) made->recorded_events_.push_back(x.event);
  }
  result<std::unique_ptr<backend::work_graph_exec>> exec = work.value()->instantiate();
  if (!exec.ok()) return exec.take_error();
  made->work_ = std::move(exec.value());
  if (source.has_memory_nodes()) {
    made->exec_alive_ = source.exec_alive;
    *made->exec_alive_ = true;
  }
  if ((flags & instantiate_upload) != 0) {
    result<stream_object*> s = rt.streams().resolve(0);
    if (!s.ok()) return s.take_error();
    if (status up = made->upload(*s.value()); !up.ok()) return up;
  }
  return made;
}

executable::~executable() {
  if (exec_alive_ != nullptr) *exec_alive_ = false;
  if (layout_ != nullptr) memory_.retire(std::move(layout_));
}

status executable::check_stream(const stream_object& stream, const char* call) const {
  if (layout_->device >= 0 && stream.device != layout_->device) {
    return status(error_code::invalid_value,
                  std::string(call) + ": the graph's memory is on device " +
                      std::to_string(layout_->device) + ", the stream on device " +
                      std::to_string(stream.device) + "; launch it into a stream of device " +
                      std::to_string(layout_->device));
  }
  return status::success();
}

status executable::upload(stream_object& stream) {
  if (status ok = check_stream(stream, "somaGraphUpload"); !ok.ok()) return ok;
  std::shared_ptr<backend::stream> queue = runtime_.streams().queue_of(stream);
  if (queue == nullptr)
    return status(error_code::invalid_handle, "somaGraphUpload: the stream was destroyed");
  if (layout_->device >= 0) {
    if (status mapped = memory_.prepare(*layout_, stream, auto_free_, false); !mapped.ok())
      return mapped;
  }
  return work_->upload(*queue);
}

status executable::launch(stream_object& stream) {
  if (status ok = check_stream(stream, "somaGraphLaunch"); !ok.ok()) return ok;
  std::shared_ptr<backend::stream> queue = runtime_.streams().queue_of(stream);
  if (queue == nullptr)
    return status(error_code::invalid_handle, "somaGraphLaunch: the stream was destroyed");
  if (status failed = queue->sticky_error(); !failed.ok()) return failed;
  // Events of record nodes are locked across the launch, in one order, so no thread sees an
  // event's backend record paired with another record's position.
  std::vector<event_object*> events;
  for (std::uintptr_t handle : recorded_events_) {
    result<event_object*> e = runtime_.streams().resolve_event(handle);
    if (!e.ok()) {
      return status(e.error().code(),
                    "somaGraphLaunch: an event record node's event: " + e.error().message());
    }
    events.push_back(e.value());
  }
  std::sort(events.begin(), events.end());
  events.erase(std::unique(events.begin(), events.end()), events.end());
  if (layout_->device >= 0) {
    if (status mapped = memory_.prepare(*layout_, stream, auto_free_, true); !mapped.ok())
      return mapped;
  }
  std::vector<std::unique_lock<spin_lock>> locks;
  locks.reserve(events.size());
  for (event_object* e : events) locks.emplace_back(e->mutex);
  const std::uint64_t before = stream.timeline.enqueued_position();
  if (status launched = work_->launch(*queue); !launched.ok()) return launched;
  for (event_object* e : events) stream_registry::note_event_recorded(*e, stream, before);
  locks.clear();
  if (layout_->device >= 0) memory_.launched(*layout_, stream, stream.timeline.enqueued_position());
  return status::success();
}

status executable::set_memset(const node& n, void* destination, int value, std::size_t bytes) {
  const char* call = "somaGraphExecMemsetNodeSetParams";
  auto found = memsets_.find(n.index);
  if (n.owner != source_ || found == memsets_.end()) {
    return status(error_code::invalid_value,
                  std::string(call) +
                      ": the node is not a memset node of the graph this executable was made from");
  }
  const auto address = reinterpret_cast<std::uintptr_t>(destination);
  const std::shared_ptr<graph_allocation>& made_for = found->second.allocation;
  std::shared_ptr<graph_allocation> now = memory_.find(address);
  if (made_for != nullptr) {
    if (now != made_for || address + bytes > made_for->address + made_for->bytes ||
        address + bytes < address) {
      return status(error_code::invalid_value,
                    std::string(call) + ": " + format_bytes(bytes) + " at " +
                        format_address(address) + " leave the graph allocation at " +
                        format_address(made_for->address) + " (" + format_bytes(made_for->bytes) +
                        ") the node was made for (S15)");
    }
  } else if (now != nullptr) {
    return status(error_code::invalid_value,
                  std::string(call) +
                      ": the node was made for memory outside the graph; it cannot be "
                      "moved into graph allocation memory at " +
                      format_address(address));
  } else if (status ok = runtime_.check_use(destination, bytes, call, runtime_.devices().current(),
                                            backend::access_flags::read_write);
             !ok.ok()) {
    return ok;
  }
  return work_->set_memset(found->second.work_index, destination, value, bytes);
}

}  // namespace soma::detail::graph
