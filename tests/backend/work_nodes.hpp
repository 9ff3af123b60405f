// Work nodes for the backend graph tests: one maker per kind of backend::work_node.
#pragma once

#include <cstddef>

#include "backend/backend.hpp"

namespace soma_backend_test {

using soma::detail::backend::event;
using soma::detail::backend::work_node;

inline work_node empty_node() { return {}; }
inline work_node memset_node(void* destination, int value, std::size_t bytes) {
  return {
      .what = work_node::kind::memset, .destination = destination, .value = value, .bytes = bytes};
}
inline work_node memcpy_node(void* destination, const void* source, std::size_t bytes) {
  return {.what = work_node::kind::memcpy,
          .destination = destination,
          .source = source,
          .bytes = bytes};
}
inline work_node host_node(void (*function)(void*), void* data) {
  return {.what = work_node::kind::host, .function = function, .data = data};
}
inline work_node event_record_node(event& e) {
  return {.what = work_node::kind::event_record, .target = &e};
}
inline work_node native_child_node(void* native_graph) {
  return {.what = work_node::kind::native_child, .native_graph = native_graph};
}

}  // namespace soma_backend_test
