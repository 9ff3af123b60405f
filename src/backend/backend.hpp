// The one contract between soma and a platform: devices, address reservation, physical
// memory, mapping, access, streams and events. Every primitive soma needs from the
// platform is listed here with its preconditions and error results, as mimalloc's platform
// header lists them. The backend is called when a pool grows, shrinks or crosses streams,
// never on the allocation fast path. Implementations: cpu/ (memfd + mmap + worker
// threads) and cuda/ (the driver's virtual memory API).
//
// Errors: every call returns a status whose message carries the platform's own name for
// the failure (errno name, driver error name) and the numbers; the code is one of
// soma::detail::error_code.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <variant>

#include "core/status.hpp"
#include "core/stream_timeline.hpp"

namespace soma::detail::backend {

/// Handle types a physical allocation can be exported as (bit values of somaMem...).
inline constexpr unsigned handle_type_posix_fd = 1;

/// Where physical memory lives (S5): on a device, or in the host's memory, on any NUMA node
/// (host) or on one (host_numa). Host memory is reachable by the host at once and by a device
/// only where set_access grants it. An int converts to the device of that ordinal.
struct memory_location {
  /// Values of somaMemLocationType.
  enum class kind : int { device = 1, host = 2, host_numa = 3 };
  kind type = kind::device;
  int id = 0;  ///< device ordinal; NUMA node for host_numa; 0 for host

  constexpr memory_location() = default;
  constexpr memory_location(int device) : id(device) {}  // NOLINT: a device ordinal
  constexpr memory_location(kind where, int ordinal) : type(where), id(ordinal) {}
  static constexpr memory_location host() { return {kind::host, 0}; }
  static constexpr memory_location host_numa(int node) { return {kind::host_numa, node}; }
  constexpr bool is_host() const { return type != kind::device; }
  /// The device whose context serves host memory too (cuda); the device itself otherwise.
  constexpr int context_device() const { return is_host() ? 0 : id; }
  bool operator==(const memory_location&) const = default;
};

/// "device 0", "the host", "host NUMA node 1".
std::string describe(memory_location where);

struct device_properties {
  std::string name;
  std::size_t total_memory_bytes = 0;
  std::size_t granularity_bytes = 0;  ///< physical allocation granularity
  /// Smallest step a pool grows by, a multiple of the granularity: a backend whose physical
  /// allocations cost the same whatever their size (cuMemCreate) grows in larger steps.
  std::size_t growth_step_bytes = 0;
  unsigned supported_handle_types = 0;  ///< bitmask of handle_type_*
  /// Whether map_part takes a nonzero offset (cpu: mmap of a memfd offset). cuMemMap maps
  /// whole physical allocations only, so graph memory there comes in granule-sized pieces.
  bool maps_at_offset = true;
  bool memory_pools_supported = true;
  /// Pools of host memory (somaDevAttrHostMemoryPoolsSupported, ...NumaMemoryPoolsSupported).
  bool host_memory_pools_supported = true;
  bool host_numa_memory_pools_supported = true;
};

/// Access a device may have to a mapped range (values of somaMemAccessFlags).
enum class access_flags : int { none = 0, read = 1, read_write = 3 };

/// When a stream's wait on a 32-bit word lets later work go (values of somaStreamWaitValue*,
/// as CU_STREAM_WAIT_VALUE_*): geq compares as (int32_t)(word - value) >= 0, so counters may
/// wrap; and_nonzero waits for (word & value) != 0; nor_nonzero for ~(word | value) != 0.
enum class wait_condition : unsigned { geq = 0, eq = 1, and_nonzero = 2, nor_nonzero = 3 };

/// Whether the word at address satisfies condition against value (the cpu backend's test;
/// the driver applies the same rule on the GPU).
inline bool wait_satisfied(std::uint32_t word, std::uint32_t value, wait_condition condition) {
  switch (condition) {
    case wait_condition::geq:
      return static_cast<std::int32_t>(word - value) >= 0;
    case wait_condition::eq:
      return word == value;
    case wait_condition::and_nonzero:
      return (word & value) != 0;
    case wait_condition::nor_nonzero:
      return ~(word | value) != 0;
  }
  return false;
}

/// A unit of work a stream runs on the host; a failure becomes the stream's sticky error.
using host_task = std::function<status()>;

class stream;

/// A position in one stream, as recorded by event_record.
class event {
 public:
  virtual ~event() = default;
  /// Captures all work enqueued on s so far.
  virtual status record(stream& s) = 0;
  /// success if the captured work completed (or nothing was recorded), not_ready if not,
  /// launch_failure if the stream failed before reaching it.
  virtual status query() = 0;
  /// Blocks until the captured work completes.
  virtual status synchronize() = 0;
};

/// The pieces of work a stream runs, in the order enqueued. The platform gets each as one
/// value, so a backend implements one enqueue and the kinds of work are listed once, here.
namespace work {
/// Runs on a host thread; a failure becomes the stream's sticky error.
struct host {
  host_task task;
};
/// Sets `bytes` bytes at destination to value (cuMemsetD8Async).
struct fill {
  void* destination;
  int value;
  std::size_t bytes;
};
/// Copies `bytes` bytes (cuMemcpyAsync); the cpu backend tolerates overlap, cuda does not.
struct copy {
  void* destination;
  const void* source;
  std::size_t bytes;
};
/// Later work waits until the 32-bit word at address satisfies condition (cuStreamWaitValue32).
/// The word is host memory from allocate_host or device memory of a pool; it is written by the
/// host or by another stream's write_value32. Requires: address 4-byte aligned.
struct wait_value32 {
  std::uint32_t* address;
  std::uint32_t value;
  wait_condition condition;
};
/// Writes value to the word at address once earlier work completed, visible to the host and
/// other streams (cuStreamWriteValue32). Same requirements as wait_value32.
struct write_value32 {
  std::uint32_t* address;
  std::uint32_t value;
};
/// Later work waits until the event's captured work has completed.
struct wait_event {
  event* awaited;
};
/// Later work waits until `other` (of the same backend) has completed `position` (S11
/// internal dependencies: the allocator orders a stream after the free of the block it hands
/// it).
struct wait_stream {
  stream* other;
  std::uint64_t position;
};
}  // namespace work

using stream_work = std::variant<work::host, work::fill, work::copy, work::wait_value32,
                                 work::write_value32, work::wait_event, work::wait_stream>;

/// An in-order queue of work. Each enqueued operation advances the stream's timeline by
/// one (note_enqueued) and the backend advances `completed` as operations finish.
/// Enqueue calls are thread-safe.
class stream {
 public:
  /// native: the platform's own stream (cuda: the CUstream) for users' kernels; nullptr on cpu.
  stream(int device, void* native) noexcept : device_(device), native_(native) {}
  virtual ~stream() = default;
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;

  /// Appends one piece of work; after a failure on the stream, returns the sticky error.
  virtual status enqueue(stream_work item) = 0;
  virtual status synchronize() = 0;
  /// success when all enqueued work completed, not_ready otherwise; the sticky error if any.
  virtual status query() = 0;
  /// The first asynchronous failure on this stream, or success. Inline and one load for a
  /// stream that never failed: every event record and enqueue asks.
  status sticky_error() {
    if (!failed_->load(std::memory_order_acquire)) [[likely]]
      return status::success();
    return failure();
  }
  /// A block was freed on this stream (S2). cuda: the native stream may carry work soma never
  /// saw before the free, so the free takes a position of its own, complete only once the
  /// stream is shown to have run past it. cpu: every piece of work is soma's; nothing to do.
  virtual void note_free() {}

  int device() const noexcept { return device_; }
  void* native_handle() const noexcept { return native_; }

 protected:
  /// failed: set once the stream failed, before failure() reports it; outlives the stream.
  void watch_failures(const std::atomic<bool>& failed) noexcept { failed_ = &failed; }
  /// The sticky failure, once the flag says there is one.
  virtual status failure() = 0;

 public:
  // Shorthands for enqueue, one per kind of work.
  status enqueue_host_task(host_task task) { return enqueue(work::host{std::move(task)}); }
  status enqueue_memset(void* destination, int value, std::size_t bytes) {
    return enqueue(work::fill{destination, value, bytes});
  }
  status enqueue_memcpy(void* destination, const void* source, std::size_t bytes) {
    return enqueue(work::copy{destination, source, bytes});
  }
  status enqueue_wait_value32(std::uint32_t* address, std::uint32_t value,
                              wait_condition condition) {
    return enqueue(work::wait_value32{address, value, condition});
  }
  status enqueue_write_value32(std::uint32_t* address, std::uint32_t value) {
    return enqueue(work::write_value32{address, value});
  }
  status enqueue_wait(event& e) { return enqueue(work::wait_event{&e}); }
  status enqueue_wait_for(stream& other, std::uint64_t position) {
    return enqueue(work::wait_stream{&other, position});
  }

 private:
  const int device_;
  void* const native_;
  static constexpr std::atomic<bool> never_failed_{false};
  const std::atomic<bool>* failed_ = &never_failed_;
};

/// An instantiated work_graph: launched as a whole, as often as wanted (S15).
class work_graph_exec {
 public:
  virtual ~work_graph_exec() = default;
  /// Enqueues every node on s, each after its dependencies; later work on s runs after all of
  /// them. Event record nodes leave their events recorded as record() would.
  virtual status launch(stream& s) = 0;
  /// Does ahead of time what the first launch on s would (cuGraphUpload); cpu: nothing.
  virtual status upload(stream& s) = 0;
  /// Changes a memset node (the index add returned) for later launches.
  virtual status set_memset(std::size_t node, void* destination, int value, std::size_t bytes) = 0;
};

/// One node of a work_graph: the work it does once its dependencies completed.
struct work_node {
  enum class kind { empty, memset, memcpy, host, event_record, event_wait, native_child };
  kind what = kind::empty;
  void* destination = nullptr;        ///< memset, memcpy
  const void* source = nullptr;       ///< memcpy
  int value = 0;                      ///< memset: the byte
  std::size_t bytes = 0;              ///< memset, memcpy
  void (*function)(void*) = nullptr;  ///< host: function(data) on a host thread
  void* data = nullptr;
  event* target = nullptr;       ///< event_record, event_wait; must outlive every exec
  void* native_graph = nullptr;  ///< native_child: the platform's own graph (cuda: a CUgraph)
};

/// A dependency graph of stream work (cuda: a CUgraph), built node by node with each node's
/// dependencies added before it, then instantiated. Memory nodes are the runtime's business:
/// the platform sees only the work, with addresses already mapped at launch.
class work_graph {
 public:
  using node_index = std::size_t;
  using dependencies = std::span<const node_index>;
  virtual ~work_graph() = default;
  /// The new node's index. A native child is copied in (the caller keeps owning it); on a
  /// platform without graphs of its own (cpu) it is not_supported.
  virtual result<node_index> add(dependencies after, const work_node& node) = 0;
  virtual result<std::unique_ptr<work_graph_exec>> instantiate() = 0;
};

/// The platform. One instance per process, created by the runtime.
class backend {
 public:
  virtual ~backend() = default;

  virtual std::string name() const = 0;
  virtual int device_count() const = 0;
  /// Requires: 0 <= device < device_count().
  virtual device_properties properties(int device) const = 0;
  /// Properties of a host location's memory (S5): its name, the host's memory as the total,
  /// the granularity and growth step of its physical allocations, the handle types it exports.
  /// Requires: where.is_host(), a NUMA node below host_numa_node_count().
  virtual device_properties host_properties(memory_location where) const = 0;
  /// Bytes committed on the device by all pools of this process.
  virtual std::size_t committed_bytes(int device) const = 0;
  /// Free and total bytes of the device as its platform sees them (cudaMemGetInfo); cpu:
  /// the device's budget minus what the pools committed.
  virtual void memory_info(int device, std::size_t* free_bytes, std::size_t* total_bytes) const = 0;
  virtual bool can_access_peer(int device, int peer) const = 0;

  // -- address space and physical memory (S3, S9, S16) --------------------------------
  /// Reserves bytes of address space for memory of `where`, aligned to its granularity.
  /// Failure: address_space_exhausted naming the limit (RLIMIT_AS, driver VA space).
  virtual result<std::uintptr_t> reserve_address(memory_location where, std::size_t bytes) = 0;
  virtual void free_address(std::uintptr_t base, std::size_t bytes) = 0;
  /// Creates bytes (a multiple of the granularity) of physical memory at `where` (a device, or
  /// host memory, bound to its NUMA node for host_numa), backed at once: running out is
  /// reported here (out_of_memory), never later. Returns a handle.
  virtual result<std::uint64_t> create_physical(memory_location where, std::size_t bytes,
                                                unsigned export_handle_types) = 0;
  /// Frees a physical allocation. Requires: it is no longer mapped.
  virtual void release_physical(std::uint64_t handle) = 0;
  /// Whether discard_physical can give back part of a physical allocation.
  virtual bool can_discard_physical_part() const = 0;
  /// Returns [offset, offset + bytes) of a physical allocation to the OS while the rest stays.
  /// Requires: can_discard_physical_part(); the range is unmapped; granule aligned.
  virtual void discard_physical_part(std::uint64_t handle, std::size_t offset,
                                     std::size_t bytes) = 0;
  /// Maps a whole physical allocation at address (inside a reservation), readable and
  /// writable by its owner: map_part from offset 0, which every platform accepts.
  status map(std::uintptr_t address, std::size_t bytes, std::uint64_t handle,
             memory_location owner) {
    return map_part(address, bytes, handle, 0, owner);
  }
  /// Maps [offset, offset + bytes) of a physical allocation at address, readable and writable
  /// by owner (a device, or for host memory the host) and by every device granted the
  /// reservation. Requires: offset and bytes granule aligned and inside the allocation; offset
  /// 0 unless properties().maps_at_offset (else not_supported). One physical range may be
  /// mapped at several addresses at once (graph memory, S15).
  virtual status map_part(std::uintptr_t address, std::size_t bytes, std::uint64_t handle,
                          std::size_t offset, memory_location owner) = 0;
  /// One range of a physical allocation to map: [offset, offset + bytes) of handle.
  struct mapping_part {
    std::uint64_t handle = 0;
    std::size_t offset = 0;
    std::size_t bytes = 0;
  };
  /// Maps the parts one after another from address (inside one reservation), readable and
  /// writable by owner, as map_part each; a platform whose access grant costs a call per
  /// range (cuMemSetAccess) grants it once over the whole range. On failure nothing of it
  /// stays mapped.
  virtual status map_parts(std::uintptr_t address, std::span<const mapping_part> parts,
                           memory_location owner) {
    std::uintptr_t at = address;
    for (const mapping_part& part : parts) {
      if (status mapped = map_part(at, part.bytes, part.handle, part.offset, owner); !mapped.ok()) {
        if (at > address) unmap(address, at - address);
        return mapped;
      }
      at += part.bytes;
    }
    return status::success();
  }
  /// Unmaps every mapping in the range: whole mappings, end to end, as many as it holds (one
  /// driver call where the platform allows: release and remap unmap in batches). The address
  /// range stays reserved.
  virtual void unmap(std::uintptr_t address, std::size_t bytes) = 0;
  /// Grants a device access to a mapped range (S6); for host memory, any device may be granted
  /// or revoked (no device owns it).
  virtual status set_access(std::uintptr_t address, std::size_t bytes, int device,
                            access_flags flags) = 0;
  /// A file descriptor for the physical allocation that another process can import (S7).
  /// The caller owns and closes it.
  virtual result<int> export_physical(std::uint64_t handle) = 0;
  /// Imports a descriptor produced by export_physical (in any process). Takes no ownership
  /// of fd.
  virtual result<std::uint64_t> import_physical(int device, int fd, std::size_t bytes) = 0;

  // -- streams and events ---------------------------------------------------------------
  /// A new stream on device that reports its progress into timeline (which outlives it).
  virtual result<std::unique_ptr<stream>> create_stream(int device, stream_timeline& timeline) = 0;
  /// A stream over an existing native stream (cuda: a CUstream from PyTorch, say), which the
  /// caller keeps owning. may_end_first: the owner may destroy native before this stream, so
  /// every position taken on it is covered by a marker at once and the stream is never touched
  /// after its last operation (cuda). not_supported where streams have no native form.
  virtual result<std::unique_ptr<stream>> adopt_stream(int device, void* native,
                                                       stream_timeline& timeline,
                                                       bool may_end_first) = 0;
  /// For the destroyed streams of device whose timelines cannot learn on their own that their
  /// last work ran (cuda: no marker covers it, because its record failed or the owner of a
  /// native stream destroyed it first), blocks until it has (cuda: cuCtxSynchronize, which
  /// also waits for every other stream of the context) and says so. Every other destroyed
  /// stream's timeline learns as it is polled. cpu: the workers report as they run; nothing to do.
  virtual status settle_unmarked_streams(int device) = 0;
  /// Lets go of what the backend still holds of destroyed streams whose work has run (cuda:
  /// their completion trackers, which poll the streams' timelines until released), so that the
  /// runtime can forget those streams; called at a device synchronize. cpu: nothing is held.
  virtual void release_finished_streams() {}
  virtual result<std::unique_ptr<event>> create_event() = 0;

  // -- graphs (S15) ------------------------------------------------------------------------
  virtual result<std::unique_ptr<work_graph>> create_work_graph(int device) = 0;
  /// Starts recording the native stream behind s (cuda: cuStreamBeginCapture, relaxed mode),
  /// so users' kernels launched on it land in a native graph; cpu: nothing to record.
  virtual status begin_native_capture(stream& s) = 0;
  /// Ends what begin_native_capture started: the native graph recorded since (the caller owns
  /// it: destroy_native_graph), or nullptr when nothing was recorded.
  virtual result<void*> end_native_capture(stream& s) = 0;
  virtual void destroy_native_graph(void* native_graph) = 0;

  // -- host memory ------------------------------------------------------------------------
  /// Host memory that copies to and from pool memory may use asynchronously and that stream
  /// value operations may wait on (cuda: page-locked, mapped for every device; cpu: ordinary
  /// pages). Page aligned. out_of_memory when the platform refuses.
  virtual result<void*> allocate_host(std::size_t bytes) = 0;
  /// Requires: pointer came from allocate_host and no stream still uses it.
  virtual void free_host(void* pointer, std::size_t bytes) = 0;
};

/// The backend SOMA_BACKEND selects (cpu, cuda, auto). cpu settings come from
/// cpu_settings when given (somaSetCpuBackendConfig), else from the environment.
struct cpu_settings {
  int device_count = 0;                 ///< 0 = SOMA_CPU_DEVICES or 1
  std::size_t device_memory_bytes = 0;  ///< 0 = SOMA_CPU_DEVICE_MEMORY or 4 GiB
  std::size_t granularity_bytes = 0;    ///< 0 = SOMA_CPU_GRANULARITY or 2 MiB
};
/// Most cpu devices, for SOMA_CPU_DEVICES and somaSetCpuBackendConfig alike: each device
/// costs a worker thread and an address range per pool, and tests model a few.
inline constexpr int max_cpu_device_count = 64;
/// The checks that need no environment, made when settings are given (somaSetCpuBackendConfig):
/// device_count from 0 (keep the environment's) to max_cpu_device_count, else invalid_value
/// naming the limit.
status check_cpu_settings(const cpu_settings& given);
result<std::unique_ptr<backend>> create_backend(const cpu_settings& settings);

}  // namespace soma::detail::backend
