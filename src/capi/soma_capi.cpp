// The C API: translation between somaXxx calls and the runtime, nothing else. Every entry
// point returns a somaError_t, records failures for somaGetLastErrorMessage, and lets no
// exception escape. This file: errors, the backend and devices; the other soma_capi_*.cpp
// files hold the rest, by topic.
#include <cstdint>
#include <string>

#include "capi/capi_support.hpp"
#include "runtime/last_error.hpp"
#include "runtime/runtime.hpp"
#include "soma/soma.h"

using namespace soma::capi;  // NOLINT(google-build-using-namespace): the C API's helpers

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
    text = rt.devices().backend_name();
    *name = text.c_str();
    return status::success();
  });
}

somaError_t somaGetDeviceCount(int* count) {
  return with_runtime([&](runtime& rt) -> status {
    if (count == nullptr) return null_argument("somaGetDeviceCount", "count");
    *count = rt.devices().count();
    return status::success();
  });
}

somaError_t somaSetDevice(int device) {
  return with_runtime([&](runtime& rt) { return rt.devices().set_current(device); });
}

somaError_t somaGetDevice(int* device) {
  return with_runtime([&](runtime& rt) -> status {
    if (device == nullptr) return null_argument("somaGetDevice", "device");
    *device = rt.devices().current();
    return status::success();
  });
}

somaError_t somaDeviceGetAttribute(int* value, somaDeviceAttr attr, int device) {
  return with_runtime([&](runtime& rt) -> status {
    if (value == nullptr) return null_argument("somaDeviceGetAttribute", "value");
    result<int> read = rt.devices().attribute(
        static_cast<soma::detail::device_attribute>(raw_value(attr)), device);
    return store(std::move(read), value);
  });
}

somaError_t somaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice) {
  return with_runtime([&](runtime& rt) -> status {
    if (canAccessPeer == nullptr) return null_argument("somaDeviceCanAccessPeer", "canAccessPeer");
    result<bool> can = rt.devices().can_access_peer(device, peerDevice);
    if (!can.ok()) return can.take_error();
    *canAccessPeer = can.value() ? 1 : 0;
    return status::success();
  });
}

somaError_t somaMemGetInfo(size_t* freeBytes, size_t* totalBytes) {
  return with_runtime([&](runtime& rt) -> status {
    if (freeBytes == nullptr || totalBytes == nullptr)
      return null_argument("somaMemGetInfo", "freeBytes or totalBytes");
    return rt.devices().memory_info(freeBytes, totalBytes);
  });
}

somaError_t somaDeviceGetCommittedBytes(size_t* bytes, int device) {
  return with_runtime([&](runtime& rt) -> status {
    if (bytes == nullptr) return null_argument("somaDeviceGetCommittedBytes", "bytes");
    result<std::size_t> committed = rt.devices().committed_bytes(device);
    if (!committed.ok()) return committed.take_error();
    *bytes = committed.value();
    return status::success();
  });
}

somaError_t somaDeviceSynchronize(void) {
  return with_runtime([&](runtime& rt) { return rt.synchronize_device(); });
}

}  // extern "C"
