/**
 * @file soma/cxx/graph.hpp
 * @brief Part of soma's C++ API (include <soma/soma.hpp>): graphs with memory nodes (S15).
 *
 * soma::graph owns a somaGraph_t and adds nodes; soma::graph_exec owns an executable graph;
 * soma::capture_scope captures a stream's work into a graph for the length of a scope.
 * docs/graphs.md has the rules.
 */
#ifndef SOMA_CXX_GRAPH_HPP
#define SOMA_CXX_GRAPH_HPP

#include <soma/cxx/stream.hpp>

#include <cstddef>
#include <initializer_list>
#include <utility>

namespace soma {

/** A node of a graph; valid while its graph lives. */
using graph_node = somaGraphNode_t;

/** An owned graph. Move-only; the destructor destroys the graph (executables made from it stay
 *  valid). Not thread-safe: use one graph from one thread at a time. */
class graph {
 public:
  using after = std::initializer_list<graph_node>;

  graph() { check(somaGraphCreate(&handle_, 0)); }
  /** Takes ownership of a graph from somaStreamEndCapture. */
  explicit graph(somaGraph_t owned) noexcept : handle_(owned) {}
  ~graph() {
    if (handle_ != nullptr) (void)somaGraphDestroy(handle_);
  }
  graph(graph&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  graph& operator=(graph&& other) noexcept {
    if (this != &other) {
      if (handle_ != nullptr) (void)somaGraphDestroy(handle_);
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  graph(const graph&) = delete;
  graph& operator=(const graph&) = delete;

  somaGraph_t handle() const noexcept { return handle_; }

  /** An alloc node of bytes on device; *address receives the address, fixed for every launch. */
  graph_node add_alloc(std::size_t bytes, void** address, after dependencies = {},
                       int device_ordinal = device::current().ordinal()) {
    somaMemAllocNodeParams params{};
    params.poolProps.allocType = somaMemAllocationTypePinned;
    params.poolProps.location.type = somaMemLocationTypeDevice;
    params.poolProps.location.id = device_ordinal;
    params.bytesize = bytes;
    graph_node node = nullptr;
    check(somaGraphAddMemAllocNode(&node, handle_, dependencies.begin(), dependencies.size(),
                                   &params));
    *address = params.dptr;
    return node;
  }
  graph_node add_free(void* address, after dependencies = {}) {
    graph_node node = nullptr;
    check(somaGraphAddMemFreeNode(&node, handle_, dependencies.begin(), dependencies.size(),
                                  address));
    return node;
  }
  graph_node add_memset(void* destination, int value, std::size_t bytes, after dependencies = {}) {
    somaMemsetParams params{};
    params.dst = destination;
    params.value = static_cast<unsigned>(value) & 0xffU;
    params.elementSize = 1;
    params.width = bytes;
    params.height = 1;
    graph_node node = nullptr;
    check(
        somaGraphAddMemsetNode(&node, handle_, dependencies.begin(), dependencies.size(), &params));
    return node;
  }
  graph_node add_memcpy(void* destination, const void* source, std::size_t bytes,
                        after dependencies = {}) {
    graph_node node = nullptr;
    check(somaGraphAddMemcpyNode1D(&node, handle_, dependencies.begin(), dependencies.size(),
                                   destination, source, bytes, somaMemcpyDefault));
    return node;
  }
  /** fn(user_data) on a host thread once the dependencies ran, at every launch. */
  graph_node add_host(somaHostFn_t fn, void* user_data, after dependencies = {}) {
    const somaHostNodeParams params{fn, user_data};
    graph_node node = nullptr;
    check(somaGraphAddHostNode(&node, handle_, dependencies.begin(), dependencies.size(), &params));
    return node;
  }
  graph_node add_empty(after dependencies = {}) {
    graph_node node = nullptr;
    check(somaGraphAddEmptyNode(&node, handle_, dependencies.begin(), dependencies.size()));
    return node;
  }
  /** The edge from -> to. */
  void add_dependency(graph_node from, graph_node to) {
    check(somaGraphAddDependencies(handle_, &from, &to, 1));
  }

 private:
  somaGraph_t handle_ = nullptr;
};

/** An owned executable graph. Move-only; the destructor destroys it (launched work still runs;
 *  allocations its launches left unfreed stay live). */
class graph_exec {
 public:
  /** flags: somaGraphInstantiateFlag* (AutoFreeOnLaunch, Upload). */
  explicit graph_exec(const graph& source, unsigned long long flags = 0) {
    check(somaGraphInstantiate(&handle_, source.handle(), flags));
  }
  ~graph_exec() {
    if (handle_ != nullptr) (void)somaGraphExecDestroy(handle_);
  }
  graph_exec(graph_exec&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  graph_exec& operator=(graph_exec&& other) noexcept {
    if (this != &other) {
      if (handle_ != nullptr) (void)somaGraphExecDestroy(handle_);
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  graph_exec(const graph_exec&) = delete;
  graph_exec& operator=(const graph_exec&) = delete;

  somaGraphExec_t handle() const noexcept { return handle_; }
  void launch(stream_ref s) const { check(somaGraphLaunch(handle_, s.handle())); }
  void upload(stream_ref s) const { check(somaGraphUpload(handle_, s.handle())); }

 private:
  somaGraphExec_t handle_ = nullptr;
};

/** Captures a stream's work from construction to end(): allocations, frees, memsets, copies and
 *  host functions on it become nodes instead of running. Leaving the scope without end() ends
 *  the capture and drops its graph. */
class capture_scope {
 public:
  explicit capture_scope(stream_ref s, somaStreamCaptureMode mode = somaStreamCaptureModeGlobal)
      : stream_(s) {
    check(somaStreamBeginCapture(stream_.handle(), mode));
    active_ = true;
  }
  ~capture_scope() {
    if (active_) {
      somaGraph_t dropped = nullptr;
      if (somaStreamEndCapture(stream_.handle(), &dropped) == somaSuccess && dropped != nullptr)
        (void)somaGraphDestroy(dropped);
    }
  }
  capture_scope(const capture_scope&) = delete;
  capture_scope& operator=(const capture_scope&) = delete;

  /** Ends the capture and returns what it recorded. */
  graph end() {
    active_ = false;
    somaGraph_t made = nullptr;
    check(somaStreamEndCapture(stream_.handle(), &made));
    return graph(made);
  }

 private:
  stream_ref stream_;
  bool active_ = false;
};

}  // namespace soma

#endif  // SOMA_CXX_GRAPH_HPP
