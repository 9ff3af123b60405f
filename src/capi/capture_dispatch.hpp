// S15: the C API's test for a capturing stream. On a capturing stream a call becomes a node of
// the capture's graph; when nothing captures, the test is one atomic load.
#pragma once

#include <optional>

#include "capi/capi_support.hpp"
#include "graph/graph_service.hpp"
#include "graph/stream_capture.hpp"

namespace soma::capi {

using soma::detail::graph::graph_service;

inline soma::detail::graph::stream_capture* capture_of(runtime& rt, somaStream_t stream) {
  if (!graph_service::any_capture()) return nullptr;
  return graph_service::of(rt).capture_of(handle_of(stream));
}

/// The refusal of a call that cannot be captured (graph_service::refuse_while_capturing) when
/// stream captures; nullopt otherwise, for one load while nothing captures.
inline std::optional<soma::detail::status> refused_while_capturing(runtime& rt, somaStream_t stream,
                                                                   const char* call) {
  if (!graph_service::any_capture()) return std::nullopt;
  return graph_service::of(rt).refuse_while_capturing(handle_of(stream), call);
}

}  // namespace soma::capi
