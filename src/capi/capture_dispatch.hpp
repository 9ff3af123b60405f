// S15: the C API's test for a capturing stream. On a capturing stream a call becomes a node of
// the capture's graph; when nothing captures, the test is one atomic load.
#pragma once

#include "capi/capi_support.hpp"
#include "graph/graph_service.hpp"
#include "graph/stream_capture.hpp"

namespace soma::capi {

using soma::detail::graph::graph_service;

inline soma::detail::graph::stream_capture* capture_of(runtime& rt, somaStream_t stream) {
  if (!graph_service::any_capture()) return nullptr;
  return graph_service::of(rt).capture_of(handle_of(stream));
}

}  // namespace soma::capi
