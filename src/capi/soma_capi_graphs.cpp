// The C API of graphs with memory nodes (S15): translation to src/graph, nothing else.
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "capi/capi_support.hpp"
#include "graph/graph_service.hpp"
#include "soma/soma.h"

using namespace soma::capi;  // NOLINT(google-build-using-namespace): the C API's helpers

using soma::detail::graph::executable;
using soma::detail::graph::graph_model;
using soma::detail::graph::graph_service;
using graph_node = soma::detail::graph::node;
using soma::detail::graph::node_kind;

namespace {

// The graph and the dependency list every somaGraphAdd*Node takes, resolved; then make(...)
// adds the node, which is registered and returned through *out.
template <typename Make>
status add_node(runtime& rt, const char* call, somaGraphNode_t* out, somaGraph_t graph,
                const somaGraphNode_t* dependencies, size_t count, Make&& make) {
  if (out == nullptr) return null_argument(call, "pGraphNode");
  graph_service& graphs = graph_service::of(rt);
  result<graph_model*> g = graphs.resolve(graph);
  if (!g.ok()) return g.take_error();
  result<std::vector<graph_node*>> after = graphs.resolve_dependencies(
      *g.value(), reinterpret_cast<const void* const*>(dependencies), count, call);
  if (!after.ok()) return after.take_error();
  result<graph_node*> added =
      graphs.track(make(graphs, *g.value(), std::span<graph_node* const>(after.value())));
  if (!added.ok()) return added.take_error();
  *out = reinterpret_cast<somaGraphNode_t>(added.value());
  return status::success();
}

// somaGraphAddEventRecordNode and somaGraphAddEventWaitNode, which differ in the node's kind.
somaError_t add_event_node(const char* call, node_kind kind, somaGraphNode_t* node,
                           somaGraph_t graph, const somaGraphNode_t* dependencies,
                           size_t dependency_count, somaEvent_t event) {
  return with_runtime([&](runtime& rt) -> status {
    return add_node(rt, call, node, graph, dependencies, dependency_count,
                    [&](graph_service& graphs, graph_model& g, std::span<graph_node* const> after) {
                      return graphs.builder().event(g, after, kind, handle_of(event), call);
                    });
  });
}

// The node behind a handle, if it is a live node of `kind` (called `kind_name` in the message).
result<graph_node*> node_of_kind(runtime& rt, somaGraphNode_t node, node_kind kind,
                                 const char* kind_name, const char* call) {
  result<graph_node*> n = graph_service::of(rt).resolve_node(node);
  if (!n.ok()) return n.take_error();
  if (n.value()->kind != kind) {
    return status(error_code::invalid_value,
                  std::string(call) + ": " + n.value()->name() + " is no " + kind_name + " node");
  }
  return n;
}

status check_memset(const char* call, const somaMemsetParams* p) {
  if (p == nullptr) return null_argument(call, "memsetParams");
  if (p->elementSize != 1 || p->height != 1) {
    return status(error_code::not_supported,
                  std::string(call) + ": elementSize " + std::to_string(p->elementSize) +
                      " and height " + std::to_string(p->height) +
                      "; soma's memset nodes set bytes (elementSize 1, height 1)");
  }
  return status::success();
}

bool reserved_zero(const somaMemPoolProps& props) {
  for (unsigned char b : props.reserved) {
    if (b != 0) return false;
  }
  return true;
}

}  // namespace

extern "C" {

somaError_t somaGraphCreate(somaGraph_t* graph, unsigned int flags) {
  return with_runtime([&](runtime& rt) -> status {
    if (graph == nullptr) return null_argument("somaGraphCreate", "graph");
    if (flags != 0) return status(error_code::invalid_value, "somaGraphCreate: flags must be 0");
    *graph = reinterpret_cast<somaGraph_t>(graph_service::of(rt).create_graph());
    return status::success();
  });
}

somaError_t somaGraphDestroy(somaGraph_t graph) {
  return with_runtime([&](runtime& rt) { return graph_service::of(rt).destroy_graph(graph); });
}

somaError_t somaGraphAddMemAllocNode(somaGraphNode_t* node, somaGraph_t graph,
                                     const somaGraphNode_t* dependencies, size_t numDependencies,
                                     somaMemAllocNodeParams* params) {
  const char* call = "somaGraphAddMemAllocNode";
  return with_runtime([&](runtime& rt) -> status {
    if (params == nullptr) return null_argument(call, "nodeParams");
    std::vector<access_request> access;
    if (status ok = rt.pools().check_access_list(params->accessDescs, params->accessDescCount);
        !ok.ok())
      return ok;
    for (size_t i = 0; i < params->accessDescCount; ++i) {
      const somaMemAccessDesc& d = params->accessDescs[i];
      access.push_back({raw_value(d.location.type), d.location.id, raw_value(d.flags)});
    }
    soma::detail::graph::alloc_request r;
    const somaMemPoolProps& props = params->poolProps;
    r.allocation_type = raw_value(props.allocType);
    r.handle_types = static_cast<unsigned>(raw_value(props.handleTypes));
    r.location_type = raw_value(props.location.type);
    r.location_id = props.location.id;
    r.extra_properties = props.win32SecurityAttributes != nullptr || props.maxSize != 0 ||
                         props.usage != 0 || !reserved_zero(props);
    r.access = access.data();
    r.access_count = access.size();
    r.bytes = params->bytesize;
    return add_node(rt, call, node, graph, dependencies, numDependencies,
                    [&](graph_service& graphs, graph_model& g, std::span<graph_node* const> after) {
                      result<soma::detail::graph::node*> n = graphs.add_alloc(g, after, r);
                      if (n.ok())
                        params->dptr = reinterpret_cast<void*>(n.value()->allocation->address);
                      return n;
                    });
  });
}

somaError_t somaGraphAddMemFreeNode(somaGraphNode_t* node, somaGraph_t graph,
                                    const somaGraphNode_t* dependencies, size_t numDependencies,
                                    void* dptr) {
  const char* call = "somaGraphAddMemFreeNode";
  return with_runtime([&](runtime& rt) -> status {
    return add_node(rt, call, node, graph, dependencies, numDependencies,
                    [&](graph_service& graphs, graph_model& g, std::span<graph_node* const> after) {
                      return graphs.builder().free(g, after, dptr, call);
                    });
  });
}

somaError_t somaGraphAddMemsetNode(somaGraphNode_t* node, somaGraph_t graph,
                                   const somaGraphNode_t* dependencies, size_t numDependencies,
                                   const somaMemsetParams* memsetParams) {
  const char* call = "somaGraphAddMemsetNode";
  return with_runtime([&](runtime& rt) -> status {
    if (status ok = check_memset(call, memsetParams); !ok.ok()) return ok;
    return add_node(rt, call, node, graph, dependencies, numDependencies,
                    [&](graph_service& graphs, graph_model& g, std::span<graph_node* const> after) {
                      return graphs.builder().memset(g, after, memsetParams->dst,
                                                     static_cast<int>(memsetParams->value & 0xffU),
                                                     memsetParams->width, call);
                    });
  });
}

somaError_t somaGraphAddMemcpyNode1D(somaGraphNode_t* node, somaGraph_t graph,
                                     const somaGraphNode_t* dependencies, size_t numDependencies,
                                     void* dst, const void* src, size_t count,
                                     somaMemcpyKind kind) {
  const char* call = "somaGraphAddMemcpyNode1D";
  return with_runtime([&](runtime& rt) -> status {
    const int raw_kind = raw_value(kind);
    if (raw_kind < somaMemcpyHostToHost || raw_kind > somaMemcpyDefault) {
      return status(
          error_code::invalid_value,
          std::string(call) + ": kind " + std::to_string(raw_kind) + " is not a somaMemcpyKind");
    }
    return add_node(rt, call, node, graph, dependencies, numDependencies,
                    [&](graph_service& graphs, graph_model& g, std::span<graph_node* const> after) {
                      return graphs.builder().memcpy(g, after, dst, src, count, call);
                    });
  });
}

somaError_t somaGraphAddHostNode(somaGraphNode_t* node, somaGraph_t graph,
                                 const somaGraphNode_t* dependencies, size_t numDependencies,
                                 const somaHostNodeParams* nodeParams) {
  return somaGraphAddHostNodeWithAccess(node, graph, dependencies, numDependencies, nodeParams,
                                        nullptr, 0);
}

somaError_t somaGraphAddHostNodeWithAccess(somaGraphNode_t* node, somaGraph_t graph,
                                           const somaGraphNode_t* dependencies,
                                           size_t numDependencies,
                                           const somaHostNodeParams* nodeParams,
                                           const somaHostAccess* accesses, size_t count) {
  const char* call =
      count == 0 && accesses == nullptr ? "somaGraphAddHostNode" : "somaGraphAddHostNodeWithAccess";
  return with_runtime([&](runtime& rt) -> status {
    if (nodeParams == nullptr) return null_argument(call, "nodeParams");
    if (count > 0 && accesses == nullptr) return null_argument(call, "accesses");
    if (count > static_cast<size_t>(PTRDIFF_MAX) / sizeof(somaHostAccess)) {
      return status(error_code::invalid_value,
                    std::string(call) + ": count " + std::to_string(count) +
                        " is larger than any array of somaHostAccess can be");
    }
    std::vector<runtime::host_access> ranges;
    for (size_t i = 0; i < count; ++i) {
      ranges.push_back(
          {accesses[i].ptr, accesses[i].size,
           static_cast<soma::detail::backend::access_flags>(raw_value(accesses[i].access))});
    }
    return add_node(rt, call, node, graph, dependencies, numDependencies,
                    [&](graph_service& graphs, graph_model& g, std::span<graph_node* const> after) {
                      return graphs.builder().host(g, after, nodeParams->fn, nodeParams->userData,
                                                   ranges.data(), ranges.size(), call);
                    });
  });
}

somaError_t somaGraphAddEventRecordNode(somaGraphNode_t* node, somaGraph_t graph,
                                        const somaGraphNode_t* dependencies, size_t numDependencies,
                                        somaEvent_t event) {
  return add_event_node("somaGraphAddEventRecordNode", node_kind::event_record, node, graph,
                        dependencies, numDependencies, event);
}

somaError_t somaGraphAddEventWaitNode(somaGraphNode_t* node, somaGraph_t graph,
                                      const somaGraphNode_t* dependencies, size_t numDependencies,
                                      somaEvent_t event) {
  return add_event_node("somaGraphAddEventWaitNode", node_kind::event_wait, node, graph,
                        dependencies, numDependencies, event);
}

somaError_t somaGraphAddEmptyNode(somaGraphNode_t* node, somaGraph_t graph,
                                  const somaGraphNode_t* dependencies, size_t numDependencies) {
  const char* call = "somaGraphAddEmptyNode";
  return with_runtime([&](runtime& rt) -> status {
    return add_node(rt, call, node, graph, dependencies, numDependencies,
                    [&](graph_service& graphs, graph_model& g, std::span<graph_node* const> after) {
                      return graphs.builder().empty(g, after, call);
                    });
  });
}

somaError_t somaGraphAddNativeChildGraphNode(somaGraphNode_t* node, somaGraph_t graph,
                                             const somaGraphNode_t* dependencies,
                                             size_t numDependencies, void* nativeGraph) {
  const char* call = "somaGraphAddNativeChildGraphNode";
  return with_runtime([&](runtime& rt) -> status {
    return add_node(rt, call, node, graph, dependencies, numDependencies,
                    [&](graph_service& graphs, graph_model& g, std::span<graph_node* const> after) {
                      return graphs.builder().native_child(g, after, nativeGraph, false, call);
                    });
  });
}

somaError_t somaGraphAddDependencies(somaGraph_t graph, const somaGraphNode_t* from,
                                     const somaGraphNode_t* to, size_t numDependencies) {
  return with_runtime([&](runtime& rt) -> status {
    graph_service& graphs = graph_service::of(rt);
    result<graph_model*> g = graphs.resolve(graph);
    if (!g.ok()) return g.take_error();
    return graphs.add_edges(*g.value(), reinterpret_cast<const void* const*>(from),
                            reinterpret_cast<const void* const*>(to), numDependencies);
  });
}

somaError_t somaGraphMemAllocNodeGetParams(somaGraphNode_t node,
                                           somaMemAllocNodeParams* paramsOut) {
  const char* call = "somaGraphMemAllocNodeGetParams";
  return with_runtime([&](runtime& rt) -> status {
    if (paramsOut == nullptr) return null_argument(call, "paramsOut");
    result<graph_node*> n = node_of_kind(rt, node, node_kind::mem_alloc, "alloc", call);
    if (!n.ok()) return n.take_error();
    const auto& a = *n.value()->allocation;
    // The access list lives in the node, as CUDA's lives in the graph.
    auto& descs = n.value()->access_descs;
    descs.clear();
    static_assert(sizeof(graph_node::access_desc) == sizeof(somaMemAccessDesc));
    for (const auto& g : a.access)
      descs.push_back({somaMemLocationTypeDevice, g.device, static_cast<int>(g.flags)});
    somaMemAllocNodeParams out{};
    out.poolProps.allocType = somaMemAllocationTypePinned;
    out.poolProps.handleTypes = somaMemHandleTypeNone;
    out.poolProps.location.type = somaMemLocationTypeDevice;
    out.poolProps.location.id = a.device;
    out.accessDescs =
        descs.empty() ? nullptr : reinterpret_cast<const somaMemAccessDesc*>(descs.data());
    out.accessDescCount = descs.size();
    out.bytesize = a.bytes;
    out.dptr = reinterpret_cast<void*>(a.address);
    *paramsOut = out;
    return status::success();
  });
}

somaError_t somaGraphMemFreeNodeGetParams(somaGraphNode_t node, void** dptrOut) {
  const char* call = "somaGraphMemFreeNodeGetParams";
  return with_runtime([&](runtime& rt) -> status {
    if (dptrOut == nullptr) return null_argument(call, "dptrOut");
    result<graph_node*> n = node_of_kind(rt, node, node_kind::mem_free, "free", call);
    if (!n.ok()) return n.take_error();
    *dptrOut = reinterpret_cast<void*>(n.value()->allocation->address);
    return status::success();
  });
}

somaError_t somaStreamBeginCapture(somaStream_t stream, somaStreamCaptureMode mode) {
  return with_runtime([&](runtime& rt) {
    return graph_service::of(rt).begin_capture(handle_of(stream), raw_value(mode));
  });
}

somaError_t somaStreamEndCapture(somaStream_t stream, somaGraph_t* graph) {
  return with_runtime([&](runtime& rt) -> status {
    if (graph == nullptr) return null_argument("somaStreamEndCapture", "pGraph");
    *graph = nullptr;
    result<graph_model*> made = graph_service::of(rt).end_capture(handle_of(stream));
    if (!made.ok()) return made.take_error();
    *graph = reinterpret_cast<somaGraph_t>(made.value());
    return status::success();
  });
}

somaError_t somaStreamIsCapturing(somaStream_t stream, somaStreamCaptureStatus* captureStatus) {
  return with_runtime([&](runtime& rt) -> status {
    if (captureStatus == nullptr) return null_argument("somaStreamIsCapturing", "pCaptureStatus");
    result<int> state = graph_service::of(rt).capture_status(handle_of(stream));
    if (!state.ok()) return state.take_error();
    *captureStatus = static_cast<somaStreamCaptureStatus>(state.value());
    return status::success();
  });
}

somaError_t somaGraphInstantiate(somaGraphExec_t* graphExec, somaGraph_t graph,
                                 unsigned long long flags) {
  return with_runtime([&](runtime& rt) -> status {
    if (graphExec == nullptr) return null_argument("somaGraphInstantiate", "pGraphExec");
    graph_service& graphs = graph_service::of(rt);
    result<graph_model*> g = graphs.resolve(graph);
    if (!g.ok()) return g.take_error();
    result<executable*> e = graphs.instantiate(*g.value(), flags);
    if (!e.ok()) return e.take_error();
    *graphExec = reinterpret_cast<somaGraphExec_t>(e.value());
    return status::success();
  });
}

somaError_t somaGraphUpload(somaGraphExec_t graphExec, somaStream_t stream) {
  return with_runtime([&](runtime& rt) -> status {
    graph_service& graphs = graph_service::of(rt);
    result<executable*> e = graphs.resolve_exec(graphExec);
    if (!e.ok()) return e.take_error();
    result<soma::detail::stream_object*> s = rt.streams().resolve(handle_of(stream));
    if (!s.ok()) return s.take_error();
    return e.value()->upload(*s.value());
  });
}

somaError_t somaGraphLaunch(somaGraphExec_t graphExec, somaStream_t stream) {
  return with_runtime([&](runtime& rt) -> status {
    graph_service& graphs = graph_service::of(rt);
    result<executable*> e = graphs.resolve_exec(graphExec);
    if (!e.ok()) return e.take_error();
    if (graphs.capture_of(handle_of(stream)) != nullptr) {
      return status(error_code::not_supported,
                    "somaGraphLaunch: launching into a capturing stream; soma does not capture "
                    "graph launches");
    }
    result<soma::detail::stream_object*> s = rt.streams().resolve(handle_of(stream));
    if (!s.ok()) return s.take_error();
    return e.value()->launch(*s.value());
  });
}

somaError_t somaGraphExecDestroy(somaGraphExec_t graphExec) {
  return with_runtime([&](runtime& rt) { return graph_service::of(rt).destroy_exec(graphExec); });
}

somaError_t somaGraphExecMemsetNodeSetParams(somaGraphExec_t graphExec, somaGraphNode_t node,
                                             const somaMemsetParams* memsetParams) {
  const char* call = "somaGraphExecMemsetNodeSetParams";
  return with_runtime([&](runtime& rt) -> status {
    if (status ok = check_memset(call, memsetParams); !ok.ok()) return ok;
    graph_service& graphs = graph_service::of(rt);
    result<executable*> e = graphs.resolve_exec(graphExec);
    if (!e.ok()) return e.take_error();
    result<soma::detail::graph::node*> n = graphs.resolve_node(node);
    if (!n.ok()) return n.take_error();
    return e.value()->set_memset(*n.value(), memsetParams->dst,
                                 static_cast<int>(memsetParams->value & 0xffU),
                                 memsetParams->width);
  });
}

somaError_t somaDeviceGraphMemTrim(int device) {
  return with_runtime([&](runtime& rt) -> status {
    if (status ok = rt.devices().check(device); !ok.ok()) return ok;
    return graph_service::of(rt).memory().trim(device);
  });
}

somaError_t somaDeviceGetGraphMemAttribute(int device, somaGraphMemAttributeType attr,
                                           void* value) {
  return with_runtime([&](runtime& rt) -> status {
    if (value == nullptr) return null_argument("somaDeviceGetGraphMemAttribute", "value");
    if (status ok = rt.devices().check(device); !ok.ok()) return ok;
    result<std::uint64_t> v = graph_service::of(rt).memory().attribute(device, raw_value(attr));
    if (!v.ok()) return v.take_error();
    const std::uint64_t out = v.value();
    std::memcpy(value, &out, sizeof out);
    return status::success();
  });
}

somaError_t somaDeviceSetGraphMemAttribute(int device, somaGraphMemAttributeType attr,
                                           void* value) {
  return with_runtime([&](runtime& rt) -> status {
    const char* call = "somaDeviceSetGraphMemAttribute";
    if (value == nullptr) return null_argument(call, "value");
    if (status ok = rt.devices().check(device); !ok.ok()) return ok;
    std::uint64_t v = 0;
    std::memcpy(&v, value, sizeof v);
    if (v != 0) {
      return status(error_code::invalid_value, std::string(call) + ": value " + std::to_string(v) +
                                                   "; a high watermark can only be reset, to 0");
    }
    return graph_service::of(rt).memory().reset_attribute(device, raw_value(attr));
  });
}

}  // extern "C"
