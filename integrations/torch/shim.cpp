#include "shim.hpp"

#include <soma/cxx/device.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace soma::torch_integration {
namespace {

constexpr std::uint64_t no_limit = UINT64_MAX;

bool environment_flag(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && value[0] != '\0' && std::strcmp(value, "0") != 0;
}

std::string on(int device, cudaStream_t native) {
  return "device " + std::to_string(device) + ", stream " +
         format_address(reinterpret_cast<std::uintptr_t>(native));
}

}  // namespace

somaError_t synchronize_device(int device) {
  const soma::device_guard on(device);
  return on.status() != somaSuccess ? on.status() : somaDeviceSynchronize();
}

shim& shim::instance() {
  // Never destroyed (see the header).
  static shim* const process_shim = new shim();
  return *process_shim;
}

shim::shim() : abort_on_oom_(environment_flag("SOMA_TORCH_ABORT_ON_OOM")) {
  const char* backend = nullptr;
  int count = 0;
  somaError_t status = somaGetBackendName(&backend);
  if (status == somaSuccess) status = somaGetDeviceCount(&count);
  if (status != somaSuccess) {
    start_status_ = status;
    start_failure_ = "soma could not start: " + describe_soma_error(status);
    count = 0;
    log_.report(failure_kind::start, start_failure_);
  } else {
    adopt_native_ = backend != nullptr && std::strcmp(backend, "cpu") != 0;
  }
  pools_ = std::make_unique<device_pools>(count);
  streams_ = std::make_unique<stream_registry>(adopt_native_, count);
  for (int device = 0; device < count; ++device)
    pools_->state(device).limit_bytes.store(no_limit, std::memory_order_relaxed);
}

somaError_t shim::check_device(int device, std::string* failure) const {
  if (start_status_ != somaSuccess) {
    *failure = start_failure_;
    return start_status_;
  }
  if (!pools_->is_device(device)) {
    *failure = "device " + std::to_string(device) + " does not exist (soma has " +
               std::to_string(pools_->device_count()) + ")";
    return somaErrorInvalidDevice;
  }
  return somaSuccess;
}

// ---- allocation ---------------------------------------------------------------------------------

void* shim::allocate(std::int64_t size, int device, cudaStream_t native) {
  if (size == 0) return nullptr;
  std::string failure;
  void* pointer = nullptr;
  const somaError_t status = try_allocate(size, device, native, &pointer, &failure);
  if (status == somaSuccess) return pointer;
  if (pools_->is_device(device))
    pools_->state(device).failed_allocations.fetch_add(1, std::memory_order_relaxed);
  const std::string message = "allocating " +
                              (size > 0 ? format_bytes(static_cast<std::uint64_t>(size))
                                        : std::to_string(size) + " bytes") +
                              " on " + on(device, native) + " failed: " + failure +
                              " (PyTorch receives NULL: the tensor faults where it is first "
                              "used; SOMA_TORCH_ABORT_ON_OOM=1 stops the process here instead)";
  log_.report(failure_kind::allocate, message);
  if (abort_on_oom_) {
    std::fprintf(stderr, "soma_torch: SOMA_TORCH_ABORT_ON_OOM is set: aborting\n");
    std::abort();
  }
  return nullptr;
}

somaError_t shim::try_allocate(std::int64_t size, int device, cudaStream_t native, void** pointer,
                               std::string* failure) {
  if (somaError_t status = check_device(device, failure); status != somaSuccess) return status;
  if (size < 0) {
    *failure = "the size is negative";
    return somaErrorInvalidValue;
  }
  const auto bytes = static_cast<std::size_t>(size);
  somaStream_t stream = nullptr;
  somaMemPool_t pool = nullptr;
  if (somaError_t status = streams_->get(device, native, &stream, failure); status != somaSuccess)
    return status;
  if (somaError_t status = pools_->pool(device, &pool, failure); status != somaSuccess)
    return status;
  device_state& state = pools_->state(device);
  if (const std::uint64_t limit = state.limit_bytes.load(std::memory_order_relaxed);
      limit != no_limit) {
    std::uint64_t used = 0;
    (void)somaMemPoolGetAttribute(pool, somaMemPoolAttrUsedMemCurrent, &used);
    if (used + bytes > limit) {
      *failure = "the memory fraction allows " + format_bytes(limit) + " of live memory (" +
                 format_bytes(used) + " live)";
      return somaErrorMemoryAllocation;
    }
  }
  somaError_t status = somaMallocFromPoolAsync(pointer, bytes, pool, stream);
  if (status == somaErrorMemoryAllocation) {
    // As PyTorch's own allocator does before it gives up: wait for the device, which proves
    // every pending free complete (S12) so that memory freed on other streams can serve, and
    // try once more.
    *failure = describe_soma_error(status);
    if (synchronize_device(device) == somaSuccess) {
      status = somaMallocFromPoolAsync(pointer, bytes, pool, stream);
      if (status != somaSuccess)
        *failure = describe_soma_error(status) + " (also after a device synchronize)";
    }
  } else if (status != somaSuccess) {
    *failure = describe_soma_error(status);
  }
  if (status == somaSuccess) state.allocations.fetch_add(1, std::memory_order_relaxed);
  return status;
}

// ---- free and record_stream -------------------------------------------------------------------

void shim::free(void* pointer, int device, cudaStream_t native) {
  if (pointer == nullptr) return;
  std::string failure;
  const somaError_t status = try_free(pointer, device, native, &failure);
  if (status == somaSuccess) return;
  if (pools_->is_device(device))
    pools_->state(device).failed_frees.fetch_add(1, std::memory_order_relaxed);
  log_.report(failure_kind::free,
              "freeing " + format_address(pointer) + " on " + on(device, native) + ": " + failure);
}

somaError_t shim::try_free(void* pointer, int device, cudaStream_t native, std::string* failure) {
  if (somaError_t status = check_device(device, failure); status != somaSuccess) return status;
  somaStream_t stream = nullptr;
  if (somaError_t status = streams_->get(device, native, &stream, failure); status != somaSuccess) {
    *failure += "; the memory is kept (not freed): its free cannot be put in that stream's order";
    return status;
  }
  device_state& state = pools_->state(device);
  if (!uses_.empty()) {
    const recorded_streams recorded = uses_.take(pointer);
    if (!recorded.empty()) {
      bool unified = false;
      if (somaError_t status =
              free_after_uses(pointer, device, stream, recorded, &unified, failure);
          status != somaSuccess) {
        return status;
      }
      if (unified) state.cross_stream_frees.fetch_add(1, std::memory_order_relaxed);
      state.frees.fetch_add(1, std::memory_order_relaxed);
      return somaSuccess;
    }
  }
  if (somaError_t status = somaFreeAsync(pointer, stream); status != somaSuccess) {
    *failure = describe_soma_error(status);
    return status;
  }
  state.frees.fetch_add(1, std::memory_order_relaxed);
  return somaSuccess;
}

somaError_t shim::free_after_uses(void* pointer, int device, somaStream_t stream,
                                  const recorded_streams& recorded, bool* unified,
                                  std::string* failure) {
  const std::string kept =
      "; the memory is kept (not freed) rather than reused while another stream may still use it";
  if (recorded.unordered) {
    *failure = "a stream named for it by record_stream could not be adopted (reported then)" + kept;
    return somaErrorInvalidValue;
  }
  std::vector<somaStream_t> users;
  for (somaStream_t user : recorded.streams)
    if (user != stream) users.push_back(user);
  if (users.empty()) {  // only the allocating stream was named: an ordinary free
    const somaError_t status = somaFreeAsync(pointer, stream);
    if (status != somaSuccess) *failure = describe_soma_error(status);
    return status;
  }
  somaStream_t unifying = nullptr;
  if (somaError_t status = free_stream(device, &unifying, failure); status != somaSuccess) {
    *failure += kept;
    return status;
  }
  users.push_back(stream);
  for (somaStream_t user : users) {
    somaError_t status = somaSuccess;
    somaEvent_t event = take_event(&status);
    if (status == somaSuccess) status = somaEventRecord(event, user);
    // The wait takes the event's position now, so the event can serve the next free at once.
    if (status == somaSuccess) status = somaStreamWaitEvent(unifying, event, 0);
    if (status != somaSuccess) *failure = describe_soma_error(status) + kept;
    if (event != nullptr) give_event(event);
    if (status != somaSuccess) return status;
  }
  const somaError_t status = somaFreeAsync(pointer, unifying);
  if (status != somaSuccess) *failure = describe_soma_error(status);
  *unified = status == somaSuccess;
  return status;
}

somaError_t shim::free_stream(int device, somaStream_t* stream, std::string* failure) {
  std::atomic<somaStream_t>& slot = pools_->state(device).free_stream;
  if (somaStream_t ready = slot.load(std::memory_order_acquire)) {
    *stream = ready;
    return somaSuccess;
  }
  std::lock_guard lock(free_streams_mutex_);
  if (somaStream_t ready = slot.load(std::memory_order_acquire)) {
    *stream = ready;
    return somaSuccess;
  }
  somaStream_t created = nullptr;
  if (somaError_t status = create_own_stream(device, &created); status != somaSuccess) {
    *failure = "device " + std::to_string(device) +
               ": creating the free stream failed: " + describe_soma_error(status);
    return status;
  }
  slot.store(created, std::memory_order_release);
  *stream = created;
  return somaSuccess;
}

void shim::record_stream(void* pointer, cudaStream_t native) {
  if (pointer == nullptr || start_status_ != somaSuccess) return;
  somaPointerAttributes attributes;
  std::memset(&attributes, 0, sizeof attributes);
  if (somaPointerGetAttributes(&attributes, pointer) != somaSuccess ||
      attributes.isLiveAllocation == 0 || attributes.base != pointer ||
      !pools_->is_device(attributes.device) ||
      attributes.pool != pools_->existing(attributes.device)) {
    return;  // not the start of an allocation of ours: PyTorch's storage came from elsewhere
  }
  // The stream normally belongs to the allocation's device; PyTorch allows another device's
  // stream too, so on failure the other devices are tried (adoption checks the context).
  std::string failure;
  somaStream_t stream = nullptr;
  somaError_t status = streams_->get(attributes.device, native, &stream, &failure);
  for (int device = 0; status != somaSuccess && adopt_native_ && device < device_count();
       ++device) {
    std::string ignored;
    if (device != attributes.device) status = streams_->get(device, native, &stream, &ignored);
  }
  if (status != somaSuccess) {
    stream = nullptr;
    log_.report(failure_kind::record_stream,
                "record_stream of " + format_address(pointer) + " on " +
                    on(attributes.device, native) + ": " + failure +
                    "; its free will be kept back (the memory leaks instead of being reused "
                    "while that stream may use it)");
  }
  uses_.record(pointer, stream);
}

somaEvent_t shim::take_event(somaError_t* status) {
  {
    std::lock_guard lock(events_mutex_);
    if (!spare_events_.empty()) {
      somaEvent_t event = spare_events_.back();
      spare_events_.pop_back();
      *status = somaSuccess;
      return event;
    }
  }
  somaEvent_t event = nullptr;
  *status = somaEventCreateWithFlags(&event, somaEventDisableTiming);
  return *status == somaSuccess ? event : nullptr;
}

void shim::give_event(somaEvent_t event) {
  std::lock_guard lock(events_mutex_);
  spare_events_.push_back(event);
}

// ---- hooks and control ----------------------------------------------------------------------

void shim::empty_cache() {
  if (start_status_ != somaSuccess) return;
  for (int device = 0; device < device_count(); ++device) {
    somaMemPool_t pool = pools_->existing(device);
    if (pool == nullptr) continue;
    // Synchronize first: memory whose free is not yet known complete cannot be released.
    somaError_t status = synchronize_device(device);
    if (status == somaSuccess) status = somaMemPoolTrimTo(pool, 0);
    if (status != somaSuccess) {
      log_.report(failure_kind::cache, "empty_cache on device " + std::to_string(device) + ": " +
                                           describe_soma_error(status));
    }
  }
}

void shim::set_memory_fraction(double fraction, int device) {
  std::string failure;
  if (check_device(device, &failure) != somaSuccess || std::isnan(fraction) || fraction < 0) {
    log_.report(
        failure_kind::configure,
        "set_memory_fraction(" + std::to_string(fraction) + ", " + std::to_string(device) +
            ") ignored" +
            (failure.empty() ? std::string(": the fraction is not in [0, 1]") : ": " + failure));
    return;
  }
  std::uint64_t limit = no_limit;
  if (fraction < 1.0) {
    int total_mib = 0;
    if (somaError_t status = somaDeviceGetAttribute(&total_mib, somaDevAttrTotalMemoryMiB, device);
        status != somaSuccess) {
      log_.report(failure_kind::configure, "set_memory_fraction: reading device " +
                                               std::to_string(device) +
                                               "'s memory failed: " + describe_soma_error(status));
      return;
    }
    const double total_bytes = static_cast<double>(total_mib) * 1024.0 * 1024.0;
    limit = static_cast<std::uint64_t>(fraction * total_bytes);
  }
  pools_->state(device).limit_bytes.store(limit, std::memory_order_relaxed);
}

void* shim::base_allocation(void* pointer, std::size_t* size) {
  if (pointer == nullptr || start_status_ != somaSuccess) return pointer;
  somaPointerAttributes attributes;
  std::memset(&attributes, 0, sizeof attributes);
  if (somaPointerGetAttributes(&attributes, pointer) != somaSuccess ||
      attributes.isLiveAllocation == 0) {
    return pointer;
  }
  if (size != nullptr) *size = attributes.size;
  return attributes.base;
}

somaError_t shim::configure(const pool_settings& settings) {
  std::string failure;
  somaError_t status = start_status_;
  if (status != somaSuccess) {
    failure = start_failure_;
  } else {
    status = pools_->configure(settings, &failure);
  }
  if (status != somaSuccess) log_.remember(failure);
  return status;
}

somaError_t shim::stats(int device, soma_torch_stats* stats) {
  std::string failure;
  somaError_t status = check_device(device, &failure);
  if (status == somaSuccess && stats == nullptr) {
    failure = "soma_torch_get_stats: stats is NULL";
    status = somaErrorInvalidValue;
  }
  if (status != somaSuccess) {
    log_.remember(failure);
    return status;
  }
  std::memset(stats, 0, sizeof *stats);
  if (somaMemPool_t pool = pools_->existing(device); pool != nullptr) {
    const struct {
      somaMemPoolAttr attribute;
      std::uint64_t* value;
    } figures[] = {{somaMemPoolAttrReservedMemCurrent, &stats->reserved_bytes},
                   {somaMemPoolAttrReservedMemHigh, &stats->reserved_high_bytes},
                   {somaMemPoolAttrUsedMemCurrent, &stats->used_bytes},
                   {somaMemPoolAttrUsedMemHigh, &stats->used_high_bytes}};
    for (const auto& figure : figures) {
      status = somaMemPoolGetAttribute(pool, figure.attribute, figure.value);
      if (status != somaSuccess) {
        log_.remember("soma_torch_get_stats: " + describe_soma_error(status));
        return status;
      }
    }
  }
  const device_state& state = pools_->state(device);
  stats->allocations = state.allocations.load(std::memory_order_relaxed);
  stats->frees = state.frees.load(std::memory_order_relaxed);
  stats->failed_allocations = state.failed_allocations.load(std::memory_order_relaxed);
  stats->failed_frees = state.failed_frees.load(std::memory_order_relaxed);
  stats->cross_stream_frees = state.cross_stream_frees.load(std::memory_order_relaxed);
  stats->streams = streams_->count(device);
  return somaSuccess;
}

somaError_t shim::reset_peak(int device) {
  std::string failure;
  // -1: every device; the check then only asks whether soma started.
  if (somaError_t status = check_device(device == -1 ? 0 : device, &failure);
      status != somaSuccess) {
    log_.remember(failure);
    return status;
  }
  for (int d = 0; d < device_count(); ++d) {
    somaMemPool_t pool = pools_->existing(d);
    if ((device != -1 && d != device) || pool == nullptr) continue;
    for (const somaMemPoolAttr attribute :
         {somaMemPoolAttrReservedMemHigh, somaMemPoolAttrUsedMemHigh}) {
      std::uint64_t zero = 0;
      if (somaError_t status = somaMemPoolSetAttribute(pool, attribute, &zero);
          status != somaSuccess) {
        log_.remember("soma_torch_reset_peak: " + describe_soma_error(status));
        return status;
      }
    }
  }
  return somaSuccess;
}

somaError_t shim::synchronize(int device) {
  std::string failure;
  if (somaError_t status = check_device(device == -1 ? 0 : device, &failure);
      status != somaSuccess) {
    log_.remember(failure);
    return status;
  }
  for (int d = 0; d < device_count(); ++d) {
    // -1: the devices PyTorch used (those with a pool); one device: that one in any case.
    if (device == -1 ? pools_->existing(d) == nullptr : d != device) continue;
    if (somaError_t status = synchronize_device(d); status != somaSuccess) {
      log_.remember("soma_torch_synchronize: device " + std::to_string(d) + ": " +
                    describe_soma_error(status));
      return status;
    }
  }
  return somaSuccess;
}

int shim::device_count() const noexcept {
  return start_status_ == somaSuccess ? pools_->device_count() : -1;
}

int shim::adopts_native_streams() const noexcept {
  if (start_status_ != somaSuccess) return -1;
  return adopt_native_ ? 1 : 0;
}

somaStream_t shim::stream(int device, cudaStream_t native) {
  std::string failure;
  somaStream_t stream = nullptr;
  somaError_t status = check_device(device, &failure);
  if (status == somaSuccess) status = streams_->get(device, native, &stream, &failure);
  if (status != somaSuccess) {
    log_.remember(failure);
    return nullptr;
  }
  return stream;
}

somaMemPool_t shim::pool(int device) {
  std::string failure;
  somaMemPool_t pool = nullptr;
  somaError_t status = check_device(device, &failure);
  if (status == somaSuccess) status = pools_->pool(device, &pool, &failure);
  if (status != somaSuccess) {
    log_.remember(failure);
    return nullptr;
  }
  return pool;
}

}  // namespace soma::torch_integration
