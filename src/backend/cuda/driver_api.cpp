#include "backend/cuda/driver_api.hpp"

#include <dlfcn.h>

#include <cstring>
#include <mutex>

#include "backend/fork_guard.hpp"

namespace soma::detail::backend::cuda {
namespace {

// The 12.0+ cuGetProcAddress (exported as cuGetProcAddress_v2). The last argument is a
// CUdriverProcAddressQueryResult, an int-sized enum.
using get_proc_address_fn = CUresult (*)(const char* symbol, void** function, int cuda_version,
                                         cuuint64_t flags, int* symbol_status);

/// One entry point: the name cuGetProcAddress knows it by, the exported symbol with the
/// 12.0 ABI (for dlsym when cuGetProcAddress cannot answer), and where it goes.
struct entry_point {
  const char* name;
  const char* exported;
  void (*assign)(driver_api& driver, void* function);
};

// Copies a resolved address into a typed member (memcpy: a void* is not a function pointer).
// clang-format off
#define SOMA_CUDA_ENTRY(member, exported)                                                  \
  entry_point {                                                                            \
    #member, exported, [](driver_api& d, void* f) { std::memcpy(&d.member, &f, sizeof f); } \
  }
// clang-format on

const entry_point entry_points[] = {
    SOMA_CUDA_ENTRY(cuInit, "cuInit"),
    SOMA_CUDA_ENTRY(cuDriverGetVersion, "cuDriverGetVersion"),
    SOMA_CUDA_ENTRY(cuGetErrorName, "cuGetErrorName"),
    SOMA_CUDA_ENTRY(cuGetErrorString, "cuGetErrorString"),
    SOMA_CUDA_ENTRY(cuDeviceGetCount, "cuDeviceGetCount"),
    SOMA_CUDA_ENTRY(cuDeviceGet, "cuDeviceGet"),
    SOMA_CUDA_ENTRY(cuDeviceGetName, "cuDeviceGetName"),
    SOMA_CUDA_ENTRY(cuDeviceTotalMem, "cuDeviceTotalMem_v2"),
    SOMA_CUDA_ENTRY(cuDeviceGetAttribute, "cuDeviceGetAttribute"),
    SOMA_CUDA_ENTRY(cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer"),
    SOMA_CUDA_ENTRY(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
    SOMA_CUDA_ENTRY(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
    SOMA_CUDA_ENTRY(cuCtxGetCurrent, "cuCtxGetCurrent"),
    SOMA_CUDA_ENTRY(cuCtxSetCurrent, "cuCtxSetCurrent"),
    SOMA_CUDA_ENTRY(cuCtxSynchronize, "cuCtxSynchronize"),
    SOMA_CUDA_ENTRY(cuMemGetInfo, "cuMemGetInfo_v2"),
    SOMA_CUDA_ENTRY(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity"),
    SOMA_CUDA_ENTRY(cuMemAddressReserve, "cuMemAddressReserve"),
    SOMA_CUDA_ENTRY(cuMemAddressFree, "cuMemAddressFree"),
    SOMA_CUDA_ENTRY(cuMemCreate, "cuMemCreate"),
    SOMA_CUDA_ENTRY(cuMemRelease, "cuMemRelease"),
    SOMA_CUDA_ENTRY(cuMemMap, "cuMemMap"),
    SOMA_CUDA_ENTRY(cuMemUnmap, "cuMemUnmap"),
    SOMA_CUDA_ENTRY(cuMemSetAccess, "cuMemSetAccess"),
    SOMA_CUDA_ENTRY(cuMemExportToShareableHandle, "cuMemExportToShareableHandle"),
    SOMA_CUDA_ENTRY(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle"),
    SOMA_CUDA_ENTRY(cuStreamCreate, "cuStreamCreate"),
    SOMA_CUDA_ENTRY(cuStreamDestroy, "cuStreamDestroy_v2"),
    SOMA_CUDA_ENTRY(cuStreamGetCtx, "cuStreamGetCtx"),
    SOMA_CUDA_ENTRY(cuStreamSynchronize, "cuStreamSynchronize"),
    SOMA_CUDA_ENTRY(cuStreamQuery, "cuStreamQuery"),
    SOMA_CUDA_ENTRY(cuStreamWaitEvent, "cuStreamWaitEvent"),
    SOMA_CUDA_ENTRY(cuLaunchHostFunc, "cuLaunchHostFunc"),
    SOMA_CUDA_ENTRY(cuMemsetD8Async, "cuMemsetD8Async"),
    SOMA_CUDA_ENTRY(cuMemcpyAsync, "cuMemcpyAsync"),
    // The 12.0 ABI gives the _v2 forms, which need no opt-in (CAN_USE_STREAM_MEM_OPS).
    SOMA_CUDA_ENTRY(cuStreamWaitValue32, "cuStreamWaitValue32_v2"),
    SOMA_CUDA_ENTRY(cuStreamWriteValue32, "cuStreamWriteValue32_v2"),
    SOMA_CUDA_ENTRY(cuMemHostAlloc, "cuMemHostAlloc"),
    SOMA_CUDA_ENTRY(cuMemFreeHost, "cuMemFreeHost"),
    SOMA_CUDA_ENTRY(cuEventCreate, "cuEventCreate"),
    SOMA_CUDA_ENTRY(cuEventDestroy, "cuEventDestroy_v2"),
    SOMA_CUDA_ENTRY(cuEventRecord, "cuEventRecord"),
    SOMA_CUDA_ENTRY(cuEventQuery, "cuEventQuery"),
    SOMA_CUDA_ENTRY(cuEventSynchronize, "cuEventSynchronize"),
    SOMA_CUDA_ENTRY(cuGraphCreate, "cuGraphCreate"),
    SOMA_CUDA_ENTRY(cuGraphDestroy, "cuGraphDestroy"),
    SOMA_CUDA_ENTRY(cuGraphAddEmptyNode, "cuGraphAddEmptyNode"),
    SOMA_CUDA_ENTRY(cuGraphAddMemsetNode, "cuGraphAddMemsetNode"),
    SOMA_CUDA_ENTRY(cuGraphAddMemcpyNode, "cuGraphAddMemcpyNode"),
    SOMA_CUDA_ENTRY(cuGraphAddHostNode, "cuGraphAddHostNode"),
    SOMA_CUDA_ENTRY(cuGraphAddEventRecordNode, "cuGraphAddEventRecordNode"),
    SOMA_CUDA_ENTRY(cuGraphAddEventWaitNode, "cuGraphAddEventWaitNode"),
    SOMA_CUDA_ENTRY(cuGraphAddChildGraphNode, "cuGraphAddChildGraphNode"),
    SOMA_CUDA_ENTRY(cuGraphGetNodes, "cuGraphGetNodes"),
    SOMA_CUDA_ENTRY(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags"),
    SOMA_CUDA_ENTRY(cuGraphLaunch, "cuGraphLaunch"),
    SOMA_CUDA_ENTRY(cuGraphUpload, "cuGraphUpload"),
    SOMA_CUDA_ENTRY(cuGraphExecDestroy, "cuGraphExecDestroy"),
    SOMA_CUDA_ENTRY(cuGraphExecMemsetNodeSetParams, "cuGraphExecMemsetNodeSetParams"),
    // cuGetProcAddress hands out the 10.1 form (the export cuStreamBeginCapture_v2, taking a
    // capture mode) for the name cuStreamBeginCapture at 12.0.
    SOMA_CUDA_ENTRY(cuStreamBeginCapture, "cuStreamBeginCapture_v2"),
    SOMA_CUDA_ENTRY(cuStreamEndCapture, "cuStreamEndCapture"),
};
#undef SOMA_CUDA_ENTRY

// What soma knows of each result it treats apart: its code, and a name and text for when the
// driver cannot name it itself. Any other result is error_code::unknown.
struct known_result {
  CUresult result;
  error_code code;
  const char* name;
  const char* text;
};
#define SOMA_RESULT(result, code, text) \
  { result, error_code::code, #result, text }
const known_result known_results[] = {
    SOMA_RESULT(CUDA_SUCCESS, success, "no error"),
    SOMA_RESULT(CUDA_ERROR_INVALID_VALUE, invalid_value, "invalid argument"),
    SOMA_RESULT(CUDA_ERROR_OUT_OF_MEMORY, out_of_memory, "out of memory"),
    SOMA_RESULT(CUDA_ERROR_NOT_INITIALIZED, initialization_error, "initialization error"),
    SOMA_RESULT(CUDA_ERROR_DEINITIALIZED, initialization_error, "driver shutting down"),
    SOMA_RESULT(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, initialization_error, "driver mismatch"),
    SOMA_RESULT(CUDA_ERROR_STUB_LIBRARY, no_device, "the toolkit's stub libcuda, no driver"),
    SOMA_RESULT(CUDA_ERROR_DEVICE_UNAVAILABLE, no_device, "devices busy or unavailable"),
    SOMA_RESULT(CUDA_ERROR_NO_DEVICE, no_device, "no CUDA-capable device is detected"),
    SOMA_RESULT(CUDA_ERROR_INVALID_DEVICE, invalid_device, "invalid device ordinal"),
    SOMA_RESULT(CUDA_ERROR_INVALID_CONTEXT, invalid_handle, "invalid device context"),
    SOMA_RESULT(CUDA_ERROR_CONTEXT_IS_DESTROYED, invalid_handle, "context is destroyed"),
    SOMA_RESULT(CUDA_ERROR_INVALID_HANDLE, invalid_handle, "invalid resource handle"),
    SOMA_RESULT(CUDA_ERROR_NOT_FOUND, invalid_handle, "named symbol not found"),
    SOMA_RESULT(CUDA_ERROR_NOT_READY, not_ready, "device not ready"),
    SOMA_RESULT(CUDA_ERROR_ILLEGAL_ADDRESS, illegal_address, "an illegal memory access"),
    // Faults of a kernel: the context is unusable, like a failed launch.
    SOMA_RESULT(CUDA_ERROR_ASSERT, launch_failure, "device-side assert triggered"),
    SOMA_RESULT(CUDA_ERROR_HARDWARE_STACK_ERROR, launch_failure, "hardware stack error"),
    SOMA_RESULT(CUDA_ERROR_ILLEGAL_INSTRUCTION, launch_failure, "illegal instruction"),
    SOMA_RESULT(CUDA_ERROR_MISALIGNED_ADDRESS, launch_failure, "misaligned address"),
    SOMA_RESULT(CUDA_ERROR_INVALID_ADDRESS_SPACE, launch_failure, "wrong address space"),
    SOMA_RESULT(CUDA_ERROR_INVALID_PC, launch_failure, "invalid program counter"),
    SOMA_RESULT(CUDA_ERROR_LAUNCH_FAILED, launch_failure, "unspecified launch failure"),
    SOMA_RESULT(CUDA_ERROR_OPERATING_SYSTEM, operating_system, "OS call failed"),
    SOMA_RESULT(CUDA_ERROR_NOT_PERMITTED, not_permitted, "operation not permitted"),
    SOMA_RESULT(CUDA_ERROR_NOT_SUPPORTED, not_supported, "operation not supported"),
    SOMA_RESULT(CUDA_ERROR_UNKNOWN, unknown, "unknown error"),
};
#undef SOMA_RESULT

const known_result* known(CUresult result) {
  for (const known_result& k : known_results) {
    if (k.result == result) return &k;
  }
  return nullptr;
}

status load_failure(error_code code, std::string message, void* library) {
  if (library != nullptr) dlclose(library);  // nothing of it is in use yet
  return status(code, std::move(message));
}

}  // namespace

error_code translate(CUresult result) {
  const known_result* k = known(result);
  return k != nullptr ? k->code : error_code::unknown;
}

std::string driver_api::describe(CUresult result) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (cuGetErrorName == nullptr || cuGetErrorName(result, &name) != CUDA_SUCCESS) name = nullptr;
  if (cuGetErrorString == nullptr || cuGetErrorString(result, &text) != CUDA_SUCCESS)
    text = nullptr;
  if (const known_result* k = known(result); k != nullptr) {
    if (name == nullptr) name = k->name;
    if (text == nullptr) text = k->text;
  }
  std::string out = name != nullptr ? name : "CUresult " + std::to_string(result);
  if (text != nullptr && *text != '\0') out += std::string(": ") + text;
  return out;
}

status driver_api::failure(CUresult result, const char* call, const std::string& detail) const {
  std::string message = std::string(call) + " failed (" + describe(result) + ")";
  if (!detail.empty()) message += ": " + detail;
  return status(translate(result), std::move(message));
}

result<std::unique_ptr<driver_api>> load_driver(const char* library_name) {
  void* library = dlopen(library_name, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    return load_failure(error_code::no_device,
                        std::string(library_name) + " not found: " + (why ? why : "dlopen failed") +
                            " (no NVIDIA driver on this machine, or not on the library path)",
                        nullptr);
  }
  auto driver = std::make_unique<driver_api>();
  driver->library_name = library_name;
  auto get_proc_address =
      reinterpret_cast<get_proc_address_fn>(dlsym(library, "cuGetProcAddress_v2"));
  std::string missing;
  for (const entry_point& entry : entry_points) {
    void* function = nullptr;
    int symbol_status = 0;
    if (get_proc_address == nullptr ||
        get_proc_address(entry.name, &function, soma_driver_abi_version,
                         CU_GET_PROC_ADDRESS_DEFAULT, &symbol_status) != CUDA_SUCCESS) {
      function = nullptr;
    }
    // The stub library (and drivers before 12.0) answer nothing through cuGetProcAddress.
    if (function == nullptr) function = dlsym(library, entry.exported);
    if (function == nullptr) {
      missing += missing.empty() ? entry.exported : std::string(", ") + entry.exported;
      continue;
    }
    entry.assign(*driver, function);
  }
  if (driver->cuInit == nullptr) {
    return load_failure(error_code::initialization_error,
                        std::string(library_name) + " is not a CUDA driver: it has no cuInit",
                        library);
  }
  // cuInit first: on a machine without a usable device its answer is the useful reason.
  if (const CUresult init = driver->cuInit(0); init != CUDA_SUCCESS) {
    const error_code code = translate(init) == error_code::initialization_error
                                ? error_code::initialization_error
                                : error_code::no_device;
    return load_failure(
        code, "cuInit failed: " + driver->describe(init) + " (" + library_name + ")", library);
  }
  if (!missing.empty()) {
    return load_failure(error_code::initialization_error,
                        std::string(library_name) + " lacks entry points soma needs: " + missing +
                            " (the driver is older than CUDA 12.0)",
                        library);
  }
  if (driver->cuDriverGetVersion(&driver->driver_version) != CUDA_SUCCESS ||
      driver->driver_version < soma_driver_abi_version) {
    return load_failure(error_code::initialization_error,
                        "the CUDA driver supports CUDA " +
                            std::to_string(driver->driver_version / 1000) + "." +
                            std::to_string(driver->driver_version % 1000 / 10) +
                            "; soma's cuda backend needs 12.0 or later",
                        library);
  }
  return driver;  // the library stays open for the life of the process
}

result<const driver_api*> process_driver() {
  static std::mutex loading;
  // Never destroyed: streams, events and callbacks may use it until the process exits.
  static driver_api* loaded = nullptr;
  static status failure;
  static bool attempted = false;
  std::lock_guard lock(loading);
  if (!attempted) {
    attempted = true;
    result<std::unique_ptr<driver_api>> opened = load_driver();
    if (opened.ok()) {
      loaded = opened.value().release();
    } else {
      failure = opened.take_error();
    }
  }
  if (loaded == nullptr) return failure;
  return static_cast<const driver_api*>(loaded);
}

void context_scope::enter(CUcontext context) noexcept {
  const CUresult made = driver_.cuCtxSetCurrent(context);
  if (made != CUDA_SUCCESS) {
    entered_ = driver_.check(made, "cuCtxSetCurrent");
    return;
  }
  switched_ = true;
}

}  // namespace soma::detail::backend::cuda
