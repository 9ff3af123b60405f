// Process state (design §2, runtime layer): the backend and its parts, each with one job
// (devices, streams and events, pools, host memory, the IPC hooks), and what joins them: the
// table of live allocations, stream-ordered allocation and free, and the checks made before
// work touches memory.
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/fork_guard.hpp"
#include "core/pointer_table.hpp"
#include "core/status.hpp"
#include "runtime/device_table.hpp"
#include "runtime/graph_memory_hooks.hpp"
#include "runtime/host_memory_table.hpp"
#include "runtime/ipc_hooks.hpp"
#include "runtime/pointer_info.hpp"
#include "runtime/pool_object.hpp"
#include "runtime/pool_registry.hpp"
#include "runtime/pool_report.hpp"
#include "runtime/stream_object.hpp"
#include "runtime/stream_registry.hpp"

namespace soma::detail {

class runtime {
 public:
  /// Before the runtime starts only; not_permitted afterwards. Settings that
  /// backend::check_cpu_settings refuses are invalid_value at any time and are not kept.
  static status configure_cpu(const backend::cpu_settings& settings);
  /// The process's runtime, started on first use; initialization errors are returned on
  /// every call.
  static result<runtime*> instance();
  /// The runtime if it started and this process may use it, else nullptr (then instance()
  /// starts it or says why not): the two loads every API call makes.
  static runtime* ready() noexcept {
    runtime* started = started_.load(std::memory_order_acquire);
    return started != nullptr && !backend::forked_after_start() ? started : nullptr;
  }

  // -- the parts -------------------------------------------------------------------------
  device_table& devices() noexcept { return devices_; }
  stream_registry& streams() noexcept { return streams_; }
  pool_registry& pools() noexcept { return pools_; }
  host_memory_table& host_memory() noexcept { return host_memory_; }
  /// For src/ipc (S7).
  ipc_hooks& ipc() noexcept { return ipc_; }
  backend::backend& platform() noexcept { return *backend_; }

  // -- allocation (S1, S2, S14) -----------------------------------------------------------
  result<void*> allocate(std::size_t bytes, std::uintptr_t stream_handle);
  result<void*> allocate_from_pool(std::size_t bytes, std::uintptr_t pool_handle,
                                   std::uintptr_t stream_handle);
  status free(void* pointer, std::uintptr_t stream_handle);
  /// The fast lanes of allocate() and free() (runtime_fast_lane.hpp): the common case with no
  /// status made and no call below the C API. allocate_cached returns what a hit in the
  /// stream's cache of its current pool serves; free_fast frees a live allocation of a pool
  /// neither imported nor exported (S7). nullptr and false leave the call to allocate() and
  /// free(), with nothing done.
  inline void* allocate_cached(std::size_t bytes, std::uintptr_t stream_handle);
  inline void* allocate_cached_from_pool(std::size_t bytes, std::uintptr_t pool_handle,
                                         std::uintptr_t stream_handle);
  inline bool free_fast(void* pointer, std::uintptr_t stream_handle);
  pointer_info describe_pointer(const void* pointer) const;
  /// Synchronizes every stream of the current device (S12), then releases memory (S9).
  status synchronize_device();

  // -- work on streams that touches memory (S6, S13) ----------------------------------------
  status memset_async(void* destination, int value, std::size_t bytes, std::uintptr_t stream);
  status memcpy_async(void* destination, const void* source, std::size_t bytes,
                      std::uintptr_t stream);
  /// Stream value operations on a 32-bit word of host memory from host_memory() or of a live
  /// allocation; wait flags are somaStreamWaitValue* (0..3), write flags must be 0.
  status stream_wait_value32(std::uintptr_t stream, std::uint32_t* address, std::uint32_t value,
                             unsigned flags);
  status stream_write_value32(std::uintptr_t stream, std::uint32_t* address, std::uint32_t value,
                              unsigned flags);
  status launch_host_task(std::uintptr_t stream_handle, backend::host_task task);
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
  /// Pool (or graph) memory must lie in one live allocation, and a stream of `device` may use
  /// it as `needed` (S6): the owning device always; others as somaMemPoolSetAccess granted.
  /// Host memory the application owns passes. Graph nodes check their ranges with it (S15).
  status check_use(const void* pointer, std::size_t bytes, const char* what, int device,
                   backend::access_flags needed) const;

  // -- snapshots (soma's own) ------------------------------------------------------------
  /// The state of one pool; invalid_value for NULL, invalid_handle for a pool not live.
  result<pool_report> snapshot(std::uintptr_t pool_handle);
  /// Every live pool: default pools first, then the others in creation order.
  std::vector<pool_report> snapshot_all();
  /// The latest out-of-memory failure of an allocation from the pool (nullopt: none).
  result<std::optional<out_of_memory_record>> last_out_of_memory(std::uintptr_t pool_handle);

  // -- memory history (soma's own) ---------------------------------------------------------
  /// The most events a history ring holds: 2^26, 4 GiB of 64-byte events.
  static constexpr std::size_t max_history_entries = std::size_t{1} << 26;
  /// Starts recording into a fresh ring of `entries` events, or stops recording (0).
  status record_history(std::size_t entries);
  /// The recorded history as Chrome trace-event JSON (history_trace.hpp).
  std::string history_trace() const;
  status export_history(const std::string& path) const;
  /// Scope labels of the calling thread, recorded with its allocations while history records.
  static status push_scope(const char* label);
  static status pop_scope();

  // -- graphs (S15) -------------------------------------------------------------------------
  /// Installs the graph layer's memory (once, before any graph address exists).
  void set_graph_memory(graph_memory_hooks* hooks) noexcept { graph_memory_.store(hooks); }

 private:
  explicit runtime(std::unique_ptr<backend::backend> platform);
  status start();
  /// A runtime whose start failed: kept, not deleted (its parts may have started threads), and
  /// reachable from here, so leak checkers do not report it.
  static inline runtime* failed_start_ = nullptr;
  /// SOMA_HISTORY=<events> records from the start; SOMA_HISTORY_TRACE=<path> exports at exit.
  static status start_history_from_environment();

  result<void*> allocate_in(pool_object& pool, std::size_t bytes, stream_object& stream);
  /// The live allocation that starts at address, claimed for its free (block::claim_for_free);
  /// {} if none is live there.
  live_entry<pool_object> claim_for_free(std::uintptr_t address);
  /// free() once the block is claimed, of a pool neither imported nor exported: the free (which
  /// the pool records in memory history), and the reaping of a destroyed owner.
  void free_claimed(const live_entry<pool_object>& live, stream_object& stream);
  /// The free itself, once claimed: S2 on a native stream, then into the pool.
  [[gnu::always_inline]] static void free_into(pool_object& owner, block* b, stream_object& stream);
  /// The fast lanes' hit in pool's cache for stream (recorded in memory history by the cache);
  /// the caller has published pool and withdraws it after.
  [[gnu::always_inline]] inline void* take_cached(pool_object& pool, std::size_t bytes,
                                                  stream_object& stream);
  void name_pending_streams(pool_report& report) const;
  /// What an out-of-memory failure of pool adds to its message (out_of_memory_advice.hpp).
  std::string explain_out_of_memory(pool_object& pool, std::size_t bytes,
                                    const stream_object& stream) const;
  status refuse_imported_allocation(const pool_object& pool) const;
  /// Pool memory must lie in one live allocation; what was found goes to *described (left
  /// as is for host memory).
  status check_range(const void* pointer, std::size_t bytes, const char* what,
                     pointer_info* described = nullptr) const;
  /// A range a stream operation touches, and how (S6, S13).
  struct range_use {
    const void* pointer = nullptr;
    const char* what = "";
    backend::access_flags needed = backend::access_flags::read;
  };
  /// The stream of stream_handle once each use of `bytes` there passed check_use (none are
  /// checked when bytes is 0).
  result<stream_object*> stream_using(std::uintptr_t stream_handle, std::size_t bytes,
                                      std::initializer_list<range_use> uses) const;
  status check_value_word(std::uint32_t* address, const char* call, int device,
                          backend::access_flags needed) const;

  // Never destroyed: worker threads may outlive main. Read without a lock once set.
  static inline std::atomic<runtime*> started_{nullptr};

  const std::unique_ptr<backend::backend> backend_;
  device_table devices_;
  pointer_table<pool_object> pointers_;  // before pools_: their blocks have entries here
  pool_registry pools_;
  stream_registry streams_;  // after pools_: it tells them about streams
  host_memory_table host_memory_;
  ipc_hooks ipc_;
  std::atomic<graph_memory_hooks*> graph_memory_{nullptr};
};

}  // namespace soma::detail
