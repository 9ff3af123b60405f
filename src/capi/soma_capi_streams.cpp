// The C API of streams, events, work enqueued on streams, host memory and stream value
// operations: translation to the runtime, or to the graph layer on a capturing stream (S15).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "capi/capture_dispatch.hpp"
#include "runtime/runtime.hpp"
#include "soma/soma.h"

using namespace soma::capi;  // NOLINT(google-build-using-namespace): the C API's helpers

namespace {

// A stream value operation of the runtime (wait or write), refused on a capturing stream.
using value_operation_of_runtime = soma::detail::status (runtime::*)(std::uintptr_t, std::uint32_t*,
                                                                     std::uint32_t, unsigned);
somaError_t value_operation(const char* call, value_operation_of_runtime operation,
                            somaStream_t stream, uint32_t* address, uint32_t value,
                            unsigned int flags) {
  return with_runtime([&](runtime& rt) -> status {
    if (auto refused = refused_while_capturing(rt, stream, call)) return *refused;
    return (rt.*operation)(handle_of(stream), address, value, flags);
  });
}

}  // namespace

extern "C" {

// ---- streams and events ----------------------------------------------------------------------

somaError_t somaStreamCreate(somaStream_t* stream) { return somaStreamCreateWithFlags(stream, 0); }

somaError_t somaStreamCreateWithFlags(somaStream_t* stream, unsigned int flags) {
  return create_into(stream, "somaStreamCreate", "stream",
                     [&](runtime& rt) { return rt.streams().create(flags); });
}

somaError_t somaStreamDestroy(somaStream_t stream) {
  return with_runtime([&](runtime& rt) -> status {
    if (graph_service::any_capture() && rt.streams().resolve(handle_of(stream)).ok())
      graph_service::of(rt).stream_destroyed(handle_of(stream));
    return rt.streams().destroy(handle_of(stream));
  });
}

somaError_t somaStreamSynchronize(somaStream_t stream) {
  return with_runtime([&](runtime& rt) -> status {
    if (auto refused = refused_while_capturing(rt, stream, "somaStreamSynchronize"))
      return *refused;
    return rt.streams().synchronize(handle_of(stream));
  });
}

somaError_t somaStreamQuery(somaStream_t stream) {
  return with_runtime([&](runtime& rt) -> status {
    if (auto refused = refused_while_capturing(rt, stream, "somaStreamQuery")) return *refused;
    return rt.streams().query(handle_of(stream));
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
    return rt.streams().wait_event(handle_of(stream), handle_of(event));
  });
}

somaError_t somaStreamGetDevice(somaStream_t stream, int* device) {
  return with_runtime([&](runtime& rt) -> status {
    if (device == nullptr) return null_argument("somaStreamGetDevice", "device");
    return store(rt.streams().device_of(handle_of(stream)), device);
  });
}

somaError_t somaStreamCreateFromNative(somaStream_t* stream, void* nativeStream, int device) {
  return somaStreamCreateFromNativeWithFlags(stream, nativeStream, device, somaNativeStreamKept);
}

somaError_t somaStreamCreateFromNativeWithFlags(somaStream_t* stream, void* nativeStream,
                                                int device, unsigned int flags) {
  return with_runtime([&](runtime& rt) -> status {
    if (stream == nullptr) return null_argument("somaStreamCreateFromNative", "stream");
    if (flags > somaNativeStreamMayEndFirst) {
      return status(error_code::invalid_value,
                    "somaStreamCreateFromNativeWithFlags: flags " + std::to_string(flags) +
                        " are not somaNativeStreamKept (0) or somaNativeStreamMayEndFirst (1)");
    }
    const bool may_end_first = (flags & somaNativeStreamMayEndFirst) != 0;
    return store(rt.streams().adopt_native(nativeStream, device, may_end_first), stream);
  });
}

somaError_t somaStreamGetNative(somaStream_t stream, void** nativeStream) {
  return with_runtime([&](runtime& rt) -> status {
    if (nativeStream == nullptr) return null_argument("somaStreamGetNative", "nativeStream");
    return store(rt.streams().native(handle_of(stream)), nativeStream);
  });
}

somaError_t somaEventCreate(somaEvent_t* event) { return somaEventCreateWithFlags(event, 0); }

somaError_t somaEventCreateWithFlags(somaEvent_t* event, unsigned int flags) {
  return create_into(event, "somaEventCreate", "event",
                     [&](runtime& rt) { return rt.streams().create_event(flags); });
}

somaError_t somaEventDestroy(somaEvent_t event) {
  return with_runtime([&](runtime& rt) { return rt.streams().destroy_event(handle_of(event)); });
}

somaError_t somaEventRecord(somaEvent_t event, somaStream_t stream) {
  return with_runtime([&](runtime& rt) -> status {
    if (graph_service::any_capture()) {
      graph_service& graphs = graph_service::of(rt);
      if (auto* c = capture_of(rt, stream))
        return graphs.capture_record(*c, handle_of(stream), handle_of(event));
      graphs.forget_captured_event(handle_of(event));
    }
    return rt.streams().record_event(handle_of(event), handle_of(stream));
  });
}

somaError_t somaEventQuery(somaEvent_t event) {
  return with_runtime([&](runtime& rt) { return rt.streams().query_event(handle_of(event)); });
}

somaError_t somaEventSynchronize(somaEvent_t event) {
  return with_runtime(
      [&](runtime& rt) { return rt.streams().synchronize_event(handle_of(event)); });
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
    if (auto refused = refused_while_capturing(rt, stream, "somaLaunchHostFuncWithStatus"))
      return *refused;
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
    result<void*> made = rt.host_memory().allocate(size);
    if (!made.ok()) return made.take_error();
    *ptr = made.value();
    return status::success();
  });
}

somaError_t somaFreeHost(void* ptr) {
  return with_runtime([&](runtime& rt) { return rt.host_memory().free(ptr); });
}

somaError_t somaStreamWaitValue32(somaStream_t stream, uint32_t* addr, uint32_t value,
                                  unsigned int flags) {
  return value_operation("somaStreamWaitValue32", &runtime::stream_wait_value32, stream, addr,
                         value, flags);
}

somaError_t somaStreamWriteValue32(somaStream_t stream, uint32_t* addr, uint32_t value,
                                   unsigned int flags) {
  return value_operation("somaStreamWriteValue32", &runtime::stream_write_value32, stream, addr,
                         value, flags);
}

}  // extern "C"
