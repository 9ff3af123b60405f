#include "graph/graph_model.hpp"

#include <algorithm>
#include <iterator>

namespace soma::detail::graph {
namespace {

// By node_kind, in its order.
constexpr const char* kind_names[] = {"empty",        "alloc",      "free",
                                      "memset",       "memcpy",     "host",
                                      "event record", "event wait", "native child graph"};
static_assert(std::size(kind_names) == static_cast<std::size_t>(node_kind::native_child) + 1);

}  // namespace

std::string node::name() const {
  return std::string(kind_names[static_cast<std::size_t>(kind)]) + " node " + std::to_string(index);
}

graph_model::~graph_model() {
  for (void* native : owned_native_) platform_.destroy_native_graph(native);
}

result<node*> graph_model::add(node n, std::span<node* const> dependencies, const char* call) {
  for (std::size_t i = 0; i < dependencies.size(); ++i) {
    const node* d = dependencies[i];
    if (d == nullptr || d->owner != this) {
      return status(error_code::invalid_value,
                    std::string(call) + ": dependency " + std::to_string(i) +
                        (d == nullptr ? " is NULL" : " is a node of another graph"));
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (dependencies[j] == d)
        return status(error_code::invalid_value,
                      std::string(call) + ": " + d->name() + " is listed twice");
    }
  }
  const bool memory = n.kind == node_kind::mem_alloc || n.kind == node_kind::mem_free;
  if (memory && n.allocation != nullptr) {
    if (memory_device_ >= 0 && memory_device_ != n.allocation->device) {
      return status(error_code::not_supported, std::string(call) +
                                                   ": the graph's memory nodes are on device " +
                                                   std::to_string(memory_device_) +
                                                   "; soma keeps a graph's memory on one device");
    }
    memory_device_ = n.allocation->device;
    has_memory_nodes_ = true;
  }
  auto made = std::make_unique<node>(std::move(n));
  made->owner = this;
  made->index = nodes_.size();
  made->after.clear();
  for (const node* d : dependencies) made->after.push_back(d->index);
  nodes_.push_back(std::move(made));
  return nodes_.back().get();
}

bool graph_model::reaches(std::size_t from, std::size_t to) const {
  if (from == to) return true;
  std::vector<char> seen(nodes_.size(), 0);
  std::vector<std::size_t> todo{to};
  while (!todo.empty()) {
    const std::size_t at = todo.back();
    todo.pop_back();
    for (std::size_t before : nodes_[at]->after) {
      if (before == from) return true;
      if (!seen[before]) {
        seen[before] = 1;
        todo.push_back(before);
      }
    }
  }
  return false;
}

status graph_model::add_edges(std::span<node* const> from, std::span<node* const> to) {
  for (std::size_t i = 0; i < from.size(); ++i) {
    if (from[i] == nullptr || to[i] == nullptr || from[i]->owner != this || to[i]->owner != this) {
      return status(
          error_code::invalid_value,
          "somaGraphAddDependencies: edge " + std::to_string(i) + " names " +
              (from[i] == nullptr || to[i] == nullptr ? "NULL" : "a node of another graph"));
    }
    if (reaches(to[i]->index, from[i]->index)) {
      return status(error_code::invalid_value, "somaGraphAddDependencies: edge " +
                                                   std::to_string(i) + " from " + from[i]->name() +
                                                   " to " + to[i]->name() + " would close a cycle");
    }
  }
  std::vector<std::size_t> added;  // so a later edge of this call that closes a cycle undoes all
  for (std::size_t i = 0; i < from.size(); ++i) {
    auto& after = to[i]->after;
    if (std::find(after.begin(), after.end(), from[i]->index) != after.end()) continue;
    if (reaches(to[i]->index, from[i]->index)) {
      for (std::size_t j = added.size(); j-- > 0;) to[added[j]]->after.pop_back();
      return status(error_code::invalid_value, "somaGraphAddDependencies: edge " +
                                                   std::to_string(i) + " from " + from[i]->name() +
                                                   " to " + to[i]->name() +
                                                   " would close a cycle with the edges before it");
    }
    after.push_back(from[i]->index);
    added.push_back(i);
  }
  return status::success();
}

status graph_model::check_not_after_free(const node& n, std::span<node* const> dependencies,
                                         const char* call) const {
  for (const touched_range& t : n.touches) {
    if (t.allocation == nullptr) continue;
    for (const auto& other : nodes_) {
      if (other->kind != node_kind::mem_free || other->allocation != t.allocation) continue;
      for (const node* d : dependencies) {
        if (reaches(other->index, d->index)) {
          return status(error_code::invalid_value,
                        std::string(call) + ": the new node would run after " + other->name() +
                            ", which frees the graph allocation at " + format_address(t.address) +
                            " it touches; a node that touches graph memory must come before "
                            "its free node (S15)");
        }
      }
    }
  }
  return status::success();
}

}  // namespace soma::detail::graph
