// The cuda backend: the driver's virtual memory API behind soma's pools, CUstreams and
// CUevents behind its streams and events (design §2 "Backends", "Physical memory").
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cuda/completion_tracker.hpp"
#include "backend/cuda/driver_api.hpp"

namespace soma::detail::backend::cuda {

/// success when the process's driver loads, cuInit succeeds and a device exists; else the
/// reason (no_device: "libcuda.so.1 not found: ...", "cuInit failed: CUDA_ERROR_NO_DEVICE").
/// What SOMA_BACKEND=auto asks before choosing cuda.
status probe();

/// The backend over the process's driver (process_driver()).
result<std::unique_ptr<backend>> open_backend();

/// Each device is used through its primary context (the one the CUDA runtime and PyTorch
/// use), retained for the backend's life. Every driver call runs with the right context
/// made current and the caller's context restored afterwards (context_scope), so the
/// runtime needs no per-thread setup. Nothing here runs on the allocation fast path.
///
/// Memory: reserve_address = cuMemAddressReserve aligned to the granularity (2 MiB on H200);
/// create_physical = cuMemCreate (pinned, on the device); map = cuMemMap + cuMemSetAccess for
/// the device and every device granted access to the reservation; unmap = cuMemUnmap (which
/// does not wait for the GPU: the pool unmaps only memory whose frees completed).
/// committed_bytes counts what this backend created, not other users of the device.
/// set_access applies to the mapped pieces inside the range and is remembered for the
/// reservation: later maps anywhere in it grant the same access (pool-wide access, S6).
/// allocate_host = cuMemHostAlloc(PORTABLE | DEVICEMAP) in device 0's primary context, usable
/// by every context at the same address on host and devices.
///
/// Streams: adopt_stream takes a CUstream of the device's primary context, which soma never
/// destroys.
///
/// Graphs (S15): create_work_graph = a CUgraph in the device's primary context (cuda_graph);
/// native capture = cuStreamBeginCapture in relaxed mode on the stream's CUstream, and
/// end_native_capture hands back the CUgraph, or nullptr (destroying it) when it has no node.
///
/// Requires: streams and events are destroyed before the backend, and no timeline is polled
/// after it (the runtime keeps its backend for the life of the process).
class cuda_backend final : public backend {
 public:
  /// Retains every device's primary context and reads its properties.
  static result<std::unique_ptr<cuda_backend>> create(const driver_api& driver);
  ~cuda_backend() override;

  std::string name() const override { return "cuda"; }
  int device_count() const override { return static_cast<int>(devices_.size()); }
  /// cuMemCreate allocations go back whole only.
  bool can_discard_physical_part() const override { return false; }
  void discard_physical_part(std::uint64_t, std::size_t, std::size_t) override {}
  /// One cuMemSetAccess over the whole range rather than one a part.
  status map_parts(std::uintptr_t address, std::span<const mapping_part> parts,
                   memory_location owner) override;
  status settle_unmarked_streams(int device) override;
  void release_finished_streams() override;
#include "backend/platform_overrides.inc"

  /// Called by a stream's destructor: the tracker keeps serving its timeline until drained.
  void retire_tracker(completion_tracker& tracker);
  /// Trackers in use or retired and not yet drained (for tests).
  std::size_t busy_trackers() const;
  /// Unmaps of several mappings that the driver refused as one call, so that each mapping took
  /// a call of its own (tests and gpu-check: 0 where the driver takes ranges, as it does).
  std::size_t unmap_fallbacks() const noexcept {
    return unmap_fallbacks_.load(std::memory_order_relaxed);
  }

 private:
  struct device_state {
    CUdevice handle = 0;
    CUcontext context = nullptr;  // primary, retained
    device_properties properties;
    std::vector<bool> can_access_peer;  // by peer ordinal
    std::atomic<std::size_t> committed_bytes{0};
  };
  struct physical {
    int device = 0;  // whose context (device 0 for host memory)
    std::size_t bytes = 0;
    bool counts_against_device = true;  // imports and host memory: not the device's budget
    int references = 1;                 // an import of the same memory again adds one
  };
  /// One cuMemAddressReserve: what is mapped in it and who else may access it.
  struct reservation {
    int device = 0;         // whose context; the owner of device memory
    bool host = false;      // host memory: no device owns it, the host has access
    std::size_t bytes = 0;  // as reserved (rounded up to the granularity)
    std::mutex mutex;       // held across a map or set_access, so neither misses the other
    std::map<std::uintptr_t, std::size_t> mapped_bytes;  // by address
    std::map<int, access_flags> granted;                 // peers, by device
  };

  cuda_backend(const driver_api& driver, std::vector<std::unique_ptr<device_state>> devices);
  status check_device(int device) const;
  /// check_device for a device location; for a host location, whether device 0's
  /// attributes allow host (or host-NUMA) pools.
  status check_location(memory_location where) const;
  /// The granularity of physical memory at where.
  std::size_t granularity_of(memory_location where) const;
  reservation* find_reservation(std::uintptr_t address, std::size_t bytes);
  /// find_reservation, or invalid_value naming the range when no reservation holds it.
  result<reservation*> reservation_of(std::uintptr_t address, std::size_t bytes);
  result<completion_tracker*> take_tracker(int device);
  /// Moves the trackers of destroyed streams whose work has run to the spares (each lets go
  /// of its stream's timeline). Requires: trackers_mutex_.
  void recycle_drained_trackers_locked();
  std::string explain_out_of_memory(int device, std::size_t bytes, CUresult created) const;
  /// Unmaps the mappings of parts (their sizes count), end to end from address: one cuMemUnmap
  /// over them all, or one each where the driver refuses that. Requires: the context is current.
  void unmap_mappings(std::uintptr_t address, std::span<const mapping_part> parts);

  const driver_api& driver_;
  std::vector<std::unique_ptr<device_state>> devices_;

  std::mutex memory_mutex_;  // the two maps below (not held across driver calls)
  std::map<std::uintptr_t, std::unique_ptr<reservation>> reservations_;  // by base
  std::map<std::uint64_t, physical> physicals_;                          // by handle

  mutable std::mutex trackers_mutex_;                          // the three lists below
  std::vector<std::unique_ptr<completion_tracker>> trackers_;  // all, for their lifetime
  std::vector<completion_tracker*> retired_;                   // streams destroyed, markers pending
  std::vector<completion_tracker*> spare_;                     // drained, ready for a new stream
  std::atomic<std::size_t> unmap_fallbacks_{0};
};

}  // namespace soma::detail::backend::cuda
