// A fake CUDA driver behind soma's driver_api table, so the cuda backend's logic (contexts,
// virtual memory bookkeeping, positions, completion markers, sticky errors) is tested on
// machines without a GPU. Streams are queues the test drains explicitly ("the GPU runs"),
// so it decides what has completed. Single-threaded: one fake at a time (install()).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backend/cuda/driver_api.hpp"

namespace fake_cuda {

namespace cu = soma::detail::backend::cuda;

struct event_state {
  int device = 0;
  std::uint64_t recorded = 0;   // generation of the latest record
  std::uint64_t completed = 0;  // generation the GPU has reached
};

struct operation {
  enum kind_t { host_function, record, wait, work } kind = work;
  cu::CUhostFn function = nullptr;
  void* data = nullptr;
  event_state* event = nullptr;
  std::uint64_t generation = 0;
};

struct graph_state;

/// A node of a fake graph, with what it was added with.
struct graph_node {
  enum kind_t {
    empty_node,
    memset_node,
    memcpy_node,
    host_node,
    record_node,
    wait_node,
    child_node
  };
  kind_t kind = empty_node;
  std::vector<graph_node*> dependencies;
  cu::CUDA_MEMSET_NODE_PARAMS memset{};
  cu::CUDA_MEMCPY3D memcpy{};
  cu::CUDA_HOST_NODE_PARAMS host{};
  cu::CUcontext context = nullptr;  // memset, memcpy
  event_state* event = nullptr;     // event_record, event_wait
  graph_state* child = nullptr;     // child: the copy
};

struct graph_state {
  int device = 0;  // whose context was current at creation
  std::vector<std::unique_ptr<graph_node>> nodes;
  bool destroyed = false;
};

struct exec_state {
  graph_state* graph = nullptr;
  /// The nodes as instantiated (a memset's parameters may be changed here).
  std::vector<graph_node> nodes;
  bool destroyed = false;
  int launches = 0;
  int uploads = 0;
};

struct stream_state {
  int device = 0;
  std::deque<operation> queue;
  graph_state* capture = nullptr;  // between cuStreamBeginCapture and cuStreamEndCapture
};

struct driver_state {
  int device_count = 2;
  std::size_t device_memory_bytes = std::size_t{64} << 20;
  std::size_t granularity_bytes = std::size_t{2} << 20;
  std::size_t exportable_granularity_bytes = std::size_t{2} << 20;
  bool peers_can_access = true;
  bool error_names_known = true;  // false: cuGetErrorName fails, as in the stub library

  std::vector<std::size_t> used_bytes = std::vector<std::size_t>(8, 0);
  std::map<cu::CUdeviceptr, std::size_t> reservations;  // base -> bytes
  cu::CUdeviceptr next_address = 0x7000'0000'0000ull;
  struct allocation {
    int device = 0;
    std::size_t bytes = 0;
    int handle_types = 0;
  };
  std::map<cu::CUmemGenericAllocationHandle, allocation> allocations;
  cu::CUmemGenericAllocationHandle next_handle = 1;
  struct mapping {
    std::size_t bytes = 0;
    cu::CUmemGenericAllocationHandle handle = 0;
    std::map<int, int> access;  // device -> CU_MEM_ACCESS_FLAGS_*
  };
  std::map<cu::CUdeviceptr, mapping> mappings;
  int unmap_calls = 0;
  bool unmap_one_mapping_only = false;  // a driver that refuses a range of several mappings
  std::map<int, cu::CUmemGenericAllocationHandle> exported;  // fd -> handle

  std::vector<std::unique_ptr<stream_state>> streams;
  std::set<stream_state*> destroyed_streams;
  std::vector<std::unique_ptr<event_state>> events;
  int live_events = 0;
  int event_records = 0;
  int stream_queries = 0;
  int context_synchronizes = 0;
  int destroyed_stream_calls = 0;  // queries, records, synchronizes on a destroyed CUstream
  int failing_event_records = 0;   // the next this many cuEventRecord calls fail
  int retained_contexts = 0;
  int context_errors = 0;   // calls made without the context they need
  int context_queries = 0;  // cuCtxGetCurrent calls
  // A driver that refuses a record or a stream wait unless the stream's context is current
  // (CUDA_ERROR_INVALID_CONTEXT). The real one takes the context from the stream (the default).
  bool records_need_current_context = false;
  int refused_without_context = 0;  // records and waits refused so
  std::vector<std::unique_ptr<graph_state>> graphs;
  std::vector<std::unique_ptr<exec_state>> execs;
  std::vector<std::string> graph_calls;  // graph and capture entry points, in call order
  int capture_errors = 0;  // calls a capturing stream refuses (marker records, queries)
  cu::CUresult fail_graph_call = cu::CUDA_SUCCESS;  // returned by the next graph call instead
  int live_graphs() const {
    int live = 0;
    for (const auto& g : graphs) live += g->destroyed ? 0 : 1;
    return live;
  }
  int live_execs() const {
    int live = 0;
    for (const auto& e : execs) live += e->destroyed ? 0 : 1;
    return live;
  }

  /// The GPU runs up to `count` operations of s, stopping at an unsatisfied wait.
  /// Returns how many ran.
  int run(stream_state* s, int count = 1 << 30) {
    int ran = 0;
    while (ran < count && !s->queue.empty()) {
      operation op = s->queue.front();
      if (op.kind == operation::wait && op.event->completed < op.generation) break;
      s->queue.pop_front();
      ++ran;
      if (op.kind == operation::record && op.event->completed < op.generation)
        op.event->completed = op.generation;
      if (op.kind == operation::host_function) op.function(op.data);
    }
    return ran;
  }
  /// Runs every stream until nothing can make progress.
  void run_all() {
    for (bool progress = true; progress;) {
      progress = false;
      for (const auto& s : streams) progress = run(s.get()) > 0 || progress;
    }
  }
};

inline driver_state* state = nullptr;
inline thread_local cu::CUcontext current_context = nullptr;

inline cu::CUcontext context_of(int device) {
  return reinterpret_cast<cu::CUcontext>(std::uintptr_t{0x1000} +
                                         static_cast<std::uintptr_t>(device));
}
/// The device whose context is current, or -1 (and a context error is counted).
inline int current_device() {
  const auto value = reinterpret_cast<std::uintptr_t>(current_context);
  if (value < 0x1000 || value >= 0x1000 + static_cast<std::uintptr_t>(state->device_count)) {
    ++state->context_errors;
    return -1;
  }
  return static_cast<int>(value - 0x1000);
}
inline stream_state* as_stream(cu::CUstream s) { return reinterpret_cast<stream_state*>(s); }
inline event_state* as_event(cu::CUevent e) { return reinterpret_cast<event_state*>(e); }
/// Under records_need_current_context: false (and counted) if s's context is not current.
inline bool has_stream_context(cu::CUstream s) {
  if (!state->records_need_current_context || current_context == context_of(as_stream(s)->device))
    return true;
  ++state->refused_without_context;
  return false;
}

// ---- entry points -----------------------------------------------------------------------
inline cu::CUresult init(unsigned) { return cu::CUDA_SUCCESS; }
inline cu::CUresult driver_version(int* v) {
  *v = 13000;
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult error_name(cu::CUresult r, const char** name) {
  if (!state->error_names_known) return cu::CUDA_ERROR_STUB_LIBRARY;
  *name = r == cu::CUDA_ERROR_OUT_OF_MEMORY   ? "CUDA_ERROR_OUT_OF_MEMORY"
          : r == cu::CUDA_ERROR_INVALID_VALUE ? "CUDA_ERROR_INVALID_VALUE"
                                              : "CUDA_ERROR_FAKE";
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult error_string(cu::CUresult, const char** text) {
  if (!state->error_names_known) return cu::CUDA_ERROR_STUB_LIBRARY;
  *text = "fake driver text";
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult device_count(int* n) {
  *n = state->device_count;
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult device_get(cu::CUdevice* d, int ordinal) {
  *d = ordinal;
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult device_name(char* name, int length, cu::CUdevice d) {
  std::snprintf(name, static_cast<std::size_t>(length), "Fake GPU %d", d);
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult total_mem(std::size_t* bytes, cu::CUdevice) {
  *bytes = state->device_memory_bytes;
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult attribute(int* value, int attribute, cu::CUdevice) {
  *value = attribute == cu::CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES ? 9 : 1;
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult can_access_peer(int* can, cu::CUdevice, cu::CUdevice) {
  *can = state->peers_can_access ? 1 : 0;
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult retain(cu::CUcontext* c, cu::CUdevice d) {
  ++state->retained_contexts;
  *c = context_of(d);
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult release_context(cu::CUdevice) {
  --state->retained_contexts;
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult get_current(cu::CUcontext* c) {
  ++state->context_queries;
  *c = current_context;
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult set_current(cu::CUcontext c) {
  current_context = c;
  return cu::CUDA_SUCCESS;
}

inline cu::CUresult mem_info(std::size_t* free_bytes, std::size_t* total_bytes) {
  const int d = current_device();
  if (d < 0) return cu::CUDA_ERROR_INVALID_CONTEXT;
  *total_bytes = state->device_memory_bytes;
  *free_bytes = state->device_memory_bytes - state->used_bytes[static_cast<std::size_t>(d)];
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult granularity(std::size_t* g, const cu::CUmemAllocationProp* prop, int option) {
  *g = prop->requestedHandleTypes != 0 && option == cu::CU_MEM_ALLOC_GRANULARITY_MINIMUM
           ? state->exportable_granularity_bytes
           : state->granularity_bytes;
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult reserve(cu::CUdeviceptr* address, std::size_t bytes, std::size_t alignment,
                            cu::CUdeviceptr, unsigned long long) {
  if (bytes == 0 || bytes % state->granularity_bytes != 0) return cu::CUDA_ERROR_INVALID_VALUE;
  if (bytes > (std::size_t{1} << 40)) return cu::CUDA_ERROR_OUT_OF_MEMORY;
  state->next_address = (state->next_address + alignment - 1) / alignment * alignment;
  *address = state->next_address;
  state->reservations[*address] = bytes;
  state->next_address += bytes;
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult address_free(cu::CUdeviceptr address, std::size_t bytes) {
  auto it = state->reservations.find(address);
  if (it == state->reservations.end() || it->second != bytes) return cu::CUDA_ERROR_INVALID_VALUE;
  state->reservations.erase(it);
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult create(cu::CUmemGenericAllocationHandle* handle, std::size_t bytes,
                           const cu::CUmemAllocationProp* prop, unsigned long long) {
  if (prop->type != cu::CU_MEM_ALLOCATION_TYPE_PINNED ||
      prop->location.type != cu::CU_MEM_LOCATION_TYPE_DEVICE ||
      bytes % state->granularity_bytes != 0)
    return cu::CUDA_ERROR_INVALID_VALUE;
  std::size_t& used = state->used_bytes[static_cast<std::size_t>(prop->location.id)];
  if (used + bytes > state->device_memory_bytes) return cu::CUDA_ERROR_OUT_OF_MEMORY;
  used += bytes;
  *handle = state->next_handle++;
  state->allocations[*handle] = {prop->location.id, bytes, prop->requestedHandleTypes};
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult release(cu::CUmemGenericAllocationHandle handle) {
  auto it = state->allocations.find(handle);
  if (it == state->allocations.end()) return cu::CUDA_ERROR_INVALID_VALUE;
  state->used_bytes[static_cast<std::size_t>(it->second.device)] -= it->second.bytes;
  state->allocations.erase(it);
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult map(cu::CUdeviceptr address, std::size_t bytes, std::size_t offset,
                        cu::CUmemGenericAllocationHandle handle, unsigned long long) {
  auto a = state->allocations.find(handle);
  if (a == state->allocations.end() || offset != 0 || bytes != a->second.bytes ||
      state->mappings.count(address) != 0)
    return cu::CUDA_ERROR_INVALID_VALUE;
  state->mappings[address] = {bytes, handle, {}};
  return cu::CUDA_SUCCESS;
}
// As the driver: the range may span several mappings, end to end, and must unmap them whole
// (NVIDIA's vectorAddMMAP sample unmaps its per-device stripes in one call).
inline cu::CUresult unmap(cu::CUdeviceptr address, std::size_t bytes) {
  ++state->unmap_calls;
  std::size_t spanned = 0;
  for (cu::CUdeviceptr at = address; at < address + bytes; ++spanned) {
    auto it = state->mappings.find(at);
    if (it == state->mappings.end() || at + it->second.bytes > address + bytes)
      return cu::CUDA_ERROR_INVALID_VALUE;
    at += it->second.bytes;
  }
  if (spanned > 1 && state->unmap_one_mapping_only) return cu::CUDA_ERROR_INVALID_VALUE;
  state->mappings.erase(state->mappings.lower_bound(address),
                        state->mappings.lower_bound(address + bytes));
  return cu::CUDA_SUCCESS;
}
// As the driver: the range may span several mappings, end to end, and must be mapped whole.
inline cu::CUresult set_access(cu::CUdeviceptr address, std::size_t bytes,
                               const cu::CUmemAccessDesc* desc, std::size_t count) {
  for (cu::CUdeviceptr at = address; at < address + bytes;) {
    auto it = state->mappings.find(at);
    if (it == state->mappings.end() || at + it->second.bytes > address + bytes)
      return cu::CUDA_ERROR_INVALID_VALUE;
    at += it->second.bytes;
  }
  for (cu::CUdeviceptr at = address; at < address + bytes;) {
    auto it = state->mappings.find(at);
    for (std::size_t i = 0; i < count; ++i) it->second.access[desc[i].location.id] = desc[i].flags;
    at += it->second.bytes;
  }
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult export_handle(void* shareable, cu::CUmemGenericAllocationHandle handle,
                                  int type, unsigned long long) {
  auto a = state->allocations.find(handle);
  if (a == state->allocations.end() || type != cu::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
      (a->second.handle_types & type) == 0)
    return cu::CUDA_ERROR_INVALID_VALUE;
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  state->exported[fd] = handle;
  *static_cast<int*>(shareable) = fd;
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult import_handle(cu::CUmemGenericAllocationHandle* handle, void* os_handle, int) {
  auto it = state->exported.find(static_cast<int>(reinterpret_cast<std::intptr_t>(os_handle)));
  if (it == state->exported.end()) return cu::CUDA_ERROR_INVALID_VALUE;
  *handle = it->second;
  return cu::CUDA_SUCCESS;
}

inline cu::CUresult stream_create(cu::CUstream* s, unsigned) {
  const int d = current_device();
  if (d < 0) return cu::CUDA_ERROR_INVALID_CONTEXT;
  state->streams.push_back(std::make_unique<stream_state>());
  state->streams.back()->device = d;
  *s = reinterpret_cast<cu::CUstream>(state->streams.back().get());
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult stream_destroy(cu::CUstream s) {
  state->destroyed_streams.insert(as_stream(s));  // its queued work still runs
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult stream_context(cu::CUstream s, cu::CUcontext* c) {
  for (const auto& known : state->streams) {
    if (known.get() == as_stream(s)) {
      *c = context_of(known->device);
      return cu::CUDA_SUCCESS;
    }
  }
  return cu::CUDA_ERROR_INVALID_HANDLE;
}
/// What a real driver answers for calls a capture forbids (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED).
inline constexpr cu::CUresult capture_unsupported = 900;
/// A call naming a destroyed CUstream: counted (the driver's answer would be undefined).
inline bool destroyed(cu::CUstream s) {
  if (state->destroyed_streams.count(as_stream(s)) == 0) return false;
  ++state->destroyed_stream_calls;
  return true;
}
inline cu::CUresult context_synchronize() {
  if (current_device() < 0) return cu::CUDA_ERROR_INVALID_CONTEXT;
  ++state->context_synchronizes;
  state->run_all();
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult stream_synchronize(cu::CUstream s) {
  if (destroyed(s)) return cu::CUDA_ERROR_INVALID_HANDLE;
  if (as_stream(s)->capture != nullptr) {
    ++state->capture_errors;
    return capture_unsupported;
  }
  state->run_all();
  return as_stream(s)->queue.empty() ? cu::CUDA_SUCCESS : cu::CUDA_ERROR_LAUNCH_FAILED;
}
inline cu::CUresult stream_query(cu::CUstream s) {
  ++state->stream_queries;
  if (destroyed(s)) return cu::CUDA_ERROR_INVALID_HANDLE;
  if (as_stream(s)->capture != nullptr) {
    ++state->capture_errors;
    return capture_unsupported;
  }
  return as_stream(s)->queue.empty() ? cu::CUDA_SUCCESS : cu::CUDA_ERROR_NOT_READY;
}
inline cu::CUresult stream_wait(cu::CUstream s, cu::CUevent e, unsigned) {
  if (!has_stream_context(s)) return cu::CUDA_ERROR_INVALID_CONTEXT;
  as_stream(s)->queue.push_back(
      {operation::wait, nullptr, nullptr, as_event(e), as_event(e)->recorded});
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult host_function(cu::CUstream s, cu::CUhostFn f, void* data) {
  as_stream(s)->queue.push_back({operation::host_function, f, data, nullptr, 0});
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult memset_async(cu::CUdeviceptr destination, unsigned char value,
                                 std::size_t bytes, cu::CUstream s) {
  if (graph_state* g = as_stream(s)->capture) {  // captured: a memset node after the last one
    auto node = std::make_unique<graph_node>();
    node->kind = graph_node::memset_node;
    node->memset.dst = destination;
    node->memset.value = value;
    node->memset.width = bytes;
    if (!g->nodes.empty()) node->dependencies.push_back(g->nodes.back().get());
    g->nodes.push_back(std::move(node));
    return cu::CUDA_SUCCESS;
  }
  as_stream(s)->queue.push_back({});
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult memcpy_async(cu::CUdeviceptr, cu::CUdeviceptr, std::size_t, cu::CUstream s) {
  as_stream(s)->queue.push_back({});
  return cu::CUDA_SUCCESS;
}
/// Value operations are device work the fake treats as already satisfied.
inline cu::CUresult wait_value(cu::CUstream s, cu::CUdeviceptr, unsigned, unsigned) {
  as_stream(s)->queue.push_back({});
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult write_value(cu::CUstream s, cu::CUdeviceptr address, unsigned value, unsigned) {
  *reinterpret_cast<unsigned*>(address) = value;  // at issue: the fake runs work in order
  as_stream(s)->queue.push_back({});
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult host_alloc(void** pointer, std::size_t bytes, unsigned) {
  if (current_device() < 0) return cu::CUDA_ERROR_INVALID_CONTEXT;
  *pointer = std::malloc(bytes);
  return *pointer != nullptr ? cu::CUDA_SUCCESS : cu::CUDA_ERROR_OUT_OF_MEMORY;
}
inline cu::CUresult free_host(void* pointer) {
  std::free(pointer);
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult event_create(cu::CUevent* e, unsigned flags) {
  const int d = current_device();
  if (d < 0 || (flags & cu::CU_EVENT_DISABLE_TIMING) == 0) return cu::CUDA_ERROR_INVALID_CONTEXT;
  state->events.push_back(std::make_unique<event_state>());
  state->events.back()->device = d;
  ++state->live_events;
  *e = reinterpret_cast<cu::CUevent>(state->events.back().get());
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult event_destroy(cu::CUevent) {
  --state->live_events;
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult event_record(cu::CUevent e, cu::CUstream s) {
  if (destroyed(s)) return cu::CUDA_ERROR_INVALID_HANDLE;
  // As in CUDA: an event records only on a stream of its own device.
  if (as_event(e)->device != as_stream(s)->device) return cu::CUDA_ERROR_INVALID_HANDLE;
  if (!has_stream_context(s)) return cu::CUDA_ERROR_INVALID_CONTEXT;
  if (as_stream(s)->capture != nullptr) {  // soma never records on a capturing stream
    ++state->capture_errors;
    return capture_unsupported;
  }
  if (state->failing_event_records > 0) {
    --state->failing_event_records;
    return cu::CUDA_ERROR_LAUNCH_FAILED;
  }
  ++state->event_records;
  const std::uint64_t generation = ++as_event(e)->recorded;
  as_stream(s)->queue.push_back({operation::record, nullptr, nullptr, as_event(e), generation});
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult event_query(cu::CUevent e) {
  return as_event(e)->completed >= as_event(e)->recorded ? cu::CUDA_SUCCESS
                                                         : cu::CUDA_ERROR_NOT_READY;
}
inline cu::CUresult event_synchronize(cu::CUevent e) {
  state->run_all();
  return event_query(e) == cu::CUDA_SUCCESS ? cu::CUDA_SUCCESS : cu::CUDA_ERROR_LAUNCH_FAILED;
}

// ---- graphs and capture ---------------------------------------------------------------------
inline graph_state* as_graph(cu::CUgraph g) { return reinterpret_cast<graph_state*>(g); }
inline graph_node* as_node(cu::CUgraphNode n) { return reinterpret_cast<graph_node*>(n); }
inline exec_state* as_exec(cu::CUgraphExec e) { return reinterpret_cast<exec_state*>(e); }

/// Notes the call; the failure a test asked for, once, else success.
inline cu::CUresult graph_call(const char* name) {
  state->graph_calls.push_back(name);
  const cu::CUresult failure = state->fail_graph_call;
  state->fail_graph_call = cu::CUDA_SUCCESS;
  return failure;
}

inline cu::CUresult graph_create(cu::CUgraph* g, unsigned) {
  if (const cu::CUresult r = graph_call("cuGraphCreate"); r != cu::CUDA_SUCCESS) return r;
  const int d = current_device();
  if (d < 0) return cu::CUDA_ERROR_INVALID_CONTEXT;
  state->graphs.push_back(std::make_unique<graph_state>());
  state->graphs.back()->device = d;
  *g = reinterpret_cast<cu::CUgraph>(state->graphs.back().get());
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult graph_destroy(cu::CUgraph g) {
  state->graph_calls.push_back("cuGraphDestroy");
  if (as_graph(g)->destroyed) return cu::CUDA_ERROR_INVALID_VALUE;
  as_graph(g)->destroyed = true;
  return cu::CUDA_SUCCESS;
}
/// Adds node to g after dependencies (which must be g's, without duplicates, as the driver
/// demands).
inline cu::CUresult add_node(cu::CUgraphNode* out, cu::CUgraph g, const cu::CUgraphNode* deps,
                             std::size_t count, std::unique_ptr<graph_node> node) {
  for (std::size_t i = 0; i < count; ++i) {
    graph_node* d = as_node(deps[i]);
    bool ours = false;
    for (const auto& n : as_graph(g)->nodes) ours = ours || n.get() == d;
    for (std::size_t j = 0; j < i; ++j)
      if (deps[j] == deps[i]) return cu::CUDA_ERROR_INVALID_VALUE;
    if (!ours) return cu::CUDA_ERROR_INVALID_VALUE;
    node->dependencies.push_back(d);
  }
  *out = reinterpret_cast<cu::CUgraphNode>(node.get());
  as_graph(g)->nodes.push_back(std::move(node));
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult add_empty(cu::CUgraphNode* out, cu::CUgraph g, const cu::CUgraphNode* deps,
                              std::size_t count) {
  if (const cu::CUresult r = graph_call("cuGraphAddEmptyNode"); r != cu::CUDA_SUCCESS) return r;
  return add_node(out, g, deps, count, std::make_unique<graph_node>());
}
inline cu::CUresult add_memset(cu::CUgraphNode* out, cu::CUgraph g, const cu::CUgraphNode* deps,
                               std::size_t count, const cu::CUDA_MEMSET_NODE_PARAMS* params,
                               cu::CUcontext context) {
  if (const cu::CUresult r = graph_call("cuGraphAddMemsetNode"); r != cu::CUDA_SUCCESS) return r;
  auto node = std::make_unique<graph_node>();
  node->kind = graph_node::memset_node;
  node->memset = *params;
  node->context = context;
  return add_node(out, g, deps, count, std::move(node));
}
inline cu::CUresult add_memcpy(cu::CUgraphNode* out, cu::CUgraph g, const cu::CUgraphNode* deps,
                               std::size_t count, const cu::CUDA_MEMCPY3D* params,
                               cu::CUcontext context) {
  if (const cu::CUresult r = graph_call("cuGraphAddMemcpyNode"); r != cu::CUDA_SUCCESS) return r;
  auto node = std::make_unique<graph_node>();
  node->kind = graph_node::memcpy_node;
  node->memcpy = *params;
  node->context = context;
  return add_node(out, g, deps, count, std::move(node));
}
inline cu::CUresult add_host(cu::CUgraphNode* out, cu::CUgraph g, const cu::CUgraphNode* deps,
                             std::size_t count, const cu::CUDA_HOST_NODE_PARAMS* params) {
  if (const cu::CUresult r = graph_call("cuGraphAddHostNode"); r != cu::CUDA_SUCCESS) return r;
  auto node = std::make_unique<graph_node>();
  node->kind = graph_node::host_node;
  node->host = *params;
  return add_node(out, g, deps, count, std::move(node));
}
inline cu::CUresult add_event_node(graph_node::kind_t kind, cu::CUgraphNode* out, cu::CUgraph g,
                                   const cu::CUgraphNode* deps, std::size_t count, cu::CUevent e) {
  if (as_event(e)->device != as_graph(g)->device)
    return cu::CUDA_ERROR_INVALID_HANDLE;  // the fake's graphs keep to one device
  auto node = std::make_unique<graph_node>();
  node->kind = kind;
  node->event = as_event(e);
  return add_node(out, g, deps, count, std::move(node));
}
inline cu::CUresult add_event_record(cu::CUgraphNode* out, cu::CUgraph g,
                                     const cu::CUgraphNode* deps, std::size_t count,
                                     cu::CUevent e) {
  if (const cu::CUresult r = graph_call("cuGraphAddEventRecordNode"); r != cu::CUDA_SUCCESS)
    return r;
  return add_event_node(graph_node::record_node, out, g, deps, count, e);
}
inline cu::CUresult add_event_wait(cu::CUgraphNode* out, cu::CUgraph g, const cu::CUgraphNode* deps,
                                   std::size_t count, cu::CUevent e) {
  if (const cu::CUresult r = graph_call("cuGraphAddEventWaitNode"); r != cu::CUDA_SUCCESS) return r;
  return add_event_node(graph_node::wait_node, out, g, deps, count, e);
}
inline cu::CUresult add_child(cu::CUgraphNode* out, cu::CUgraph g, const cu::CUgraphNode* deps,
                              std::size_t count, cu::CUgraph child) {
  if (const cu::CUresult r = graph_call("cuGraphAddChildGraphNode"); r != cu::CUDA_SUCCESS)
    return r;
  if (as_graph(child)->destroyed) return cu::CUDA_ERROR_INVALID_VALUE;
  // Copied in, as the driver does (dependencies inside the copy are not kept: it runs in order).
  state->graphs.push_back(std::make_unique<graph_state>());
  graph_state* copy = state->graphs.back().get();
  copy->device = as_graph(child)->device;
  for (const auto& n : as_graph(child)->nodes) {
    copy->nodes.push_back(std::make_unique<graph_node>(*n));
    copy->nodes.back()->dependencies.clear();
  }
  auto node = std::make_unique<graph_node>();
  node->kind = graph_node::child_node;
  node->child = copy;
  return add_node(out, g, deps, count, std::move(node));
}
inline cu::CUresult graph_nodes(cu::CUgraph g, cu::CUgraphNode* nodes, std::size_t* count) {
  if (const cu::CUresult r = graph_call("cuGraphGetNodes"); r != cu::CUDA_SUCCESS) return r;
  if (nodes != nullptr) {
    for (std::size_t i = 0; i < *count && i < as_graph(g)->nodes.size(); ++i)
      nodes[i] = reinterpret_cast<cu::CUgraphNode>(as_graph(g)->nodes[i].get());
  }
  *count = as_graph(g)->nodes.size();
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult instantiate(cu::CUgraphExec* e, cu::CUgraph g, unsigned long long flags) {
  if (const cu::CUresult r = graph_call("cuGraphInstantiateWithFlags"); r != cu::CUDA_SUCCESS)
    return r;
  if (flags != 0 || as_graph(g)->destroyed) return cu::CUDA_ERROR_INVALID_VALUE;
  state->execs.push_back(std::make_unique<exec_state>());
  exec_state* exec = state->execs.back().get();
  exec->graph = as_graph(g);
  for (const auto& n : as_graph(g)->nodes) exec->nodes.push_back(*n);
  *e = reinterpret_cast<cu::CUgraphExec>(exec);
  return cu::CUDA_SUCCESS;
}
/// The GPU's view of a launch: each node's work queued in node order (a topological order).
inline void queue_nodes(stream_state* s, const std::vector<graph_node>& nodes) {
  for (const graph_node& n : nodes) {
    switch (n.kind) {
      case graph_node::host_node:
        s->queue.push_back({operation::host_function, n.host.fn, n.host.userData, nullptr, 0});
        break;
      case graph_node::record_node:
        ++state->event_records;
        s->queue.push_back({operation::record, nullptr, nullptr, n.event, ++n.event->recorded});
        break;
      case graph_node::wait_node:
        s->queue.push_back({operation::wait, nullptr, nullptr, n.event, n.event->recorded});
        break;
      case graph_node::child_node: {
        std::vector<graph_node> inner;
        for (const auto& c : n.child->nodes) inner.push_back(*c);
        queue_nodes(s, inner);
        break;
      }
      default:
        s->queue.push_back({});
    }
  }
}
inline cu::CUresult graph_launch(cu::CUgraphExec e, cu::CUstream s) {
  if (const cu::CUresult r = graph_call("cuGraphLaunch"); r != cu::CUDA_SUCCESS) return r;
  if (as_exec(e)->destroyed) return cu::CUDA_ERROR_INVALID_VALUE;
  ++as_exec(e)->launches;
  queue_nodes(as_stream(s), as_exec(e)->nodes);
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult graph_upload(cu::CUgraphExec e, cu::CUstream) {
  if (const cu::CUresult r = graph_call("cuGraphUpload"); r != cu::CUDA_SUCCESS) return r;
  ++as_exec(e)->uploads;
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult exec_destroy(cu::CUgraphExec e) {
  state->graph_calls.push_back("cuGraphExecDestroy");
  as_exec(e)->destroyed = true;
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult exec_memset(cu::CUgraphExec e, cu::CUgraphNode node,
                                const cu::CUDA_MEMSET_NODE_PARAMS* params, cu::CUcontext context) {
  if (const cu::CUresult r = graph_call("cuGraphExecMemsetNodeSetParams"); r != cu::CUDA_SUCCESS)
    return r;
  exec_state* exec = as_exec(e);
  for (std::size_t i = 0; i < exec->graph->nodes.size() && i < exec->nodes.size(); ++i) {
    if (exec->graph->nodes[i].get() != as_node(node)) continue;
    if (exec->nodes[i].kind != graph_node::memset_node) return cu::CUDA_ERROR_INVALID_VALUE;
    exec->nodes[i].memset = *params;
    exec->nodes[i].context = context;
    return cu::CUDA_SUCCESS;
  }
  return cu::CUDA_ERROR_INVALID_VALUE;  // not a node of the graph instantiated
}
inline cu::CUresult begin_capture(cu::CUstream s, int mode) {
  if (const cu::CUresult r = graph_call("cuStreamBeginCapture"); r != cu::CUDA_SUCCESS) return r;
  if (mode != cu::CU_STREAM_CAPTURE_MODE_RELAXED || as_stream(s)->capture != nullptr)
    return cu::CUDA_ERROR_INVALID_VALUE;
  state->graphs.push_back(std::make_unique<graph_state>());
  state->graphs.back()->device = as_stream(s)->device;
  as_stream(s)->capture = state->graphs.back().get();
  return cu::CUDA_SUCCESS;
}
inline cu::CUresult end_capture(cu::CUstream s, cu::CUgraph* g) {
  if (const cu::CUresult r = graph_call("cuStreamEndCapture"); r != cu::CUDA_SUCCESS) return r;
  if (as_stream(s)->capture == nullptr) return cu::CUDA_ERROR_INVALID_VALUE;
  *g = reinterpret_cast<cu::CUgraph>(as_stream(s)->capture);
  as_stream(s)->capture = nullptr;
  return cu::CUDA_SUCCESS;
}

/// The driver table over the fake. Requires: `state` points at the test's driver_state.
inline cu::driver_api make_driver() {
  cu::driver_api d;
  d.cuInit = init;
  d.cuDriverGetVersion = driver_version;
  d.cuGetErrorName = error_name;
  d.cuGetErrorString = error_string;
  d.cuDeviceGetCount = device_count;
  d.cuDeviceGet = device_get;
  d.cuDeviceGetName = device_name;
  d.cuDeviceTotalMem = total_mem;
  d.cuDeviceGetAttribute = attribute;
  d.cuDeviceCanAccessPeer = can_access_peer;
  d.cuDevicePrimaryCtxRetain = retain;
  d.cuDevicePrimaryCtxRelease = release_context;
  d.cuCtxGetCurrent = get_current;
  d.cuCtxSetCurrent = set_current;
  d.cuMemGetInfo = mem_info;
  d.cuMemGetAllocationGranularity = granularity;
  d.cuMemAddressReserve = reserve;
  d.cuMemAddressFree = address_free;
  d.cuMemCreate = create;
  d.cuMemRelease = release;
  d.cuMemMap = map;
  d.cuMemUnmap = unmap;
  d.cuMemSetAccess = set_access;
  d.cuMemExportToShareableHandle = export_handle;
  d.cuMemImportFromShareableHandle = import_handle;
  d.cuStreamCreate = stream_create;
  d.cuStreamDestroy = stream_destroy;
  d.cuStreamGetCtx = stream_context;
  d.cuStreamSynchronize = stream_synchronize;
  d.cuCtxSynchronize = context_synchronize;
  d.cuStreamQuery = stream_query;
  d.cuStreamWaitEvent = stream_wait;
  d.cuLaunchHostFunc = host_function;
  d.cuMemsetD8Async = memset_async;
  d.cuMemcpyAsync = memcpy_async;
  d.cuStreamWaitValue32 = wait_value;
  d.cuStreamWriteValue32 = write_value;
  d.cuMemHostAlloc = host_alloc;
  d.cuMemFreeHost = free_host;
  d.cuEventCreate = event_create;
  d.cuEventDestroy = event_destroy;
  d.cuEventRecord = event_record;
  d.cuEventQuery = event_query;
  d.cuEventSynchronize = event_synchronize;
  d.cuGraphCreate = graph_create;
  d.cuGraphDestroy = graph_destroy;
  d.cuGraphAddEmptyNode = add_empty;
  d.cuGraphAddMemsetNode = add_memset;
  d.cuGraphAddMemcpyNode = add_memcpy;
  d.cuGraphAddHostNode = add_host;
  d.cuGraphAddEventRecordNode = add_event_record;
  d.cuGraphAddEventWaitNode = add_event_wait;
  d.cuGraphAddChildGraphNode = add_child;
  d.cuGraphGetNodes = graph_nodes;
  d.cuGraphInstantiateWithFlags = instantiate;
  d.cuGraphLaunch = graph_launch;
  d.cuGraphUpload = graph_upload;
  d.cuGraphExecDestroy = exec_destroy;
  d.cuGraphExecMemsetNodeSetParams = exec_memset;
  d.cuStreamBeginCapture = begin_capture;
  d.cuStreamEndCapture = end_capture;
  d.library_name = "fake";
  d.driver_version = 13000;
  return d;
}

}  // namespace fake_cuda
