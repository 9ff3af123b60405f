#include "graph/node_builder.hpp"

namespace soma::detail::graph {

result<node*> node_builder::alloc(graph_model& g, dependencies after, int device, std::size_t bytes,
                                  std::vector<access_grant> access, const char* call) {
  if (bytes == 0) return status(error_code::invalid_value, std::string(call) + ": bytesize is 0");
  result<std::shared_ptr<graph_allocation>> a =
      memory_.create_allocation(device, bytes, std::move(access));
  if (!a.ok()) return a.take_error();
  node n;
  n.kind = node_kind::mem_alloc;
  n.allocation = std::move(a.value());
  return g.add(std::move(n), after, call);
}

result<node*> node_builder::free(graph_model& g, dependencies after, void* address,
                                 const char* call) {
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  std::shared_ptr<graph_allocation> a = memory_.find(at);
  if (a == nullptr || a->address != at) {
    return status(
        error_code::invalid_value,
        std::string(call) + ": " + format_address(at) +
            (a == nullptr ? " is no graph allocation; a free node frees memory an alloc node made"
                          : " is inside a graph allocation, not its start"));
  }
  node n;
  n.kind = node_kind::mem_free;
  n.allocation = a;
  // One free node per allocation, across graphs. That it follows its alloc node (when that is
  // in this graph) is checked at instantiation: edges added later may show it.
  if (status claimed = memory_.claim_free(*a, &g, call); !claimed.ok()) return claimed;
  result<node*> added = g.add(std::move(n), after, call);
  if (!added.ok()) memory_.unclaim_free(*a, &g);
  return added;
}

result<touched_range> node_builder::touch(const graph_model& g, const void* pointer,
                                          std::size_t bytes, backend::access_flags needed,
                                          const std::string& what) const {
  const auto at = reinterpret_cast<std::uintptr_t>(pointer);
  if (at == 0) return status(error_code::invalid_value, what + " is NULL");
  touched_range t{at, bytes, memory_.find(at)};
  if (t.allocation != nullptr) {
    const graph_allocation& a = *t.allocation;
    // The range may start in the granule padding behind the allocation's last byte, which
    // is graph address space but not the allocation's: test the start before the length.
    if (at >= a.address + a.bytes || bytes > a.address + a.bytes - at) {
      return status(error_code::invalid_value,
                    what + ": " + format_bytes(bytes) + " at " + format_address(at) +
                        " run past the end of the graph allocation at " +
                        format_address(a.address) + " (" + format_bytes(a.bytes) + ")");
    }
    return t;
  }
  const int device = g.memory_device() >= 0 ? g.memory_device() : runtime_.devices().current();
  if (status ok = runtime_.check_use(pointer, bytes, what.c_str(), device, needed); !ok.ok())
    return ok;
  return t;
}

result<node*> node_builder::add_touching(graph_model& g, dependencies after, node n,
                                         const char* call) {
  if (status ok = g.check_not_after_free(n, after, call); !ok.ok()) return ok;
  return g.add(std::move(n), after, call);
}

result<node> node_builder::writing(const graph_model& g, node_kind kind, void* destination,
                                   std::size_t bytes, const char* call) const {
  result<touched_range> t = touch(g, destination, bytes, backend::access_flags::read_write,
                                  std::string(call) + " destination");
  if (!t.ok()) return t.take_error();
  node n;
  n.kind = kind;
  n.destination = destination;
  n.bytes = bytes;
  n.touches.push_back(std::move(t.value()));
  return n;
}

result<node*> node_builder::memset(graph_model& g, dependencies after, void* destination, int value,
                                   std::size_t bytes, const char* call) {
  result<node> n = writing(g, node_kind::memset, destination, bytes, call);
  if (!n.ok()) return n.take_error();
  n.value().value = value;
  return add_touching(g, after, std::move(n.value()), call);
}

result<node*> node_builder::memcpy(graph_model& g, dependencies after, void* destination,
                                   const void* source, std::size_t bytes, const char* call) {
  result<node> n = writing(g, node_kind::memcpy, destination, bytes, call);
  if (!n.ok()) return n.take_error();
  result<touched_range> from =
      touch(g, source, bytes, backend::access_flags::read, std::string(call) + " source");
  if (!from.ok()) return from.take_error();
  n.value().source = source;
  n.value().touches.push_back(std::move(from.value()));
  return add_touching(g, after, std::move(n.value()), call);
}

result<node*> node_builder::host(graph_model& g, dependencies after, void (*function)(void*),
                                 void* data, const runtime::host_access* accesses,
                                 std::size_t count, const char* call) {
  if (function == nullptr)
    return status(error_code::invalid_value, std::string(call) + ": fn is NULL");
  if (count > 0 && accesses == nullptr) {
    return status(error_code::invalid_value,
                  std::string(call) + ": accesses is NULL with count " + std::to_string(count));
  }
  node n;
  n.kind = node_kind::host;
  n.function = function;
  n.data = data;
  for (std::size_t i = 0; i < count; ++i) {
    const runtime::host_access& a = accesses[i];
    const std::string what = std::string(call) + " range " + std::to_string(i);
    if (status ok = runtime::check_host_access_flags(a, what); !ok.ok()) return ok;
    if (a.bytes == 0) continue;
    result<touched_range> t = touch(g, a.pointer, a.bytes, a.flags, what);
    if (!t.ok()) return t.take_error();
    n.touches.push_back(std::move(t.value()));
  }
  return add_touching(g, after, std::move(n), call);
}

result<node*> node_builder::event(graph_model& g, dependencies after, node_kind kind,
                                  std::uintptr_t event, const char* call) {
  if (result<event_object*> e = runtime_.streams().resolve_event(event); !e.ok()) {
    return status(e.error().code(), std::string(call) + ": " + e.error().message());
  }
  node n;
  n.kind = kind;
  n.event = event;
  return g.add(std::move(n), after, call);
}

result<node*> node_builder::empty(graph_model& g, dependencies after, const char* call) {
  return g.add(node{}, after, call);
}

result<node*> node_builder::native_child(graph_model& g, dependencies after, void* native,
                                         bool owned, const char* call) {
  if (native == nullptr)
    return status(error_code::invalid_value, std::string(call) + ": nativeGraph is NULL");
  if (runtime_.devices().backend_name() != "cuda") {
    if (owned) runtime_.platform().destroy_native_graph(native);
    return status(error_code::not_supported,
                  std::string(call) + ": the " + runtime_.devices().backend_name() +
                      " backend has no native graphs; a native child graph needs the cuda backend");
  }
  node n;
  n.kind = node_kind::native_child;
  n.native_graph = native;
  result<node*> added = g.add(std::move(n), after, call);
  if (owned) {
    if (added.ok()) {
      g.own_native_graph(native);
    } else {
      runtime_.platform().destroy_native_graph(native);
    }
  }
  return added;
}

}  // namespace soma::detail::graph
