#include "graph/graph_service.hpp"

#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>

#include "graph/stream_capture.hpp"

namespace soma::detail::graph {
namespace {

// The object behind a handle the C API was given, if it is in `live`; else invalid_value
// naming the handle: "<kind> 0x... <why_not>".
template <typename T>
result<T*> find_live(const std::unordered_set<const T*>& live, const void* handle, const char* kind,
                     const char* why_not) {
  auto found = live.find(static_cast<const T*>(handle));
  if (found != live.end()) return const_cast<T*>(*found);
  return status(error_code::invalid_value,
                std::string(kind) + " " + format_address(reinterpret_cast<std::uintptr_t>(handle)) +
                    " " + why_not);
}

// find_live, and the object leaves `live`: the handle is destroyed.
template <typename T>
result<T*> take_live(std::unordered_set<const T*>& live, const void* handle, const char* kind,
                     const char* why_not) {
  result<T*> found = find_live(live, handle, kind, why_not);
  if (found.ok()) live.erase(found.value());
  return found;
}

// Puts a new object in `live` (its handle is valid from now) and hands it out.
template <typename T>
T* keep_live(std::mutex& mutex, std::unordered_set<const T*>& live, std::unique_ptr<T> object) {
  std::lock_guard lock(mutex);
  live.insert(object.get());
  return object.release();
}

constexpr const char* not_a_graph =
    "is not a live graph (destroyed, NULL, or never made by somaGraphCreate or "
    "somaStreamEndCapture)";
constexpr const char* not_an_exec =
    "is not live (destroyed, NULL, or never made by somaGraphInstantiate)";

}  // namespace

graph_service& graph_service::of(runtime& rt) {
  // Made once, never destroyed: executables and graph allocations may outlive any owner.
  static graph_service* const service = new graph_service(rt);
  return *service;
}

graph_service::graph_service(runtime& rt)
    : runtime_(rt), memory_(std::make_unique<graph_memory>(rt)), builder_(rt, *memory_) {
  rt.set_graph_memory(memory_.get());
}

graph_model* graph_service::create_graph() {
  return keep_live(mutex_, graphs_, std::make_unique<graph_model>(runtime_.platform()));
}

status graph_service::destroy_graph(const void* handle) {
  std::unique_lock lock(mutex_);
  result<graph_model*> taken = take_live(graphs_, handle, "graph", not_a_graph);
  if (!taken.ok()) return taken.take_error();
  graph_model* g = taken.value();
  for (const auto& n : g->nodes()) nodes_.erase(n.get());
  lock.unlock();
  for (const auto& n : g->nodes()) {
    if (n->kind == node_kind::mem_free) memory_->unclaim_free(*n->allocation, g);
  }
  delete g;
  return status::success();
}

result<graph_model*> graph_service::resolve(const void* graph) const {
  std::lock_guard lock(mutex_);
  return find_live(graphs_, graph, "graph", not_a_graph);
}

result<node*> graph_service::resolve_node(const void* n) const {
  std::lock_guard lock(mutex_);
  return find_live(nodes_, n, "node", "is not a node of a live graph");
}

result<node*> graph_service::track(result<node*> added) {
  if (added.ok()) {
    std::lock_guard lock(mutex_);
    nodes_.insert(added.value());
  }
  return added;
}

result<std::vector<node*>> graph_service::resolve_dependencies(graph_model& g,
                                                               const void* const* list,
                                                               std::size_t count,
                                                               const char* call) const {
  if (count > 0 && list == nullptr) {
    return status(
        error_code::invalid_value,
        std::string(call) + ": dependencies is NULL with numDependencies " + std::to_string(count));
  }
  std::vector<node*> after;
  for (std::size_t i = 0; i < count; ++i) {
    result<node*> n = resolve_node(list[i]);
    if (!n.ok()) {
      return status(error_code::invalid_value, std::string(call) + ": dependency " +
                                                   std::to_string(i) + ": " + n.error().message());
    }
    if (n.value()->owner != &g) {
      return status(
          error_code::invalid_value,
          std::string(call) + ": dependency " + std::to_string(i) + " is a node of another graph");
    }
    after.push_back(n.value());
  }
  return after;
}

result<node*> graph_service::add_alloc(graph_model& g, std::span<node* const> after,
                                       const alloc_request& r) {
  const char* call = "somaGraphAddMemAllocNode";
  if (r.allocation_type != 1) {
    return status(error_code::invalid_value, std::string(call) + ": poolProps.allocType " +
                                                 std::to_string(r.allocation_type) +
                                                 " is not somaMemAllocationTypePinned");
  }
  if (r.location_type != 1) {
    return status(error_code::invalid_value, std::string(call) + ": poolProps.location.type " +
                                                 std::to_string(r.location_type) +
                                                 " is not somaMemLocationTypeDevice");
  }
  if (status ok = runtime_.devices().check(r.location_id); !ok.ok()) return ok;
  if (r.handle_types != 0 || r.extra_properties) {
    return status(error_code::invalid_value,
                  std::string(call) +
                      ": graph memory takes no handle types, maxSize, usage, win32 "
                      "attributes or reserved bytes; leave them 0");
  }
  if (r.bytes == 0) return status(error_code::invalid_value, std::string(call) + ": bytesize is 0");
  if (status ok = runtime_.pools().check_access_list(r.access, r.access_count); !ok.ok()) return ok;
  std::vector<access_grant> grants;
  for (std::size_t i = 0; i < r.access_count; ++i) {
    const access_request& a = r.access[i];
    const std::string what = std::string(call) + ": accessDescs[" + std::to_string(i) + "]";
    if (a.location_type != 1)
      return status(error_code::invalid_value, what + " is not a device location");
    if (status ok = runtime_.devices().check(a.location_id); !ok.ok()) return ok;
    if (a.flags != 0 && a.flags != 1 && a.flags != 3)
      return status(error_code::invalid_value,
                    what + ": flags " + std::to_string(a.flags) + " are not somaMemAccessFlags*");
    if (a.location_id == r.location_id || a.flags == 0) continue;
    result<bool> peer = runtime_.devices().can_access_peer(a.location_id, r.location_id);
    if (!peer.ok()) return peer.take_error();
    if (!peer.value()) {
      return status(error_code::invalid_device, what + ": device " + std::to_string(a.location_id) +
                                                    " cannot access memory of device " +
                                                    std::to_string(r.location_id));
    }
    grants.push_back({a.location_id, static_cast<backend::access_flags>(a.flags)});
  }
  return track(builder_.alloc(g, after, r.location_id, r.bytes, std::move(grants), call));
}

status graph_service::add_edges(graph_model& g, const void* const* from, const void* const* to,
                                std::size_t count) {
  if (count > 0 && (from == nullptr || to == nullptr))
    return status(error_code::invalid_value,
                  "somaGraphAddDependencies: from or to is NULL with a count");
  std::vector<node*> a;
  std::vector<node*> b;
  for (std::size_t i = 0; i < count; ++i) {
    result<node*> x = resolve_node(from[i]);
    if (!x.ok()) return x.take_error();
    result<node*> y = resolve_node(to[i]);
    if (!y.ok()) return y.take_error();
    a.push_back(x.value());
    b.push_back(y.value());
  }
  for (std::size_t i = 0; i < count; ++i) {
    if (a[i]->owner != &g || b[i]->owner != &g) {
      return status(
          error_code::invalid_value,
          "somaGraphAddDependencies: edge " + std::to_string(i) + " names a node of another graph");
    }
  }
  return g.add_edges(a, b);
}

result<executable*> graph_service::instantiate(graph_model& g, unsigned long long flags) {
  result<std::unique_ptr<executable>> made = executable::instantiate(g, flags, runtime_, *memory_);
  if (!made.ok()) return made.take_error();
  return keep_live(mutex_, execs_, std::move(made.value()));
}

status graph_service::destroy_exec(const void* handle) {
  std::unique_lock lock(mutex_);
  result<executable*> taken = take_live(execs_, handle, "executable graph", not_an_exec);
  lock.unlock();
  if (!taken.ok()) return taken.take_error();
  delete taken.value();
  return status::success();
}

result<executable*> graph_service::resolve_exec(const void* e) const {
  std::lock_guard lock(mutex_);
  return find_live(execs_, e, "executable graph", not_an_exec);
}

}  // namespace soma::detail::graph
