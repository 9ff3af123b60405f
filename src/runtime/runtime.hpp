// Process state: the backend, devices, default and current pools, streams, events, the
// table of live allocations, synchronize hooks (design §2, runtime layer).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "core/pointer_table.hpp"
#include "core/status.hpp"
#include "core/timeline_registry.hpp"
#include "runtime/graph_memory_hooks.hpp"
#include "runtime/handle_table.hpp"
#include "runtime/pool_object.hpp"
#include "runtime/pointer_info.hpp"
#include "runtime/stream_object.hpp"

namespace soma::detail {

/// somaMemPoolProps as the C API received it, checked by runtime::create_pool.
struct raw_pool_properties {
  int allocation_type = 0;
  unsigned handle_types = 0;
  int location_type = 0;
  int location_id = 0;
  bool has_win32_security_attributes = false;
  std::size_t max_size_bytes = 0;
  unsigned usage = 0;
  bool reserved_is_zero = true;
};

/// Pool attributes (values of somaMemPoolAttr).
enum class pool_attribute : int {
  reuse_follow_event_dependencies = 1,
  reuse_allow_opportunistic = 2,
  reuse_allow_internal_dependencies = 3,
  release_threshold = 4,
  reserved_current = 5,
  reserved_high = 6,
  used_current = 7,
  used_high = 8,
  compact_before_growth = 1000,
};

/// Device attributes (values of somaDeviceAttr).
enum class device_attribute : int {
  memory_pools_supported = 115,
  pool_supported_handle_types = 119,
  total_memory_mib = 20001,
  granularity_kib = 20002,
};

class runtime {
 public:
  /// Before the runtime starts only; not_permitted afterwards. Settings that
  /// backend::check_cpu_settings refuses are invalid_value at any time and are not kept.
  static status configure_cpu(const backend::cpu_settings& settings);
  /// The process's runtime, started on first use; initialization errors are returned on
  /// every call.
  static result<runtime*> instance();

  // -- devices (S4, S8) ---------------------------------------------------------------
  std::string backend_name() const { return backend_->name(); }
  int device_count() const { return static_cast<int>(devices_.size()); }
  status set_current_device(int device);
  int current_device() const;
  result<int> device_attribute(device_attribute attribute, int device) const;
  result<bool> can_access_peer(int device, int peer) const;
  status memory_info(std::size_t* free_bytes, std::size_t* total_bytes) const;
  result<std::size_t> committed_bytes(int device) const;
  status synchronize_device();

  // -- streams and events (S12) -------------------------------------------------------
  result<std::uintptr_t> create_stream(unsigned flags);
  status destroy_stream(std::uintptr_t handle);
  status synchronize_stream(std::uintptr_t handle);
  status query_stream(std::uintptr_t handle);
  status stream_wait_event(std::uintptr_t stream_handle, std::uintptr_t event_handle);
  result<int> stream_device(std::uintptr_t handle);
  result<std::uintptr_t> adopt_native_stream(void* native, int device);
  result<void*> native_stream(std::uintptr_t handle);
  result<std::uintptr_t> create_event(unsigned flags);
  status destroy_event(std::uintptr_t handle);
  status record_event(std::uintptr_t event_handle, std::uintptr_t stream_handle);
  status query_event(std::uintptr_t handle);
  status synchronize_event(std::uintptr_t handle);
  status launch_host_task(std::uintptr_t stream_handle, backend::host_task task);
  status memset_async(void* destination, int value, std::size_t bytes, std::uintptr_t stream);
  status memcpy_async(void* destination, const void* source, std::size_t bytes,
                      std::uintptr_t stream);
  /// Stream value operations on a 32-bit word of host memory from allocate_host or of a live
  /// allocation; wait flags are somaStreamWaitValue* (0..3), write flags must be 0.
  status stream_wait_value32(std::uintptr_t stream, std::uint32_t* address, std::uint32_t value,
                             unsigned flags);
  status stream_write_value32(std::uintptr_t stream, std::uint32_t* address, std::uint32_t value,
                              unsigned flags);

  // -- host memory (somaMallocHost) ---------------------------------------------------
  result<void*> allocate_host(std::size_t bytes);
  status free_host(void* pointer);

  // -- allocation (S1, S2, S14) -------------------------------------------------------
  result<void*> allocate(std::size_t bytes, std::uintptr_t stream_handle);
  result<void*> allocate_from_pool(std::size_t bytes, std::uintptr_t pool_handle,
                                   std::uintptr_t stream_handle);
  status free(void* pointer, std::uintptr_t stream_handle);
  pointer_info describe_pointer(const void* pointer) const;

  // -- pools (S3, S5, S9, S10) ---------------------------------------------------------
  result<std::uintptr_t> create_pool(const raw_pool_properties& properties);
  status destroy_pool(std::uintptr_t handle);
  result<std::uintptr_t> default_pool(int device) const;
  status set_device_pool(int device, std::uintptr_t pool_handle);
  result<std::uintptr_t> device_pool(int device) const;
  status set_pool_attribute(std::uintptr_t handle, pool_attribute attribute, const void* value);
  status get_pool_attribute(std::uintptr_t handle, pool_attribute attribute, void* value) const;
  status trim_pool(std::uintptr_t handle, std::size_t keep_bytes);
  /// S6: each entry is {location type, location id, flags} as somaMemAccessDesc holds them.
  struct access_request {
    int location_type = 0;
    int location_id = 0;
    int flags = 0;
  };
  status set_pool_access(std::uintptr_t handle, const access_request* requests, std::size_t count);
  /// S6: whether a list of count access entries may be read at all: not NULL with a count, and
  /// no more entries than there are devices (each device needs one entry at most, as CUDA
  /// bounds a graph alloc node's access list). Callers check it before copying the list.
  status check_access_list(const void* list, std::size_t count) const;
  result<int> pool_access(std::uintptr_t handle, int location_type, int location_id) const;
  /// A memory range a host task declares it reads (read) or reads and writes (read_write).
  struct host_access {
    const void* pointer = nullptr;
    std::size_t bytes = 0;
    backend::access_flags flags = backend::access_flags::none;
  };
  /// A declared range's access must be ProtRead or ProtReadWrite (what names the range).
  static status check_host_access_flags(const host_access& access, const std::string& what);
  /// launch_host_task after checking that the stream's device may access each range (S6,
  /// S13): ranges in pool memory must lie in live allocations the device has access to.
  status launch_host_task_with_access(std::uintptr_t stream_handle, backend::host_task task,
                                      const host_access* accesses, std::size_t count);
  status set_pool_name(std::uintptr_t handle, const char* name);

 private:
  struct device_state {
    backend::device_properties properties;
    pool_object* default_pool = nullptr;
    std::atomic<pool_object*> current_pool{nullptr};
    stream_object* default_stream = nullptr;
    // Stands for destroyed streams of this device once they are forgotten: their frees not
    // yet proven are stamped with it, and a device synchronize proves it (S9, S12).
    std::unique_ptr<stream_timeline> forgotten_frees;
  };

  explicit runtime(std::unique_ptr<backend::backend> platform);
  status start();

  result<stream_object*> resolve_stream(std::uintptr_t handle) const;
  result<event_object*> resolve_event(std::uintptr_t handle) const;
  result<pool_object*> resolve_pool(std::uintptr_t handle) const;
  status check_device(int device) const;
  result<stream_object*> new_stream(int device, unsigned flags, bool is_default,
                                    void* adopt_native = nullptr);
  result<pool_object*> new_pool(const pool_properties& properties, bool is_default,
                                std::string name);
  result<void*> allocate_in(pool_object& pool, std::size_t bytes, stream_object& stream);
  /// The stream hooks of pool::allocate (allocation_hooks in runtime_memory.cpp): S11 internal
  /// dependencies, and the synchronize of compaction before growth (S9).
  friend class allocation_hooks;
  void order_after_free(stream_object& stream, std::uint64_t stream_id, std::uint64_t position);
  status synchronize_for_pool(stream_object& stream);
  /// The device's current pool, published as in use by this thread (pool_hazards) so that a
  /// concurrent destroy does not delete it under the caller; release_pool ends the use.
  pool_object* acquire_current_pool(int device) const;
  /// The pool of handle, published as in use by this thread, or an error.
  result<pool_object*> acquire_pool(std::uintptr_t handle) const;
  static void release_pool() noexcept;
  /// Destroyed streams whose work has all run: their frees serve every stream, and their
  /// records and clock entries go (bounded memory under stream churn).
  void forget_finished_streams();
  status explain_unknown_pointer(std::uintptr_t address, const char* action) const;
  /// Pool memory must lie in one live allocation; what was found goes to *described (left
  /// as is for host memory).
  status check_range(const void* pointer, std::size_t bytes, const char* what,
                     pointer_info* described = nullptr) const;
  /// check_range, then (for pool memory) that a stream of `device` may use the range as
  /// `needed` (S6): the owning device always; others as somaMemPoolSetAccess granted.
  status check_use(const void* pointer, std::size_t bytes, const char* what, int device,
                   backend::access_flags needed) const;
  /// The host allocation holding [address, address + bytes): {base, size}, or {0, 0}.
  std::pair<std::uintptr_t, std::size_t> find_host(std::uintptr_t address) const;
  std::pair<std::uintptr_t, std::size_t> find_host_locked(std::uintptr_t address) const;
  status check_value_word(std::uint32_t* address, const char* call, int device,
                          backend::access_flags needed) const;
  /// A synchronize or successful query showed stream complete up to position (S12).
  void proven(stream_object& stream, std::uint64_t position);
  void after_synchronize();
  void reap_destroyed_pools();
  std::string describe_stream(const stream_object& stream) const;

  std::unique_ptr<backend::backend> backend_;
  std::vector<std::unique_ptr<device_state>> devices_;
  pointer_table pointers_;
  handle_table<stream_object, handle_kind::stream> streams_;
  handle_table<event_object, handle_kind::event> events_;
  handle_table<pool_object, handle_kind::pool> pools_;
  timeline_registry timelines_;

  // Held shared while pools are used outside the registry lock (after_synchronize), exclusive
  // while destroyed pools are deleted, so no pool is deleted under a caller. Taken before
  // registry_mutex_.
  std::shared_mutex reap_mutex_;
  mutable std::mutex registry_mutex_;  // the lists below
  // Every stream record not yet forgotten, by timeline id: live, and destroyed with work
  // that may still run (required_wait names a stream by id).
  std::unordered_map<std::uint64_t, std::shared_ptr<stream_object>> streams_by_id_;
  std::vector<stream_object*> live_streams_;
  std::vector<stream_object*> retired_streams_;          // destroyed, not yet forgotten
  std::vector<std::unique_ptr<pool_object>> all_pools_;  // live and destroyed-but-busy

  mutable std::mutex host_mutex_;
  std::map<std::uintptr_t, std::size_t> host_allocations_;  // somaMallocHost: base -> bytes

  // -- sharing between processes (S7): hooks for src/ipc, runtime_ipc_hooks.cpp ----------
 public:
  /// The backend, for src/ipc to import, map and unmap physical memory.
  backend::backend& platform() noexcept { return *backend_; }
  /// Checks that pool_handle may be exported as handle_type (call names the API call in
  /// messages); returns the pool's identity in export data, `proposed_pool_id` if it has none.
  result<std::uint64_t> exportable_pool(std::uintptr_t pool_handle, unsigned handle_type,
                                        std::uint64_t proposed_pool_id, const char* call);
  /// Device of a pool (any kind), for the exporter's handshake.
  result<int> pool_device(std::uintptr_t pool_handle) const;
  /// Export data fields for the live allocation that starts at pointer.
  result<pointer_export> export_pointer(const void* pointer, std::uint64_t proposed_pool_id,
                                        const export_nonce& fresh_nonce);
  /// The physical memory behind export export_id of pool_handle as descriptors the caller
  /// owns, if the record is live and nonce and bytes match it (invalid_value otherwise).
  result<exported_memory> export_memory(std::uintptr_t pool_handle, std::uint64_t export_id,
                                        const export_nonce& nonce, std::size_t bytes);
  /// A new imported pool of device, holding link until it is destroyed.
  result<std::uintptr_t> create_imported_pool(int device, std::shared_ptr<import_link> link,
                                              std::string name);
  /// An imported pool's device and link (call names the API call in messages).
  result<imported_pool_view> imported_pool(std::uintptr_t pool_handle, const char* call) const;
  /// The live allocation imported under key into pool_handle, or nullptr.
  void* find_imported_allocation(std::uintptr_t pool_handle, std::uint64_t key) const;
  /// Makes [address, address + bytes) a live allocation of the imported pool; release unmaps
  /// it once its free completed. If key is live already, release runs now and the existing
  /// allocation is returned.
  result<void*> add_imported_allocation(std::uintptr_t pool_handle, std::uint64_t key,
                                        std::uintptr_t address, std::size_t bytes,
                                        std::function<void()> release);

 private:
  status free_imported(pool_object& owner, block* live, stream_object& stream);
  status refuse_imported_allocation(const pool_object& pool) const;
  /// The imported pool whose live mapping holds address (base and size into *info), or nullptr.
  pool_object* find_imported(std::uintptr_t address, pointer_info* info) const;
  /// Releases the mappings whose free completed; true if pool holds none any more.
  static bool release_imported(pool_object& pool);
  std::atomic<bool> has_imported_pools_{false};

  // -- graphs (S15): hooks for src/graph ---------------------------------------------------
 public:
  /// Installs the graph layer's memory (once, before any graph address exists).
  void set_graph_memory(graph_memory_hooks* hooks) noexcept { graph_memory_.store(hooks); }
  /// The stream of handle (0: the current device's default stream) or an error.
  result<stream_object*> stream_of(std::uintptr_t handle) const { return resolve_stream(handle); }
  result<event_object*> event_of(std::uintptr_t handle) const { return resolve_event(handle); }
  const backend::device_properties& device_properties(int device) const {
    return devices_[static_cast<std::size_t>(device)]->properties;
  }
  status device_valid(int device) const { return check_device(device); }
  /// check_use for graph nodes, which check their ranges when they are added.
  status check_memory_use(const void* pointer, std::size_t bytes, const char* what, int device,
                          backend::access_flags needed) const {
    return check_use(pointer, bytes, what, device, needed);
  }
  /// The backend queue of stream, or null once it is destroyed.
  std::shared_ptr<backend::stream> queue_of(const stream_object& stream) const;
  /// Blocks until stream completed position (its queue's synchronize while it lives).
  status wait_until(stream_object& stream, std::uint64_t position);
  /// Later work on waiter waits until source completed position (on the host where the
  /// source's queue is gone).
  status order_stream_after(stream_object& waiter, stream_object& source, std::uint64_t position);
  /// A graph launch recorded event on stream before position (caller holds event.mutex).
  static void note_event_recorded(event_object& event, stream_object& stream,
                                  std::uint64_t position);

 private:
  std::atomic<graph_memory_hooks*> graph_memory_{nullptr};
};

}  // namespace soma::detail
