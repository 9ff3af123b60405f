// The C API: translation between somaXxx calls and the runtime, nothing else. Every entry
// point returns a somaError_t, records failures for somaGetLastErrorMessage, and lets no
// exception escape.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "capi/capi_support.hpp"
#include "graph/graph_service.hpp"
#include "graph/stream_capture.hpp"
#include "ipc/ipc.hpp"
#include "runtime/last_error.hpp"
#include "runtime/runtime.hpp"
#include "soma/soma.h"

using soma::detail::error_code;
using soma::detail::result;
using soma::detail::runtime;
using soma::detail::status;

using soma::capi::handle_of;
using soma::capi::null_argument;
using soma::capi::raw_value;
using soma::capi::report;
using soma::capi::store;
using soma::capi::with_runtime;
using soma::detail::graph::graph_service;

namespace {

// S15: on a capturing stream the call becomes a node of the capture's graph.
soma::detail::graph::stream_capture* capture_of(runtime& rt, somaStream_t stream) {
  if (!graph_service::any_capture()) return nullptr;
  return graph_service::of(rt).capture_of(handle_of(stream));
}

}  // namespace

extern "C" {

// ---- errors --------------------------------------------------------------------------------

const char* somaGetErrorName(somaError_t error) {
  switch (raw_value(error)) {
    case somaSuccess:
      return "somaSuccess";
    case somaErrorInvalidValue:
      return "somaErrorInvalidValue";
    case somaErrorMemoryAllocation:
      return "somaErrorMemoryAllocation";
    case somaErrorInitializationError:
      return "somaErrorInitializationError";
    case somaErrorInvalidDevice:
      return "somaErrorInvalidDevice";
    case somaErrorNoDevice:
      return "somaErrorNoDevice";
    case somaErrorOperatingSystem:
      return "somaErrorOperatingSystem";
    case somaErrorInvalidResourceHandle:
      return "somaErrorInvalidResourceHandle";
    case somaErrorIllegalState:
      return "somaErrorIllegalState";
    case somaErrorNotReady:
      return "somaErrorNotReady";
    case somaErrorIllegalAddress:
      return "somaErrorIllegalAddress";
    case somaErrorLaunchFailure:
      return "somaErrorLaunchFailure";
    case somaErrorNotPermitted:
      return "somaErrorNotPermitted";
    case somaErrorNotSupported:
      return "somaErrorNotSupported";
    case somaErrorStreamCaptureUnsupported:
      return "somaErrorStreamCaptureUnsupported";
    case somaErrorStreamCaptureInvalidated:
      return "somaErrorStreamCaptureInvalidated";
    case somaErrorStreamCaptureUnmatched:
      return "somaErrorStreamCaptureUnmatched";
    case somaErrorStreamCaptureUnjoined:
      return "somaErrorStreamCaptureUnjoined";
    case somaErrorUnknown:
      return "somaErrorUnknown";
    case somaErrorAddressSpaceExhausted:
      return "somaErrorAddressSpaceExhausted";
  }
  return "unrecognized error code";
}

const char* somaGetErrorString(somaError_t error) {
  switch (raw_value(error)) {
    case somaSuccess:
      return "no error";
    case somaErrorInvalidValue:
      return "invalid argument";
    case somaErrorMemoryAllocation:
      return "out of memory";
    case somaErrorInitializationError:
      return "initialization error";
    case somaErrorInvalidDevice:
      return "invalid device ordinal";
    case somaErrorNoDevice:
      return "no device available for the selected backend";
    case somaErrorOperatingSystem:
      return "an operating system call failed";
    case somaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case somaErrorIllegalState:
      return "the operation is not allowed in the object's current state";
    case somaErrorNotReady:
      return "device not ready";
    case somaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case somaErrorLaunchFailure:
      return "asynchronous work failed";
    case somaErrorNotPermitted:
      return "operation not permitted";
    case somaErrorNotSupported:
      return "operation not supported";
    case somaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case somaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case somaErrorStreamCaptureUnmatched:
      return "capture was not initiated in this stream";
    case somaErrorStreamCaptureUnjoined:
      return "capturing stream has unjoined work";
    case somaErrorUnknown:
      return "unknown error";
    case somaErrorAddressSpaceExhausted:
      return "address space reservation failed";
  }
  return "unrecognized error code";
}

const char* somaGetLastErrorMessage(void) { return soma::detail::last_error_message().c_str(); }

somaError_t somaGetLastError(void) {
  return static_cast<somaError_t>(soma::detail::take_last_error());
}

// ---- backend and devices ---------------------------------------------------------------------

somaError_t somaSetCpuBackendConfig(const somaCpuBackendConfig* config) {
  if (config == nullptr) return report(null_argument("somaSetCpuBackendConfig", "config"));
  soma::detail::backend::cpu_settings settings;
  settings.device_count = config->deviceCount;
  settings.device_memory_bytes = config->deviceMemoryBytes;
  settings.granularity_bytes = config->granularityBytes;
  return report(runtime::configure_cpu(settings));
}

somaError_t somaGetBackendName(const char** name) {
  return with_runtime([&](runtime& rt) -> status {
    if (name == nullptr) return null_argument("somaGetBackendName", "name");
    static thread_local std::string text;
    text = rt.backend_name();
    *name = text.c_str();
    return status::success();
  });
}

somaError_t somaGetDeviceCount(int* count) {
  return with_runtime([&](runtime& rt) -> status {
    if (count == nullptr) return null_argument("somaGetDeviceCount", "count");
    *count = rt.device_count();
    return status::success();
  });
}

somaError_t somaSetDevice(int device) {
  return with_runtime([&](runtime& rt) { return rt.set_current_device(device); });
}

somaError_t somaGetDevice(int* device) {
  return with_runtime([&](runtime& rt) -> status {
    if (device == nullptr) return null_argument("somaGetDevice", "device");
    *device = rt.current_device();
    return status::success();
  });
}

somaError_t somaDeviceGetAttribute(int* value, somaDeviceAttr attr, int device) {
  return with_runtime([&](runtime& rt) -> status {
    if (value == nullptr) return null_argument("somaDeviceGetAttribute", "value");
    result<int> read =
        rt.device_attribute(static_cast<soma::detail::device_attribute>(raw_value(attr)), device);
    return store(std::move(read), value);
  });
}

somaError_t somaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice) {
  return with_runtime([&](runtime& rt) -> status {
    if (canAccessPeer == nullptr) return null_argument("somaDeviceCanAccessPeer", "canAccessPeer");
    result<bool> can = rt.can_access_peer(device, peerDevice);
    if (!can.ok()) return can.take_error();
    *canAccessPeer = can.value() ? 1 : 0;
    return status::success();
  });
}

somaError_t somaMemGetInfo(size_t* freeBytes, size_t* totalBytes) {
  return with_runtime([&](runtime& rt) -> status {
    if (freeBytes == nullptr || totalBytes == nullptr)
      return null_argument("somaMemGetInfo", "freeBytes or totalBytes");
    return rt.memory_info(freeBytes, totalBytes);
  });
}

somaError_t somaDeviceGetCommittedBytes(size_t* bytes, int device) {
  return with_runtime([&](runtime& rt) -> status {
    if (bytes == nullptr) return null_argument("somaDeviceGetCommittedBytes", "bytes");
    result<std::size_t> committed = rt.committed_bytes(device);
    if (!committed.ok()) return committed.take_error();
    *bytes = committed.value();
    return status::success();
  });
}

somaError_t somaDeviceSynchronize(void) {
  return with_runtime([&](runtime& rt) { return rt.synchronize_device(); });
}

// ---- streams and events ----------------------------------------------------------------------

somaError_t somaStreamCreate(somaStream_t* stream) { return somaStreamCreateWithFlags(stream, 0); }

somaError_t somaStreamCreateWithFlags(somaStream_t* stream, unsigned int flags) {
  return with_runtime([&](runtime& rt) -> status {
    if (stream == nullptr) return null_argument("somaStreamCreate", "stream");
    return store(rt.create_stream(flags), stream);
  });
}

somaError_t somaStreamDestroy(somaStream_t stream) {
  return with_runtime([&](runtime& rt) -> status {
    if (graph_service::any_capture() && rt.stream_of(handle_of(stream)).ok())
      graph_service::of(rt).stream_destroyed(handle_of(stream));
    return rt.destroy_stream(handle_of(stream));
  });
}

somaError_t somaStreamSynchronize(somaStream_t stream) {
  return with_runtime([&](runtime& rt) -> status {
    if (capture_of(rt, stream) != nullptr)
      return *graph_service::of(rt).refuse_while_capturing(handle_of(stream),
                                                           "somaStreamSynchronize");
    return rt.synchronize_stream(handle_of(stream));
  });
}

somaError_t somaStreamQuery(somaStream_t stream) {
  return with_runtime([&](runtime& rt) -> status {
    if (capture_of(rt, stream) != nullptr)
      return *graph_service::of(rt).refuse_while_capturing(handle_of(stream), "somaStreamQuery");
    return rt.query_stream(handle_of(stream));
  });
}

somaError_t somaStreamWaitEvent(somaStream_t stream, somaEvent_t event, unsigned int flags) {
  return with_runtime([&](runtime& rt) -> status {
    if (flags != 0) {
      return status(error_code::invalid_value, "somaStreamWaitEvent: flags must be 0");
    }
    if (graph_service::any_capture()) {
      std::optional<status> captured =
          graph_service::of(rt).capture_wait(handle_of(stream), handle_of(event));
      if (captured) return *captured;
    }
    return rt.stream_wait_event(handle_of(stream), handle_of(event));
  });
}

somaError_t somaStreamGetDevice(somaStream_t stream, int* device) {
  return with_runtime([&](runtime& rt) -> status {
    if (device == nullptr) return null_argument("somaStreamGetDevice", "device");
    return store(rt.stream_device(handle_of(stream)), device);
  });
}

somaError_t somaStreamCreateFromNative(somaStream_t* stream, void* nativeStream, int device) {
  return with_runtime([&](runtime& rt) -> status {
    if (stream == nullptr) return null_argument("somaStreamCreateFromNative", "stream");
    return store(rt.adopt_native_stream(nativeStream, device), stream);
  });
}

somaError_t somaStreamGetNative(somaStream_t stream, void** nativeStream) {
  return with_runtime([&](runtime& rt) -> status {
    if (nativeStream == nullptr) return null_argument("somaStreamGetNative", "nativeStream");
    return store(rt.native_stream(handle_of(stream)), nativeStream);
  });
}

somaError_t somaEventCreate(somaEvent_t* event) { return somaEventCreateWithFlags(event, 0); }

somaError_t somaEventCreateWithFlags(somaEvent_t* event, unsigned int flags) {
  return with_runtime([&](runtime& rt) -> status {
    if (event == nullptr) return null_argument("somaEventCreate", "event");
    return store(rt.create_event(flags), event);
  });
}

somaError_t somaEventDestroy(somaEvent_t event) {
  return with_runtime([&](runtime& rt) { return rt.destroy_event(handle_of(event)); });
}

somaError_t somaEventRecord(somaEvent_t event, somaStream_t stream) {
  return with_runtime([&](runtime& rt) -> status {
    if (graph_service::any_capture()) {
      graph_service& graphs = graph_service::of(rt);
      if (auto* c = capture_of(rt, stream))
        return graphs.capture_record(*c, handle_of(stream), handle_of(event));
      graphs.forget_captured_event(handle_of(event));
    }
    return rt.record_event(handle_of(event), handle_of(stream));
  });
}

somaError_t somaEventQuery(somaEvent_t event) {
  return with_runtime([&](runtime& rt) { return rt.query_event(handle_of(event)); });
}

somaError_t somaEventSynchronize(somaEvent_t event) {
  return with_runtime([&](runtime& rt) { return rt.synchronize_event(handle_of(event)); });
}

somaError_t somaLaunchHostFunc(somaStream_t stream, somaHostFn_t fn, void* userData) {
  return with_runtime([&](runtime& rt) -> status {
    if (fn == nullptr) return null_argument("somaLaunchHostFunc", "fn");
    if (auto* c = capture_of(rt, stream))
      return graph_service::of(rt).capture_host(*c, handle_of(stream), fn, userData, nullptr, 0);
    return rt.launch_host_task(handle_of(stream), [fn, userData] {
      fn(userData);
      return status::success();
    });
  });
}

somaError_t somaLaunchHostFuncWithStatus(somaStream_t stream, somaHostStatusFn_t fn,
                                         void* userData) {
  return with_runtime([&](runtime& rt) -> status {
    if (fn == nullptr) return null_argument("somaLaunchHostFuncWithStatus", "fn");
    if (capture_of(rt, stream) != nullptr) {
      return *graph_service::of(rt).refuse_while_capturing(handle_of(stream),
                                                           "somaLaunchHostFuncWithStatus");
    }
    return rt.launch_host_task(handle_of(stream), [fn, userData] {
      const somaError_t outcome = fn(userData);
      if (outcome == somaSuccess) return status::success();
      return status(static_cast<error_code>(outcome),
                    std::string("host task returned ") + somaGetErrorName(outcome));
    });
  });
}

somaError_t somaLaunchHostFuncWithAccess(somaStream_t stream, somaHostFn_t fn, void* userData,
                                         const somaHostAccess* accesses, size_t count) {
  return with_runtime([&](runtime& rt) -> status {
    if (fn == nullptr) return null_argument("somaLaunchHostFuncWithAccess", "fn");
    // A count no array in memory can have is a garbage argument, refused before any read.
    if (count > static_cast<size_t>(PTRDIFF_MAX) / sizeof(somaHostAccess)) {
      return status(error_code::invalid_value,
                    "somaLaunchHostFuncWithAccess: count " + std::to_string(count) +
                        " is larger than any array of somaHostAccess can be");
    }
    std::vector<runtime::host_access> ranges;
    if (accesses != nullptr) {
      ranges.reserve(std::min<size_t>(count, 1024));  // grows as the list is read
      for (size_t i = 0; i < count; ++i) {
        ranges.push_back(
            {accesses[i].ptr, accesses[i].size,
             static_cast<soma::detail::backend::access_flags>(raw_value(accesses[i].access))});
      }
    }
    if (auto* c = capture_of(rt, stream)) {
      return graph_service::of(rt).capture_host(*c, handle_of(stream), fn, userData,
                                                accesses == nullptr ? nullptr : ranges.data(),
                                                count);
    }
    return rt.launch_host_task_with_access(
        handle_of(stream),
        [fn, userData] {
          fn(userData);
          return status::success();
        },
        accesses == nullptr ? nullptr : ranges.data(), count);
  });
}

somaError_t somaMemsetAsync(void* devPtr, int value, size_t count, somaStream_t stream) {
  return with_runtime([&](runtime& rt) -> status {
    if (auto* c = capture_of(rt, stream))
      return graph_service::of(rt).capture_memset(*c, handle_of(stream), devPtr, value, count);
    return rt.memset_async(devPtr, value, count, handle_of(stream));
  });
}

somaError_t somaMemcpyAsync(void* dst, const void* src, size_t count, somaMemcpyKind kind,
                            somaStream_t stream) {
  return with_runtime([&](runtime& rt) -> status {
    const int raw_kind = raw_value(kind);
    if (raw_kind < somaMemcpyHostToHost || raw_kind > somaMemcpyDefault) {
      return status(error_code::invalid_value, "somaMemcpyAsync: kind " + std::to_string(raw_kind) +
                                                   " is not a somaMemcpyKind");
    }
    if (auto* c = capture_of(rt, stream))
      return graph_service::of(rt).capture_memcpy(*c, handle_of(stream), dst, src, count);
    return rt.memcpy_async(dst, src, count, handle_of(stream));
  });
}

// ---- host memory and stream value operations ------------------------------------------------

somaError_t somaMallocHost(void** ptr, size_t size) {
  return with_runtime([&](runtime& rt) -> status {
    if (ptr == nullptr) return null_argument("somaMallocHost", "ptr");
    result<void*> made = rt.allocate_host(size);
    if (!made.ok()) return made.take_error();
    *ptr = made.value();
    return status::success();
  });
}

somaError_t somaFreeHost(void* ptr) {
  return with_runtime([&](runtime& rt) { return rt.free_host(ptr); });
}

somaError_t somaStreamWaitValue32(somaStream_t stream, uint32_t* addr, uint32_t value,
                                  unsigned int flags) {
  return with_runtime([&](runtime& rt) -> status {
    if (capture_of(rt, stream) != nullptr)
      return *graph_service::of(rt).refuse_while_capturing(handle_of(stream),
                                                           "somaStreamWaitValue32");
    return rt.stream_wait_value32(handle_of(stream), addr, value, flags);
  });
}

somaError_t somaStreamWriteValue32(somaStream_t stream, uint32_t* addr, uint32_t value,
                                   unsigned int flags) {
  return with_runtime([&](runtime& rt) -> status {
    if (capture_of(rt, stream) != nullptr)
      return *graph_service::of(rt).refuse_while_capturing(handle_of(stream),
                                                           "somaStreamWriteValue32");
    return rt.stream_write_value32(handle_of(stream), addr, value, flags);
  });
}

// ---- allocation ------------------------------------------------------------------------------

somaError_t somaMallocAsync(void** devPtr, size_t size, somaStream_t stream) {
  return with_runtime([&](runtime& rt) -> status {
    if (devPtr == nullptr) return null_argument("somaMallocAsync", "devPtr");
    if (auto* c = capture_of(rt, stream))
      return graph_service::of(rt).capture_alloc(*c, handle_of(stream), devPtr, size, 0);
    return store(rt.allocate(size, handle_of(stream)), devPtr);
  });
}

somaError_t somaMallocFromPoolAsync(void** ptr, size_t size, somaMemPool_t memPool,
                                    somaStream_t stream) {
  return with_runtime([&](runtime& rt) -> status {
    if (ptr == nullptr) return null_argument("somaMallocFromPoolAsync", "ptr");
    if (auto* c = capture_of(rt, stream)) {
      if (memPool == nullptr) return null_argument("somaMallocFromPoolAsync", "memPool");
      return graph_service::of(rt).capture_alloc(*c, handle_of(stream), ptr, size,
                                                 handle_of(memPool));
    }
    return store(rt.allocate_from_pool(size, handle_of(memPool), handle_of(stream)), ptr);
  });
}

somaError_t somaFreeAsync(void* devPtr, somaStream_t stream) {
  return with_runtime([&](runtime& rt) -> status {
    if (auto* c = capture_of(rt, stream))
      return graph_service::of(rt).capture_free(*c, handle_of(stream), devPtr);
    return rt.free(devPtr, handle_of(stream));
  });
}

// ---- pools ---------------------------------------------------------------------------------

somaError_t somaMemPoolCreate(somaMemPool_t* memPool, const somaMemPoolProps* poolProps) {
  return with_runtime([&](runtime& rt) -> status {
    if (memPool == nullptr) return null_argument("somaMemPoolCreate", "memPool");
    if (poolProps == nullptr) return null_argument("somaMemPoolCreate", "poolProps");
    soma::detail::raw_pool_properties raw;
    raw.allocation_type = raw_value(poolProps->allocType);
    raw.handle_types = static_cast<unsigned>(raw_value(poolProps->handleTypes));
    raw.location_type = raw_value(poolProps->location.type);
    raw.location_id = poolProps->location.id;
    raw.has_win32_security_attributes = poolProps->win32SecurityAttributes != nullptr;
    raw.max_size_bytes = poolProps->maxSize;
    raw.usage = poolProps->usage;
    for (unsigned char byte : poolProps->reserved)
      raw.reserved_is_zero = raw.reserved_is_zero && byte == 0;
    return store(rt.create_pool(raw), memPool);
  });
}

somaError_t somaMemPoolDestroy(somaMemPool_t memPool) {
  return with_runtime([&](runtime& rt) { return rt.destroy_pool(handle_of(memPool)); });
}

somaError_t somaDeviceGetDefaultMemPool(somaMemPool_t* memPool, int device) {
  return with_runtime([&](runtime& rt) -> status {
    if (memPool == nullptr) return null_argument("somaDeviceGetDefaultMemPool", "memPool");
    return store(rt.default_pool(device), memPool);
  });
}

somaError_t somaDeviceSetMemPool(int device, somaMemPool_t memPool) {
  return with_runtime([&](runtime& rt) { return rt.set_device_pool(device, handle_of(memPool)); });
}

somaError_t somaDeviceGetMemPool(somaMemPool_t* memPool, int device) {
  return with_runtime([&](runtime& rt) -> status {
    if (memPool == nullptr) return null_argument("somaDeviceGetMemPool", "memPool");
    return store(rt.device_pool(device), memPool);
  });
}

somaError_t somaMemPoolSetAttribute(somaMemPool_t memPool, somaMemPoolAttr attr, void* value) {
  return with_runtime([&](runtime& rt) {
    return rt.set_pool_attribute(handle_of(memPool),
                                 static_cast<soma::detail::pool_attribute>(raw_value(attr)), value);
  });
}

somaError_t somaMemPoolGetAttribute(somaMemPool_t memPool, somaMemPoolAttr attr, void* value) {
  return with_runtime([&](runtime& rt) {
    return rt.get_pool_attribute(handle_of(memPool),
                                 static_cast<soma::detail::pool_attribute>(raw_value(attr)), value);
  });
}

somaError_t somaMemPoolTrimTo(somaMemPool_t memPool, size_t minBytesToKeep) {
  return with_runtime(
      [&](runtime& rt) { return rt.trim_pool(handle_of(memPool), minBytesToKeep); });
}

somaError_t somaMemPoolSetAccess(somaMemPool_t memPool, const somaMemAccessDesc* descList,
                                 size_t count) {
  return with_runtime([&](runtime& rt) -> status {
    if (status ok = rt.check_access_list(descList, count); !ok.ok()) return ok;
    std::vector<runtime::access_request> requests;
    if (descList != nullptr) {
      requests.reserve(count);
      for (size_t i = 0; i < count; ++i) {
        requests.push_back({raw_value(descList[i].location.type), descList[i].location.id,
                            raw_value(descList[i].flags)});
      }
    }
    return rt.set_pool_access(handle_of(memPool), descList == nullptr ? nullptr : requests.data(),
                              count);
  });
}

somaError_t somaMemPoolGetAccess(somaMemAccessFlags* flags, somaMemPool_t memPool,
                                 somaMemLocation* location) {
  return with_runtime([&](runtime& rt) -> status {
    if (flags == nullptr) return null_argument("somaMemPoolGetAccess", "flags");
    if (location == nullptr) return null_argument("somaMemPoolGetAccess", "location");
    result<int> access =
        rt.pool_access(handle_of(memPool), raw_value(location->type), location->id);
    if (!access.ok()) return access.take_error();
    *flags = static_cast<somaMemAccessFlags>(access.value());
    return status::success();
  });
}

somaError_t somaMemPoolSetName(somaMemPool_t memPool, const char* name) {
  return with_runtime([&](runtime& rt) { return rt.set_pool_name(handle_of(memPool), name); });
}

// ---- pointers ------------------------------------------------------------------------------

somaError_t somaPointerGetAttributes(somaPointerAttributes* attributes, const void* ptr) {
  return with_runtime([&](runtime& rt) -> status {
    if (attributes == nullptr) return null_argument("somaPointerGetAttributes", "attributes");
    const soma::detail::pointer_info info = rt.describe_pointer(ptr);
    std::memset(attributes, 0, sizeof *attributes);
    if (info.is_host) {  // somaMallocHost memory, reachable from the host and every device
      attributes->type = somaMemoryTypeHost;
      attributes->hostPointer = const_cast<void*>(ptr);
      attributes->devicePointer = const_cast<void*>(ptr);
      attributes->base = reinterpret_cast<void*>(info.base);
      attributes->size = info.requested_bytes;
      return status::success();
    }
    attributes->type = info.is_live ? somaMemoryTypeDevice : somaMemoryTypeUnregistered;
    attributes->device = info.device;
    attributes->devicePointer = info.is_live ? const_cast<void*>(ptr) : nullptr;
    attributes->hostPointer =
        info.is_live && rt.backend_name() == "cpu" ? const_cast<void*>(ptr) : nullptr;
    attributes->pool = reinterpret_cast<somaMemPool_t>(info.pool_handle);
    attributes->base = reinterpret_cast<void*>(info.base);
    attributes->size = info.requested_bytes;
    attributes->isLiveAllocation = info.is_live ? 1 : 0;
    return status::success();
  });
}

// ---- sharing pools between processes (S7) --------------------------------------------------

somaError_t somaMemPoolExportToShareableHandle(void* shareableHandle, somaMemPool_t memPool,
                                               somaMemAllocationHandleType handleType,
                                               unsigned long long flags) {
  return with_runtime([&](runtime& rt) -> status {
    if (shareableHandle == nullptr)
      return null_argument("somaMemPoolExportToShareableHandle", "shareableHandle");
    result<int> fd =
        soma::detail::ipc::export_pool(rt, handle_of(memPool), raw_value(handleType), flags);
    if (!fd.ok()) return fd.take_error();
    *static_cast<int*>(shareableHandle) = fd.value();
    return status::success();
  });
}

somaError_t somaMemPoolImportFromShareableHandle(somaMemPool_t* memPool, void* shareableHandle,
                                                 somaMemAllocationHandleType handleType,
                                                 unsigned long long flags) {
  return with_runtime([&](runtime& rt) -> status {
    if (memPool == nullptr) return null_argument("somaMemPoolImportFromShareableHandle", "memPool");
    const auto fd = reinterpret_cast<std::intptr_t>(shareableHandle);
    return store(soma::detail::ipc::import_pool(rt, fd, raw_value(handleType), flags), memPool);
  });
}

somaError_t somaMemPoolExportPointer(somaMemPoolPtrExportData* exportData, void* ptr) {
  return with_runtime([&](runtime& rt) -> status {
    if (exportData == nullptr) return null_argument("somaMemPoolExportPointer", "exportData");
    if (ptr == nullptr) return null_argument("somaMemPoolExportPointer", "ptr");
    result<soma::detail::ipc::export_data_bytes> data = soma::detail::ipc::export_pointer(rt, ptr);
    if (!data.ok()) return data.take_error();
    static_assert(sizeof exportData->reserved == soma::detail::ipc::export_data_size);
    std::memcpy(exportData->reserved, data.value().data(), data.value().size());
    return status::success();
  });
}

somaError_t somaMemPoolImportPointer(void** ptr, somaMemPool_t memPool,
                                     somaMemPoolPtrExportData* exportData) {
  return with_runtime([&](runtime& rt) -> status {
    if (ptr == nullptr) return null_argument("somaMemPoolImportPointer", "ptr");
    if (exportData == nullptr) return null_argument("somaMemPoolImportPointer", "exportData");
    soma::detail::ipc::export_data_bytes data{};
    std::memcpy(data.data(), exportData->reserved, data.size());
    return store(soma::detail::ipc::import_pointer(rt, handle_of(memPool), data), ptr);
  });
}

}  // extern "C"
