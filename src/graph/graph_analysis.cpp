#include "graph/graph_analysis.hpp"

#include <algorithm>

#include "core/check.hpp"

namespace soma::detail::graph {
namespace {
constexpr std::size_t npos = static_cast<std::size_t>(-1);
}

graph_analysis::graph_analysis(const graph_model& g) : graph_(g) {
  const auto& nodes = g.nodes();
  const std::size_t n = nodes.size();
  // Kahn's order: edges added later (somaGraphAddDependencies) may point backwards in index.
  std::vector<std::vector<std::size_t>> next(n);
  std::vector<std::size_t> waiting(n, 0);
  for (const auto& x : nodes) {
    if (x->kind == node_kind::mem_alloc) alloc_nodes_[x->allocation.get()] = x->index;
    if (x->kind == node_kind::mem_free) free_nodes_[x->allocation.get()] = x->index;
    waiting[x->index] = x->after.size();
    for (std::size_t before : x->after) next[before].push_back(x->index);
  }
  std::vector<std::size_t> ready;
  for (std::size_t i = n; i-- > 0;) {
    if (waiting[i] == 0) ready.push_back(i);
  }
  while (!ready.empty()) {
    const std::size_t at = ready.back();
    ready.pop_back();
    order_.push_back(at);
    for (std::size_t later : next[at]) {
      if (--waiting[later] == 0) ready.push_back(later);
    }
  }
  words_ = (n + 63) / 64;
  ancestors_.assign(n * words_, 0);
  for (std::size_t at : order_) {
    std::uint64_t* row = &ancestors_[at * words_];
    for (std::size_t before : nodes[at]->after) {
      const std::uint64_t* from = &ancestors_[before * words_];
      for (std::size_t w = 0; w < words_; ++w) row[w] |= from[w];
      row[before / 64] |= std::uint64_t{1} << (before % 64);
    }
  }
}

bool graph_analysis::reaches(std::size_t from, std::size_t to) const {
  if (from == to) return true;
  return (ancestors_[to * words_ + from / 64] >> (from % 64)) & 1U;
}

std::size_t graph_analysis::alloc_node_of(const graph_allocation* a) const {
  auto found = alloc_nodes_.find(a);
  return found == alloc_nodes_.end() ? npos : found->second;
}

std::size_t graph_analysis::free_node_of(const graph_allocation* a) const {
  auto found = free_nodes_.find(a);
  return found == free_nodes_.end() ? npos : found->second;
}

status graph_analysis::check_memory_order() const {
  const auto& nodes = graph_.nodes();
  for (const auto& x : nodes) {
    if (x->kind == node_kind::mem_free) {
      const std::size_t alloc = alloc_node_of(x->allocation.get());
      if (alloc != npos && !reaches(alloc, x->index)) {
        return status(error_code::invalid_value,
                      "somaGraphInstantiate: " + x->name() + " frees the allocation of " +
                          nodes[alloc]->name() + " but does not depend on it (S15)");
      }
    }
    for (const touched_range& t : x->touches) {
      if (t.allocation == nullptr) continue;
      const std::size_t alloc = alloc_node_of(t.allocation.get());
      if (alloc != npos && !reaches(alloc, x->index)) {
        return status(error_code::invalid_value,
                      "somaGraphInstantiate: " + x->name() + " touches " +
                          format_address(t.address) + ", memory of " + nodes[alloc]->name() +
                          ", but is not ordered after it; add a dependency path from " +
                          nodes[alloc]->name() + " to " + x->name() + " (S15)");
      }
      const std::size_t free = free_node_of(t.allocation.get());
      if (free != npos && !reaches(x->index, free)) {
        return status(error_code::invalid_value,
                      "somaGraphInstantiate: " + x->name() + " touches " +
                          format_address(t.address) + ", memory that " + nodes[free]->name() +
                          " frees, but is not ordered before it; add a dependency path from " +
                          x->name() + " to " + nodes[free]->name() + " (S15)");
      }
    }
  }
  return status::success();
}

void graph_analysis::lay_out(exec_memory& layout) const {
  struct placed {
    std::size_t alloc;
    std::size_t free;  // npos: lives past the graph
    std::size_t offset;
    std::size_t span;
  };
  std::vector<placed> done;
  const auto& nodes = graph_.nodes();
  for (std::size_t at : order_) {
    const node& x = *nodes[at];
    if (x.kind == node_kind::mem_free && alloc_node_of(x.allocation.get()) == npos) {
      layout.frees_of_others.push_back(x.allocation);
      continue;
    }
    if (x.kind != node_kind::mem_alloc) continue;
    const std::size_t free = free_node_of(x.allocation.get());
    // Ranges of allocations that may be live at the same time as this one.
    std::vector<std::pair<std::size_t, std::size_t>> busy;
    for (const placed& p : done) {
      const bool before = p.free != npos && reaches(p.free, at);
      const bool after = free != npos && reaches(free, p.alloc);
      if (!before && !after) busy.emplace_back(p.offset, p.offset + p.span);
    }
    std::sort(busy.begin(), busy.end());
    std::size_t offset = 0;
    for (const auto& [begin, end] : busy) {
      if (begin >= offset + x.allocation->span) break;
      offset = std::max(offset, end);
    }
    done.push_back({at, free, offset, x.allocation->span});
    layout.allocations.push_back({x.allocation, offset, free != npos});
    layout.footprint = std::max(layout.footprint, offset + x.allocation->span);
  }
  if constexpr (expensive_checks) {
    // S15: allocations that may be live at the same time never share memory.
    for (std::size_t i = 0; i < done.size(); ++i) {
      for (std::size_t j = i + 1; j < done.size(); ++j) {
        const placed& p = done[i];
        const placed& q = done[j];
        const bool apart = p.offset + p.span <= q.offset || q.offset + q.span <= p.offset;
        const bool ordered = (p.free != npos && reaches(p.free, q.alloc)) ||
                             (q.free != npos && reaches(q.free, p.alloc));
        SOMA_EXPENSIVE_ASSERT(apart || ordered,
                              "graph allocations that may be live together do not overlap");
      }
    }
  }
}

}  // namespace soma::detail::graph
