// The graph layer's entry points for the C API (S15): graphs, nodes, executables, stream
// capture and the device graph pool, with handles checked before they are used.
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "graph/graph_exec.hpp"
#include "graph/graph_memory.hpp"
#include "graph/graph_model.hpp"
#include "graph/node_builder.hpp"
#include "graph/stream_capture.hpp"
#include "runtime/runtime.hpp"

namespace soma::detail::graph {

/// somaMemAllocNodeParams as the C API received it.
struct alloc_request {
  int allocation_type = 0;
  unsigned handle_types = 0;
  int location_type = 0;
  int location_id = 0;
  bool extra_properties = false;  ///< win32 attributes, max size, usage or reserved bytes set
  const access_request* access = nullptr;
  std::size_t access_count = 0;
  std::size_t bytes = 0;
};

class graph_service {
 public:
  /// The process's graph layer, made on first use (it installs graph memory in the runtime).
  static graph_service& of(runtime& rt);
  /// Whether any stream captures now: the C API's fast test before asking capture_of.
  static bool any_capture() noexcept {
    return active_captures_.load(std::memory_order_acquire) > 0;
  }

  // -- graphs and nodes
  graph_model* create_graph();
  /// Destroys the graph behind a C API handle (invalid_value if it is not live).
  status destroy_graph(const void* handle);
  result<graph_model*> resolve(const void* graph) const;
  result<node*> resolve_node(const void* n) const;
  result<std::vector<node*>> resolve_dependencies(graph_model& g, const void* const* list,
                                                  std::size_t count, const char* call) const;
  result<node*> add_alloc(graph_model& g, std::span<node* const> after, const alloc_request& r);
  node_builder& builder() { return builder_; }
  /// Registers a node the builder added, so its handle resolves.
  result<node*> track(result<node*> added);
  status add_edges(graph_model& g, const void* const* from, const void* const* to,
                   std::size_t count);

  // -- executables
  result<executable*> instantiate(graph_model& g, unsigned long long flags);
  /// Destroys the executable behind a C API handle (invalid_value if it is not live).
  status destroy_exec(const void* handle);
  result<executable*> resolve_exec(const void* e) const;

  // -- device graph pool
  graph_memory& memory() { return *memory_; }

  // -- capture (stream_capture.cpp)
  status begin_capture(std::uintptr_t stream, int mode);
  result<graph_model*> end_capture(std::uintptr_t stream);
  result<int> capture_status(std::uintptr_t stream);
  /// The capture stream belongs to, or null (no lock taken when none is active).
  stream_capture* capture_of(std::uintptr_t stream);
  /// An event recorded on a capturing stream: the capture and node, else null.
  std::pair<stream_capture*, std::size_t> captured_event(std::uintptr_t event);
  /// The event was recorded again outside any capture: it no longer joins one.
  void forget_captured_event(std::uintptr_t event);
  status capture_alloc(stream_capture& c, std::uintptr_t stream, void** out, std::size_t bytes,
                       std::uintptr_t pool);
  status capture_free(stream_capture& c, std::uintptr_t stream, void* pointer);
  status capture_memset(stream_capture& c, std::uintptr_t stream, void* destination, int value,
                        std::size_t bytes);
  status capture_memcpy(stream_capture& c, std::uintptr_t stream, void* destination,
                        const void* source, std::size_t bytes);
  status capture_host(stream_capture& c, std::uintptr_t stream, void (*function)(void*), void* data,
                      const runtime::host_access* accesses, std::size_t count);
  status capture_record(stream_capture& c, std::uintptr_t stream, std::uintptr_t event);
  /// somaStreamWaitEvent when the stream captures or the event was recorded in a capture;
  /// nullopt when neither (a plain wait).
  std::optional<status> capture_wait(std::uintptr_t stream, std::uintptr_t event);
  /// The stream is being destroyed: a capture it began ends and its graph is dropped; a capture
  /// it joined is invalidated. Keeps no capture alive without a stream to end it.
  void stream_destroyed(std::uintptr_t stream);
  /// A call that cannot be captured (synchronize, query) on a capturing stream: the capture is
  /// invalidated and the call refused; nullopt when the stream does not capture.
  std::optional<status> refuse_while_capturing(std::uintptr_t stream, const char* call);

 private:
  explicit graph_service(runtime& rt);
  status capture_node(
      stream_capture& c, std::uintptr_t stream,
      const std::function<result<node*>(graph_model&, std::span<node* const>)>& make);
  void end_capture_locked(stream_capture& c);
  /// Starts recording the native stream of s, which joins a capture, so users' kernels on it
  /// land in the graph; invalid_handle "<call>: the stream was destroyed" when it has none.
  status begin_native_capture_locked(stream_object& s, const char* call);
  /// Ends the native capture of m's stream and adds what it recorded (if anything) as m's next
  /// node, so users' kernels keep their place among soma's nodes.
  status close_native_segment_locked(stream_capture& c, stream_capture::member& m,
                                     backend::stream& queue, const char* call);

  runtime& runtime_;
  std::unique_ptr<graph_memory> memory_;
  node_builder builder_;

  mutable std::mutex mutex_;  // the sets and maps below
  std::unordered_set<const graph_model*> graphs_;
  std::unordered_set<const node*> nodes_;
  std::unordered_set<const executable*> execs_;
  std::unordered_map<std::uintptr_t, stream_capture*> capturing_;  // by stream handle
  std::unordered_map<std::uintptr_t, std::pair<stream_capture*, std::size_t>> captured_events_;
  std::vector<std::unique_ptr<stream_capture>> captures_;
  static inline std::atomic<int> active_captures_{0};
};

}  // namespace soma::detail::graph
