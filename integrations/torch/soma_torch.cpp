// The C functions of soma_torch.h: argument translation around the shim, nothing else. None
// lets an exception escape (PyTorch calls them through plain function pointers); the only one
// the shim can throw is std::bad_alloc from its bookkeeping, reported like any failure.
#include "soma_torch.h"

#include <cstdio>
#include <exception>
#include <new>

#include "allocation_trace.hpp"
#include "shim.hpp"

using soma::torch_integration::allocation_trace;
using soma::torch_integration::pool_settings;
using soma::torch_integration::shim;

namespace {

void report_exception(const char* call, const char* what) noexcept {
  // fprintf only: the failure may be that no memory is left for a message.
  std::fprintf(stderr, "soma_torch: %s: internal error: %s\n", call, what);
}

// Runs body() -> R, mapping an exception to `failed`.
template <typename R, typename Body>
R guarded(const char* call, R failed, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    report_exception(call, "host memory exhausted");
  } catch (const std::exception& e) {
    report_exception(call, e.what());
  } catch (...) {
    report_exception(call, "unknown exception");
  }
  return failed;
}

template <typename Body>
void guarded_void(const char* call, Body&& body) noexcept {
  (void)guarded(call, 0, [&] {
    body();
    return 0;
  });
}

}  // namespace

extern "C" {

void* soma_torch_malloc(ssize_t size, int device, cudaStream_t stream) {
  return guarded("soma_torch_malloc", static_cast<void*>(nullptr), [&] {
    void* pointer = shim::instance().allocate(static_cast<std::int64_t>(size), device, stream);
    if (allocation_trace::instance().active())
      allocation_trace::instance().allocated(pointer, static_cast<std::size_t>(size));
    return pointer;
  });
}

void soma_torch_free(void* ptr, ssize_t /*size*/, int device, cudaStream_t stream) {
  guarded_void("soma_torch_free", [&] {
    if (allocation_trace::instance().active()) allocation_trace::instance().freed(ptr);
    shim::instance().free(ptr, device, stream);
  });
}

void soma_torch_record_stream(void* ptr, cudaStream_t stream) {
  guarded_void("soma_torch_record_stream", [&] { shim::instance().record_stream(ptr, stream); });
}

void soma_torch_empty_cache(void) {
  guarded_void("soma_torch_empty_cache", [] { shim::instance().empty_cache(); });
}

void soma_torch_set_memory_fraction(double fraction, int device) {
  guarded_void("soma_torch_set_memory_fraction",
               [&] { shim::instance().set_memory_fraction(fraction, device); });
}

void* soma_torch_base_allocation(void* ptr, size_t* size) {
  return guarded("soma_torch_base_allocation", ptr,
                 [&] { return shim::instance().base_allocation(ptr, size); });
}

int soma_torch_configure(uint64_t release_threshold_bytes, int follow_event_dependencies,
                         int allow_opportunistic, int allow_internal_dependencies) {
  return guarded("soma_torch_configure", static_cast<int>(somaErrorUnknown), [&] {
    pool_settings settings;
    settings.release_threshold_bytes = release_threshold_bytes;
    settings.follow_event_dependencies = follow_event_dependencies;
    settings.allow_opportunistic = allow_opportunistic;
    settings.allow_internal_dependencies = allow_internal_dependencies;
    return static_cast<int>(shim::instance().configure(settings));
  });
}

int soma_torch_get_stats(int device, soma_torch_stats* stats) {
  return guarded("soma_torch_get_stats", static_cast<int>(somaErrorUnknown),
                 [&] { return static_cast<int>(shim::instance().stats(device, stats)); });
}

int soma_torch_reset_peak(int device) {
  return guarded("soma_torch_reset_peak", static_cast<int>(somaErrorUnknown),
                 [&] { return static_cast<int>(shim::instance().reset_peak(device)); });
}

int soma_torch_synchronize(int device) {
  return guarded("soma_torch_synchronize", static_cast<int>(somaErrorUnknown),
                 [&] { return static_cast<int>(shim::instance().synchronize(device)); });
}

int soma_torch_device_count(void) {
  return guarded("soma_torch_device_count", -1, [] { return shim::instance().device_count(); });
}

int soma_torch_adopts_native_streams(void) {
  return guarded("soma_torch_adopts_native_streams", -1,
                 [] { return shim::instance().adopts_native_streams(); });
}

somaStream_t soma_torch_get_stream(int device, cudaStream_t stream) {
  return guarded("soma_torch_get_stream", static_cast<somaStream_t>(nullptr),
                 [&] { return shim::instance().stream(device, stream); });
}

somaMemPool_t soma_torch_get_pool(int device) {
  return guarded("soma_torch_get_pool", static_cast<somaMemPool_t>(nullptr),
                 [&] { return shim::instance().pool(device); });
}

size_t soma_torch_last_error(char* buffer, size_t size) {
  return guarded("soma_torch_last_error", static_cast<size_t>(0),
                 [&] { return shim::instance().log().copy_last(buffer, size); });
}

}  // extern "C"
