// graph_service's stream capture (S15): work on a capturing stream becomes nodes.
#include "graph/graph_service.hpp"
#include "graph/stream_capture.hpp"

namespace soma::detail::graph {
namespace {

std::vector<node*> frontier_nodes(const stream_capture& c, const stream_capture::member& m) {
  std::vector<node*> after;
  for (std::size_t i : m.frontier) after.push_back(c.graph->nodes()[i].get());
  return after;
}

}  // namespace

stream_capture* graph_service::capture_of(std::uintptr_t stream) {
  if (!any_capture() || stream == 0) return nullptr;
  std::lock_guard lock(mutex_);
  auto found = capturing_.find(stream);
  return found == capturing_.end() ? nullptr : found->second;
}

status graph_service::begin_capture(std::uintptr_t stream, int mode) {
  const char* call = "somaStreamBeginCapture";
  if (stream == 0) {
    return status(error_code::capture_unsupported,
                  std::string(call) +
                      ": the default stream (NULL) cannot be captured; capture a "
                      "stream made by somaStreamCreate");
  }
  result<stream_object*> s = runtime_.streams().resolve(stream);
  if (!s.ok()) return s.take_error();
  if (mode < 0 || mode > 2) {
    return status(error_code::invalid_value, std::string(call) + ": mode " + std::to_string(mode) +
                                                 " is not a somaStreamCaptureMode");
  }
  std::lock_guard lock(mutex_);
  if (capturing_.count(stream) != 0) {
    return status(error_code::illegal_state,
                  std::string(call) + ": the stream is capturing already; end that capture first");
  }
  if (status native = begin_native_capture_locked(*s.value(), call); !native.ok()) return native;
  auto c = std::make_unique<stream_capture>();
  c->graph = std::make_unique<graph_model>(runtime_.platform());
  c->origin = stream;
  c->mode = mode;
  c->members.push_back({stream, s.value(), {}, false, 0});
  capturing_[stream] = c.get();
  captures_.push_back(std::move(c));
  active_captures_.fetch_add(1, std::memory_order_acq_rel);
  return status::success();
}

status graph_service::begin_native_capture_locked(stream_object& s, const char* call) {
  std::shared_ptr<backend::stream> queue = runtime_.streams().queue_of(s);
  if (queue == nullptr)
    return status(error_code::invalid_handle, std::string(call) + ": the stream was destroyed");
  return runtime_.platform().begin_native_capture(*queue);
}

status graph_service::capture_node(
    stream_capture& c, std::uintptr_t stream,
    const std::function<result<node*>(graph_model&, std::span<node* const>)>& make) {
  std::lock_guard lock(mutex_);
  if (!c.failure.ok()) {
    return status(error_code::capture_invalidated,
                  "the stream's capture was invalidated: " + c.failure.message());
  }
  stream_capture::member* m = c.find(stream);
  if (m == nullptr)
    return status(error_code::capture_unmatched, "the stream does not take part in the capture");
  std::shared_ptr<backend::stream> queue = runtime_.streams().queue_of(*m->object);
  if (queue == nullptr)
    return status(error_code::invalid_handle, "the capturing stream was destroyed");
  backend::backend& platform = runtime_.platform();
  // What the application launched on the native stream since soma's last node comes first.
  if (status closed = close_native_segment_locked(c, *m, *queue, "capture"); !closed.ok())
    return closed;
  std::vector<node*> after = frontier_nodes(c, *m);
  // Under the lock: streams of one capture may be used from several threads. The maker takes
  // graph memory's lock and the runtime's, never this one.
  result<node*> added = make(*c.graph, after);
  if (added.ok()) {
    nodes_.insert(added.value());
    m->frontier = {added.value()->index};
    ++m->own_nodes;
  }
  if (status again = platform.begin_native_capture(*queue); !again.ok() && added.ok()) return again;
  return added.ok() ? status::success() : added.error();
}

status graph_service::capture_alloc(stream_capture& c, std::uintptr_t stream, void** out,
                                    std::size_t bytes, std::uintptr_t pool) {
  *out = nullptr;
  if (bytes == 0) return status::success();
  result<stream_object*> s = runtime_.streams().resolve(stream);
  if (!s.ok()) return s.take_error();
  int device = s.value()->device;
  if (pool != 0) {
    result<backend::memory_location> where = runtime_.ipc().pool_location(pool);
    if (!where.ok()) return where.take_error();
    if (where.value().is_host()) {
      return status(error_code::not_supported,
                    "somaMallocFromPoolAsync under capture: graph memory lives on a device; an "
                    "allocation from a host pool cannot become a graph allocation (allocate it "
                    "before the capture)");
    }
    device = where.value().id;
  } else {
    result<std::uintptr_t> current = runtime_.pools().current(device);
    if (!current.ok()) return current.take_error();
    pool = current.value();
  }
  // The pool's access list is copied into the node at capture time, as CUDA does.
  std::vector<access_grant> grants;
  for (int peer = 0; peer < runtime_.devices().count(); ++peer) {
    if (peer == device) continue;
    result<int> flags = runtime_.pools().access(pool, 1, peer);
    if (flags.ok() && flags.value() != 0)
      grants.push_back({peer, static_cast<backend::access_flags>(flags.value())});
  }
  void* address = nullptr;
  status made = capture_node(c, stream, [&](graph_model& g, std::span<node* const> after) {
    result<node*> n =
        builder_.alloc(g, after, device, bytes, grants, "somaMallocAsync (capturing)");
    if (n.ok()) address = reinterpret_cast<void*>(n.value()->allocation->address);
    return n;
  });
  if (made.ok()) *out = address;
  return made;
}

status graph_service::capture_free(stream_capture& c, std::uintptr_t stream, void* pointer) {
  if (pointer == nullptr) return status::success();
  return capture_node(c, stream, [&](graph_model& g, std::span<node* const> after) {
    return builder_.free(g, after, pointer, "somaFreeAsync (capturing)");
  });
}

status graph_service::capture_memset(stream_capture& c, std::uintptr_t stream, void* destination,
                                     int value, std::size_t bytes) {
  return capture_node(c, stream, [&](graph_model& g, std::span<node* const> after) {
    return builder_.memset(g, after, destination, value, bytes, "somaMemsetAsync (capturing)");
  });
}

status graph_service::capture_memcpy(stream_capture& c, std::uintptr_t stream, void* destination,
                                     const void* source, std::size_t bytes) {
  return capture_node(c, stream, [&](graph_model& g, std::span<node* const> after) {
    return builder_.memcpy(g, after, destination, source, bytes, "somaMemcpyAsync (capturing)");
  });
}

status graph_service::capture_host(stream_capture& c, std::uintptr_t stream,
                                   void (*function)(void*), void* data,
                                   const runtime::host_access* accesses, std::size_t count) {
  return capture_node(c, stream, [&](graph_model& g, std::span<node* const> after) {
    return builder_.host(g, after, function, data, accesses, count,
                         "somaLaunchHostFunc (capturing)");
  });
}

status graph_service::capture_record(stream_capture& c, std::uintptr_t stream,
                                     std::uintptr_t event) {
  std::size_t index = 0;
  status made = capture_node(c, stream, [&](graph_model& g, std::span<node* const> after) {
    result<node*> n =
        builder_.event(g, after, node_kind::event_record, event, "somaEventRecord (capturing)");
    if (n.ok()) index = n.value()->index;
    return n;
  });
  if (made.ok()) {
    std::lock_guard lock(mutex_);
    captured_events_[event] = {&c, index};
  }
  return made;
}

std::pair<stream_capture*, std::size_t> graph_service::captured_event(std::uintptr_t event) {
  if (!any_capture()) return {nullptr, 0};
  std::lock_guard lock(mutex_);
  auto found = captured_events_.find(event);
  return found == captured_events_.end() ? std::pair<stream_capture*, std::size_t>{nullptr, 0}
                                         : found->second;
}

void graph_service::forget_captured_event(std::uintptr_t event) {
  if (!any_capture()) return;
  std::lock_guard lock(mutex_);
  captured_events_.erase(event);
}

std::optional<status> graph_service::capture_wait(std::uintptr_t stream, std::uintptr_t event) {
  const char* call = "somaStreamWaitEvent";
  stream_capture* mine = capture_of(stream);
  auto [theirs, index] = captured_event(event);
  if (theirs == nullptr) {
    if (mine == nullptr) return std::nullopt;
    // An event recorded outside the capture: the graph waits for it at every launch.
    return capture_node(*mine, stream, [&](graph_model& g, std::span<node* const> after) {
      return builder_.event(g, after, node_kind::event_wait, event,
                            "somaStreamWaitEvent (capturing)");
    });
  }
  if (mine != nullptr && mine != theirs) {
    return status(error_code::illegal_state,
                  std::string(call) +
                      ": the event was recorded in another stream's capture; "
                      "captures cannot depend on each other");
  }
  std::lock_guard lock(mutex_);
  if (mine == nullptr) {
    // The stream joins the capture: its next work follows the recorded point.
    result<stream_object*> s = runtime_.streams().resolve(stream);
    if (!s.ok()) return s.take_error();
    if (status native = begin_native_capture_locked(*s.value(), call); !native.ok()) return native;
    theirs->members.push_back({stream, s.value(), {index}, true, 0});
    capturing_[stream] = theirs;
    return status::success();
  }
  stream_capture::member* m = theirs->find(stream);
  if (std::find(m->frontier.begin(), m->frontier.end(), index) == m->frontier.end())
    m->frontier.push_back(index);
  return status::success();
}

std::optional<status> graph_service::refuse_while_capturing(std::uintptr_t stream,
                                                            const char* call) {
  stream_capture* c = capture_of(stream);
  if (c == nullptr) return std::nullopt;
  std::lock_guard lock(mutex_);
  const std::string why = std::string(call) + " on a capturing stream, which cannot be captured";
  if (c->failure.ok()) c->failure = status(error_code::capture_invalidated, why);
  return status(error_code::capture_unsupported, why + "; the capture is invalidated");
}

result<int> graph_service::capture_status(std::uintptr_t stream) {
  if (result<stream_object*> s = runtime_.streams().resolve(stream); !s.ok()) return s.take_error();
  stream_capture* c = capture_of(stream);
  if (c == nullptr) return 0;
  std::lock_guard lock(mutex_);
  return c->failure.ok() ? 1 : 2;
}

result<graph_model*> graph_service::end_capture(std::uintptr_t stream) {
  const char* call = "somaStreamEndCapture";
  if (result<stream_object*> s = runtime_.streams().resolve(stream); !s.ok()) return s.take_error();
  std::unique_ptr<graph_model> graph;
  status outcome;
  {
    std::lock_guard lock(mutex_);
    auto found = capturing_.find(stream);
    if (found == capturing_.end())
      return status(error_code::capture_unmatched,
                    std::string(call) + ": the stream is not capturing");
    stream_capture& c = *found->second;
    if (c.origin != stream) {
      return status(error_code::capture_unmatched,
                    std::string(call) +
                        ": the stream joined a capture that another stream began; end "
                        "it on that stream");
    }
    // Close the native captures: their last segments become the streams' last nodes.
    for (stream_capture::member& m : c.members) {
      std::shared_ptr<backend::stream> queue = runtime_.streams().queue_of(*m.object);
      if (queue == nullptr) continue;
      status closed = close_native_segment_locked(c, m, *queue, call);
      if (!closed.ok() && c.failure.ok()) c.failure = closed;
    }
    if (!c.failure.ok()) {
      outcome = status(error_code::capture_invalidated,
                       std::string(call) + ": the capture was invalidated: " + c.failure.message());
    }
    const stream_capture::member& origin = *c.find(stream);
    for (const stream_capture::member& m : c.members) {
      if (!outcome.ok() || !m.joined || m.own_nodes == 0) continue;
      for (std::size_t last : m.frontier) {
        bool joined = false;
        for (std::size_t end : origin.frontier) joined = joined || c.graph->reaches(last, end);
        if (!joined) {
          outcome = status(error_code::capture_unjoined,
                           std::string(call) + ": a stream joined the capture and its work (" +
                               c.graph->nodes()[last]->name() +
                               ") was not joined back into the origin stream; record an event on "
                               "it and make the origin stream wait for that event");
        }
      }
    }
    end_capture_locked(c);
    graph = std::move(c.graph);
    for (auto it = captures_.begin(); it != captures_.end(); ++it) {
      if (it->get() == &c) {
        captures_.erase(it);
        break;
      }
    }
    if (outcome.ok()) graphs_.insert(graph.get());
  }
  if (!outcome.ok()) {
    {
      std::lock_guard lock(mutex_);
      for (const auto& n : graph->nodes()) nodes_.erase(n.get());
    }
    for (const auto& n : graph->nodes()) {
      if (n->kind == node_kind::mem_free) memory_->unclaim_free(*n->allocation, graph.get());
    }
    return outcome;
  }
  return graph.release();
}

status graph_service::close_native_segment_locked(stream_capture& c, stream_capture::member& m,
                                                  backend::stream& queue, const char* call) {
  result<void*> segment = runtime_.platform().end_native_capture(queue);
  if (!segment.ok()) return segment.take_error();
  if (segment.value() == nullptr) return status::success();  // nothing was launched natively
  std::vector<node*> after = frontier_nodes(c, m);
  result<node*> seg = builder_.native_child(*c.graph, after, segment.value(), true, call);
  if (!seg.ok()) return seg.take_error();
  nodes_.insert(seg.value());
  m.frontier = {seg.value()->index};
  ++m.own_nodes;
  return status::success();
}

void graph_service::stream_destroyed(std::uintptr_t stream) {
  if (!any_capture()) return;
  std::unique_ptr<graph_model> dropped;
  std::lock_guard lock(mutex_);
  auto found = capturing_.find(stream);
  if (found == capturing_.end()) return;
  stream_capture& c = *found->second;
  // Native captures stop with soma's (cuda: the stream's own capture would outlive it).
  auto end_native = [&](const stream_capture::member& m) {
    std::shared_ptr<backend::stream> queue = runtime_.streams().queue_of(*m.object);
    if (queue == nullptr) return;
    result<void*> segment = runtime_.platform().end_native_capture(*queue);
    if (segment.ok() && segment.value() != nullptr)
      runtime_.platform().destroy_native_graph(segment.value());
  };
  if (c.origin != stream) {
    if (stream_capture::member* m = c.find(stream)) end_native(*m);
    if (c.failure.ok()) {
      c.failure = status(error_code::capture_invalidated,
                         "a stream that joined the capture was destroyed before it ended");
    }
    auto& members = c.members;
    members.erase(
        std::remove_if(members.begin(), members.end(),
                       [&](const stream_capture::member& m) { return m.stream == stream; }),
        members.end());
    capturing_.erase(found);
    return;
  }
  for (const stream_capture::member& m : c.members) end_native(m);
  end_capture_locked(c);
  for (const auto& n : c.graph->nodes()) {
    nodes_.erase(n.get());
    if (n->kind == node_kind::mem_free) memory_->unclaim_free(*n->allocation, c.graph.get());
  }
  dropped = std::move(c.graph);
  for (auto it = captures_.begin(); it != captures_.end(); ++it) {
    if (it->get() == &c) {
      captures_.erase(it);
      break;
    }
  }
}

void graph_service::end_capture_locked(stream_capture& c) {
  for (const stream_capture::member& m : c.members) capturing_.erase(m.stream);
  for (auto it = captured_events_.begin(); it != captured_events_.end();) {
    it = it->second.first == &c ? captured_events_.erase(it) : std::next(it);
  }
  active_captures_.fetch_sub(1, std::memory_order_acq_rel);
}

}  // namespace soma::detail::graph
