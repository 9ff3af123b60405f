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

// Names for the results soma meets most, used when the driver cannot name a result itself.
struct known_result {
  CUresult result;
  const char* name;
  const char* text;
};
const known_result known_results[] = {
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY",
     "the CUDA toolkit's stub libcuda was loaded instead of a real driver"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

status load_failure(error_code code, std::string message, void* library) {
  if (library != nullptr) dlclose(library);  // nothing of it is in use yet
  return status(code, std::move(message));
}

}  // namespace

error_code translate(CUresult result) {
  switch (result) {
    case CUDA_SUCCESS:
      return error_code::success;
    case CUDA_ERROR_INVALID_VALUE:
      return error_code::invalid_value;
    case CUDA_ERROR_OUT_OF_MEMORY:
      return error_code::out_of_memory;
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
      return error_code::initialization_error;
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
    case CUDA_ERROR_NO_DEVICE:
      return error_code::no_device;
    case CUDA_ERROR_INVALID_DEVICE:
      return error_code::invalid_device;
    case CUDA_ERROR_INVALID_CONTEXT:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_NOT_FOUND:
      return error_code::invalid_handle;
    case CUDA_ERROR_NOT_READY:
      return error_code::not_ready;
    case CUDA_ERROR_ILLEGAL_ADDRESS:
      return error_code::illegal_address;
    // Faults of a kernel: the context is unusable, like a failed launch.
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
      return error_code::launch_failure;
    case CUDA_ERROR_OPERATING_SYSTEM:
      return error_code::operating_system;
    case CUDA_ERROR_NOT_PERMITTED:
      return error_code::not_permitted;
    case CUDA_ERROR_NOT_SUPPORTED:
      return error_code::not_supported;
    default:
      return error_code::unknown;
  }
}

std::string driver_api::describe(CUresult result) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (cuGetErrorName == nullptr || cuGetErrorName(result, &name) != CUDA_SUCCESS) name = nullptr;
  if (cuGetErrorString == nullptr || cuGetErrorString(result, &text) != CUDA_SUCCESS)
    text = nullptr;
  for (const known_result& known : known_results) {
    if (known.result != result) continue;
    if (name == nullptr) name = known.name;
    if (text == nullptr) text = known.text;
  }
  std::string out = name != nullptr ? name : "CUresult " + std::to_string(result);
  if (text != nullptr && *text != '\0') out += std::string(": ") + text;
  return out;
}

status driver_api::check(CUresult result, const char* call, const std::string& detail) const {
  if (result == CUDA_SUCCESS) return status::success();
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

context_scope::context_scope(const driver_api& driver, CUcontext context) noexcept
    : driver_(driver) {
  // The driver cannot serve a child forked after CUDA started: say so instead of calling it.
  if (forked_after_start()) {
    entered_ = forked_child_error();
    return;
  }
  if (driver_.cuCtxGetCurrent(&previous_) != CUDA_SUCCESS) previous_ = nullptr;
  if (previous_ == context) return;
  const CUresult made = driver_.cuCtxSetCurrent(context);
  if (made != CUDA_SUCCESS) {
    entered_ = driver_.check(made, "cuCtxSetCurrent");
    return;
  }
  switched_ = true;
}

context_scope::~context_scope() {
  if (switched_) driver_.cuCtxSetCurrent(previous_);
}

}  // namespace soma::detail::backend::cuda
