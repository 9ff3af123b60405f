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

namespace {

// A somaDeviceAttr, read from the device's properties.
result<int> device_attribute(const soma::detail::backend::device_properties& p, int attribute) {
  switch (attribute) {
    case somaDevAttrMemoryPoolsSupported:
      return p.memory_pools_supported ? 1 : 0;
    case somaDevAttrMemoryPoolSupportedHandleTypes:
      return static_cast<int>(p.supported_handle_types);
    case somaDevAttrHostNumaMemoryPoolsSupported:
      return p.host_numa_memory_pools_supported ? 1 : 0;
    case somaDevAttrHostMemoryPoolsSupported:
      return p.host_memory_pools_supported ? 1 : 0;
    case somaDevAttrTotalMemoryMiB:
      return static_cast<int>(p.total_memory_bytes >> 20);
    case somaDevAttrAllocationGranularityKiB:
      return static_cast<int>(p.granularity_bytes >> 10);
    default:
      return status(error_code::invalid_value,
                    "unknown device attribute " + std::to_string(attribute));
  }
}

// One row per code for somaGetErrorName and somaGetErrorString, so a new code cannot get one
// and miss the other; the name is the enumerator's own spelling.
struct error_description {
  int code;
  const char* name;
  const char* text;
};
#define SOMA_ERROR(code, text) \
  error_description { code, #code, text }
constexpr error_description error_descriptions[] = {
    SOMA_ERROR(somaSuccess, "no error"),
    SOMA_ERROR(somaErrorInvalidValue, "invalid argument"),
    SOMA_ERROR(somaErrorMemoryAllocation, "out of memory"),
    SOMA_ERROR(somaErrorInitializationError, "initialization error"),
    SOMA_ERROR(somaErrorInvalidDevice, "invalid device ordinal"),
    SOMA_ERROR(somaErrorNoDevice, "no device available for the selected backend"),
    SOMA_ERROR(somaErrorOperatingSystem, "an operating system call failed"),
    SOMA_ERROR(somaErrorInvalidResourceHandle, "invalid resource handle"),
    SOMA_ERROR(somaErrorIllegalState, "the operation is not allowed in the object's current state"),
    SOMA_ERROR(somaErrorNotReady, "device not ready"),
    SOMA_ERROR(somaErrorIllegalAddress, "an illegal memory access was encountered"),
    SOMA_ERROR(somaErrorLaunchFailure, "asynchronous work failed"),
    SOMA_ERROR(somaErrorNotPermitted, "operation not permitted"),
    SOMA_ERROR(somaErrorNotSupported, "operation not supported"),
    SOMA_ERROR(somaErrorStreamCaptureUnsupported,
               "operation not permitted when stream is capturing"),
    SOMA_ERROR(somaErrorStreamCaptureInvalidated,
               "operation failed due to a previous error during capture"),
    SOMA_ERROR(somaErrorStreamCaptureUnmatched, "capture was not initiated in this stream"),
    SOMA_ERROR(somaErrorStreamCaptureUnjoined, "capturing stream has unjoined work"),
    SOMA_ERROR(somaErrorUnknown, "unknown error"),
    SOMA_ERROR(somaErrorAddressSpaceExhausted, "address space reservation failed"),
};
#undef SOMA_ERROR

// The lower layers' codes are somaError_t's values, passed over by a cast (report()).
#define SOMA_SAME_CODE(ours, theirs) \
  static_assert(static_cast<int>(error_code::ours) == (theirs), #theirs)
SOMA_SAME_CODE(success, somaSuccess);
SOMA_SAME_CODE(invalid_value, somaErrorInvalidValue);
SOMA_SAME_CODE(out_of_memory, somaErrorMemoryAllocation);
SOMA_SAME_CODE(initialization_error, somaErrorInitializationError);
SOMA_SAME_CODE(no_device, somaErrorNoDevice);
SOMA_SAME_CODE(invalid_device, somaErrorInvalidDevice);
SOMA_SAME_CODE(operating_system, somaErrorOperatingSystem);
SOMA_SAME_CODE(invalid_handle, somaErrorInvalidResourceHandle);
SOMA_SAME_CODE(illegal_state, somaErrorIllegalState);
SOMA_SAME_CODE(not_ready, somaErrorNotReady);
SOMA_SAME_CODE(illegal_address, somaErrorIllegalAddress);
SOMA_SAME_CODE(launch_failure, somaErrorLaunchFailure);
SOMA_SAME_CODE(not_permitted, somaErrorNotPermitted);
SOMA_SAME_CODE(not_supported, somaErrorNotSupported);
SOMA_SAME_CODE(capture_unsupported, somaErrorStreamCaptureUnsupported);
SOMA_SAME_CODE(capture_invalidated, somaErrorStreamCaptureInvalidated);
SOMA_SAME_CODE(capture_unmatched, somaErrorStreamCaptureUnmatched);
SOMA_SAME_CODE(capture_unjoined, somaErrorStreamCaptureUnjoined);
SOMA_SAME_CODE(unknown, somaErrorUnknown);
SOMA_SAME_CODE(address_space_exhausted, somaErrorAddressSpaceExhausted);
#undef SOMA_SAME_CODE

const error_description* describe(somaError_t error) {
  for (const error_description& known : error_descriptions) {
    if (known.code == raw_value(error)) return &known;
  }
  return nullptr;
}

}  // namespace

extern "C" {

// ---- errors --------------------------------------------------------------------------------

const char* somaGetErrorName(somaError_t error) {
  const error_description* known = describe(error);
  return known != nullptr ? known->name : "unrecognized error code";
}

const char* somaGetErrorString(somaError_t error) {
  const error_description* known = describe(error);
  return known != nullptr ? known->text : "unrecognized error code";
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
    if (status checked = rt.devices().check(device); !checked.ok()) return checked;
    return store(device_attribute(rt.devices().properties(device), raw_value(attr)), value);
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
