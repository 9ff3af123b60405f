// Devices, streams and events of the cuda backend; memory is in cuda_backend_memory.cpp.
#include "backend/cuda/cuda_backend.hpp"

#include <cstdlib>
#include <numeric>

#include "backend/cuda/cuda_event.hpp"
#include "backend/cuda/cuda_graph.hpp"
#include "backend/cuda/cuda_stream.hpp"
#include "backend/fork_guard.hpp"

namespace soma::detail::backend::cuda {
namespace {

std::string visible_devices_note() {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible == nullptr) return {};
  return std::string(" (CUDA_VISIBLE_DEVICES='") + visible + "')";
}

// Reads what the runtime reports for a device (somaDeviceGetAttribute, somaMemGetInfo).
status read_properties(const driver_api& driver, CUdevice device, int ordinal, CUcontext context,
                       device_properties* out) {
  char name[256] = {};
  if (status s = driver.check(driver.cuDeviceGetName(name, sizeof name, device), "cuDeviceGetName");
      !s.ok())
    return s;
  out->name = name;
  if (status s = driver.check(driver.cuDeviceTotalMem(&out->total_memory_bytes, device),
                              "cuDeviceTotalMem");
      !s.ok())
    return s;
  int virtual_memory = 0, pools = 0, handle_types = 0;
  driver.cuDeviceGetAttribute(&virtual_memory,
                              CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device);
  driver.cuDeviceGetAttribute(&pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, device);
  // Drivers before 11.3 refuse this attribute: then nothing is exportable.
  if (driver.cuDeviceGetAttribute(&handle_types, CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES,
                                  device) != CUDA_SUCCESS)
    handle_types = 0;
  // soma's pools are built on the virtual memory API, not on the driver's pools.
  out->memory_pools_supported = virtual_memory != 0 && pools != 0;
  out->maps_at_offset = false;  // cuMemMap: "offset ... currently must be zero"
  // Host pools are host memory made with the virtual memory API: both attributes must hold.
  int host_pools = 0, host_vmm = 0, numa_pools = 0, numa_vmm = 0;
  driver.cuDeviceGetAttribute(&host_pools, CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED, device);
  driver.cuDeviceGetAttribute(&host_vmm,
                              CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device);
  driver.cuDeviceGetAttribute(&numa_pools, CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED,
                              device);
  driver.cuDeviceGetAttribute(
      &numa_vmm, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device);
  out->host_memory_pools_supported = host_pools != 0 && host_vmm != 0;
  out->host_numa_memory_pools_supported = numa_pools != 0 && numa_vmm != 0;
  out->supported_handle_types =
      (handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0 ? handle_type_posix_fd : 0;

  out->granularity_bytes = std::size_t{2} << 20;  // nominal where the device has no VMM
  if (virtual_memory == 0) return status::success();
  context_scope scope(driver, context);
  if (!scope.entered().ok()) return scope.entered();
  CUmemAllocationProp prop;
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, ordinal};
  std::size_t recommended_bytes = 0;
  if (status s = driver.check(driver.cuMemGetAllocationGranularity(
                                  &recommended_bytes, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
                              "cuMemGetAllocationGranularity");
      !s.ok())
    return s;
  out->granularity_bytes = recommended_bytes;
  if (out->supported_handle_types != 0) {
    // Exportable memory may need a coarser unit; one granularity must serve both kinds.
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    std::size_t exportable_bytes = 0;
    if (driver.cuMemGetAllocationGranularity(&exportable_bytes, &prop,
                                             CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS &&
        exportable_bytes != 0) {
      out->granularity_bytes = std::lcm(out->granularity_bytes, exportable_bytes);
    }
  }
  // cuMemCreate + cuMemMap + cuMemSetAccess cost tens of microseconds whatever the size, and
  // the driver's own pools grow by 32 MiB: pools grow by at least that much here.
  constexpr std::size_t growth_step = std::size_t{32} << 20;
  out->growth_step_bytes =
      (growth_step + out->granularity_bytes - 1) / out->granularity_bytes * out->granularity_bytes;
  return status::success();
}

}  // namespace

status probe() {
  result<const driver_api*> driver = process_driver();
  if (!driver.ok()) return driver.take_error();
  int count = 0;
  if (status s =
          driver.value()->check(driver.value()->cuDeviceGetCount(&count), "cuDeviceGetCount");
      !s.ok())
    return status(error_code::no_device, s.message());
  if (count <= 0) {
    return status(error_code::no_device,
                  "cuDeviceGetCount found no CUDA device" + visible_devices_note());
  }
  return status::success();
}

result<std::unique_ptr<backend>> open_backend() {
  if (status usable = probe(); !usable.ok()) return usable;
  result<std::unique_ptr<cuda_backend>> created = cuda_backend::create(*process_driver().value());
  if (!created.ok()) return created.take_error();
  return std::unique_ptr<backend>(std::move(created.value()));
}

result<std::unique_ptr<cuda_backend>> cuda_backend::create(const driver_api& driver) {
  int count = 0;
  if (status s = driver.check(driver.cuDeviceGetCount(&count), "cuDeviceGetCount"); !s.ok())
    return s;
  if (count <= 0) {
    return status(error_code::no_device,
                  "cuDeviceGetCount found no CUDA device" + visible_devices_note());
  }
  std::vector<std::unique_ptr<device_state>> devices;
  auto fail = [&](const status& failure) -> result<std::unique_ptr<cuda_backend>> {
    for (const auto& d : devices) driver.cuDevicePrimaryCtxRelease(d->handle);
    return status(failure.code(), "cuda backend: " + failure.message());
  };
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    auto d = std::make_unique<device_state>();
    if (status s = driver.check(driver.cuDeviceGet(&d->handle, ordinal), "cuDeviceGet"); !s.ok())
      return fail(s);
    if (status s = driver.check(driver.cuDevicePrimaryCtxRetain(&d->context, d->handle),
                                "cuDevicePrimaryCtxRetain", "device " + std::to_string(ordinal));
        !s.ok())
      return fail(s);
    devices.push_back(std::move(d));
    device_state& added = *devices.back();
    if (status s = read_properties(driver, added.handle, ordinal, added.context, &added.properties);
        !s.ok())
      return fail(status(s.code(), "device " + std::to_string(ordinal) + ": " + s.message()));
  }
  for (auto& d : devices) {
    d->can_access_peer.assign(devices.size(), false);
    for (std::size_t peer = 0; peer < devices.size(); ++peer) {
      int can = 0;
      if (devices[peer] != d &&
          driver.cuDeviceCanAccessPeer(&can, d->handle, devices[peer]->handle) == CUDA_SUCCESS)
        d->can_access_peer[peer] = can != 0;
    }
  }
  return std::unique_ptr<cuda_backend>(new cuda_backend(driver, std::move(devices)));
}

cuda_backend::cuda_backend(const driver_api& driver,
                           std::vector<std::unique_ptr<device_state>> devices)
    : driver_(driver), devices_(std::move(devices)) {
  note_backend_started("cuda");
}

cuda_backend::~cuda_backend() {
  trackers_.clear();  // their events first, while the contexts are still retained
  for (const auto& d : devices_) driver_.cuDevicePrimaryCtxRelease(d->handle);
}

status cuda_backend::check_device(int device) const {
  if (device >= 0 && device < device_count()) return status::success();
  return status(error_code::invalid_device, "no CUDA device " + std::to_string(device) +
                                                " (the cuda backend has " +
                                                std::to_string(device_count()) + ")");
}

device_properties cuda_backend::properties(int device) const {
  return devices_[static_cast<std::size_t>(device)]->properties;
}

std::size_t cuda_backend::committed_bytes(int device) const {
  return devices_[static_cast<std::size_t>(device)]->committed_bytes.load(
      std::memory_order_acquire);
}

bool cuda_backend::can_access_peer(int device, int peer) const {
  if (!check_device(device).ok() || !check_device(peer).ok()) return false;
  return devices_[static_cast<std::size_t>(device)]
      ->can_access_peer[static_cast<std::size_t>(peer)];
}

// ---- streams and events -----------------------------------------------------------------

void cuda_backend::recycle_drained_trackers_locked() {
  for (auto it = retired_.begin(); it != retired_.end();) {
    if ((*it)->finish_if_drained()) {
      spare_.push_back(*it);
      it = retired_.erase(it);
    } else {
      ++it;
    }
  }
}

void cuda_backend::release_finished_streams() {
  std::lock_guard lock(trackers_mutex_);
  recycle_drained_trackers_locked();
}

result<completion_tracker*> cuda_backend::take_tracker(int device) {
  std::lock_guard lock(trackers_mutex_);
  // Recycle the trackers of destroyed streams whose work has finished meanwhile.
  recycle_drained_trackers_locked();
  for (auto it = spare_.begin(); it != spare_.end(); ++it) {
    if ((*it)->device() != device) continue;  // its pooled events belong to its context
    completion_tracker* reused = *it;
    spare_.erase(it);
    return reused;
  }
  trackers_.push_back(std::make_unique<completion_tracker>(
      driver_, devices_[static_cast<std::size_t>(device)]->context, device));
  return trackers_.back().get();
}

void cuda_backend::retire_tracker(completion_tracker& tracker) {
  std::lock_guard lock(trackers_mutex_);
  retired_.push_back(&tracker);
}

status cuda_backend::settle_unmarked_streams(int device) {
  // A destroyed stream with its final marker learns completion from it (the caller polls).
  // One without cannot: only a synchronize of the context shows its work ran. Such a tracker
  // stays retired until told, so the list may be used after the lock is released; no lock is
  // held while the context synchronizes.
  std::vector<completion_tracker*> unmarked;
  {
    std::lock_guard lock(trackers_mutex_);
    for (completion_tracker* tracker : retired_) {
      if (tracker->device() == device && tracker->needs_context_synchronize())
        unmarked.push_back(tracker);
    }
  }
  if (unmarked.empty()) return status::success();
  const CUcontext context = devices_[static_cast<std::size_t>(device)]->context;
  context_scope scope(driver_, context);
  if (!scope.entered().ok()) return scope.entered();
  if (status s = driver_.check(driver_.cuCtxSynchronize(), "cuCtxSynchronize",
                               "waiting for the work of a destroyed stream of device " +
                                   std::to_string(device) + ", which no marker covers");
      !s.ok())
    return s;
  for (completion_tracker* tracker : unmarked) tracker->note_context_synchronized();
  return status::success();
}

std::size_t cuda_backend::busy_trackers() const {
  std::lock_guard lock(trackers_mutex_);
  return trackers_.size() - spare_.size();
}

result<std::unique_ptr<stream>> cuda_backend::create_stream(int device, stream_timeline& timeline) {
  if (status checked = check_device(device); !checked.ok()) return checked;
  const CUcontext context = devices_[static_cast<std::size_t>(device)]->context;
  context_scope scope(driver_, context);
  if (!scope.entered().ok()) return scope.entered();
  CUstream native = nullptr;
  if (status s = driver_.check(driver_.cuStreamCreate(&native, CU_STREAM_NON_BLOCKING),
                               "cuStreamCreate", "device " + std::to_string(device));
      !s.ok())
    return s;
  completion_tracker* tracker = take_tracker(device).value();
  tracker->attach(native, timeline);
  return std::unique_ptr<stream>(std::make_unique<cuda_stream>(
      *this, driver_, device, context, native, /*owns_native=*/true, timeline, *tracker));
}

result<std::unique_ptr<stream>> cuda_backend::adopt_stream(int device, void* native,
                                                           stream_timeline& timeline,
                                                           bool may_end_first) {
  if (status checked = check_device(device); !checked.ok()) return checked;
  if (native == nullptr) return status(error_code::invalid_value, "no native stream to adopt");
  const CUcontext context = devices_[static_cast<std::size_t>(device)]->context;
  context_scope scope(driver_, context);
  if (!scope.entered().ok()) return scope.entered();
  auto* adopted = static_cast<CUstream>(native);
  CUcontext owner = nullptr;
  if (status s = driver_.check(driver_.cuStreamGetCtx(adopted, &owner), "cuStreamGetCtx",
                               "the stream to adopt is not a CUstream of this process");
      !s.ok())
    return status(error_code::invalid_handle, s.message());
  if (owner != context) {
    return status(error_code::invalid_value,
                  "the stream to adopt belongs to another context than device " +
                      std::to_string(device) +
                      "'s primary context (the one the CUDA runtime uses); soma adopts streams "
                      "of primary contexts only");
  }
  completion_tracker* tracker = take_tracker(device).value();
  tracker->attach(adopted, timeline);
  auto adopted_stream = std::make_unique<cuda_stream>(*this, driver_, device, context, adopted,
                                                      /*owns_native=*/false, timeline, *tracker);
  if (may_end_first) adopted_stream->cover_every_position();
  return std::unique_ptr<stream>(std::move(adopted_stream));
}

result<std::unique_ptr<work_graph>> cuda_backend::create_work_graph(int device) {
  if (status checked = check_device(device); !checked.ok()) return checked;
  result<std::unique_ptr<cuda_graph>> created =
      cuda_graph::create(driver_, devices_[static_cast<std::size_t>(device)]->context, device);
  if (!created.ok()) return created.take_error();
  return std::unique_ptr<work_graph>(std::move(created.value()));
}

status cuda_backend::begin_native_capture(stream& s) {
  return static_cast<cuda_stream&>(s).begin_capture();
}

result<void*> cuda_backend::end_native_capture(stream& s) {
  auto& captured = static_cast<cuda_stream&>(s);
  result<CUgraph> ended = captured.end_capture();
  if (!ended.ok()) return ended.take_error();
  CUgraph graph = ended.value();
  if (graph == nullptr) return static_cast<void*>(nullptr);
  context_scope scope(driver_, captured.context());
  if (!scope.entered().ok()) return scope.entered();
  std::size_t node_count = 0;
  if (status counted = driver_.check(
          driver_.cuGraphGetNodes(graph, nullptr, &node_count), "cuGraphGetNodes",
          "the graph captured on a stream of device " + std::to_string(captured.device()));
      !counted.ok()) {
    driver_.cuGraphDestroy(graph);
    return counted;
  }
  if (node_count == 0) {
    driver_.cuGraphDestroy(graph);  // nothing was recorded
    return static_cast<void*>(nullptr);
  }
  return static_cast<void*>(graph);
}

void cuda_backend::destroy_native_graph(void* native_graph) {
  if (native_graph == nullptr) return;
  // A CUgraph is tied to no context; device 0's is made current for the driver's sake.
  context_scope scope(driver_, devices_.front()->context);
  if (scope.entered().ok()) driver_.cuGraphDestroy(static_cast<CUgraph>(native_graph));
}

result<std::unique_ptr<event>> cuda_backend::create_event() {
  return std::unique_ptr<event>(std::make_unique<cuda_event>(driver_));
}

result<void*> cuda_backend::allocate_host(std::size_t bytes) {
  context_scope scope(driver_, devices_.front()->context);
  if (!scope.entered().ok()) return scope.entered();
  void* pointer = nullptr;
  if (status made = driver_.check(
          driver_.cuMemHostAlloc(&pointer, bytes, host_alloc_portable | host_alloc_devicemap),
          "cuMemHostAlloc", format_bytes(bytes) + " of page-locked host memory");
      !made.ok())
    return made;
  return pointer;
}

void cuda_backend::free_host(void* pointer, std::size_t /*bytes*/) {
  context_scope scope(driver_, devices_.front()->context);
  if (scope.entered().ok()) (void)driver_.cuMemFreeHost(pointer);
}

}  // namespace soma::detail::backend::cuda
