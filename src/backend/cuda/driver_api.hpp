// The CUDA driver, loaded at run time: dlopen("libcuda.so.1") and every entry point soma
// calls, resolved through cuGetProcAddress (dlsym where that fails). One build then runs on
// machines with and without a GPU (design §2 "Backends"). Driver results are translated
// here, once, into soma codes with the driver's own name in the message (CONTRIBUTING.md:
// Errors).
#pragma once

#include <memory>
#include <string>
#include <type_traits>

#include "backend/cuda/driver_types.hpp"
#include "backend/fork_guard.hpp"
#include "core/status.hpp"

namespace soma::detail::backend::cuda {

/// The driver's entry points with their CUDA 12.0 signatures (unchanged in 13), plus the
/// translation of their results. All pointers are set once load_driver succeeds; a test may fill
/// them with fakes.
struct driver_api {
  CUresult (*cuInit)(unsigned flags) = nullptr;
  CUresult (*cuDriverGetVersion)(int* version) = nullptr;
  CUresult (*cuGetErrorName)(CUresult error, const char** name) = nullptr;
  CUresult (*cuGetErrorString)(CUresult error, const char** text) = nullptr;
  // devices and contexts
  CUresult (*cuDeviceGetCount)(int* count) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice* device, int ordinal) = nullptr;
  CUresult (*cuDeviceGetName)(char* name, int length, CUdevice device) = nullptr;
  CUresult (*cuDeviceTotalMem)(std::size_t* bytes, CUdevice device) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int* value, int attribute, CUdevice device) = nullptr;
  CUresult (*cuDeviceCanAccessPeer)(int* can_access, CUdevice device, CUdevice peer) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext* context, CUdevice device) = nullptr;
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice device) = nullptr;
  CUresult (*cuCtxGetCurrent)(CUcontext* context) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext context) = nullptr;
  CUresult (*cuCtxSynchronize)() = nullptr;
  // virtual memory management
  CUresult (*cuMemGetInfo)(std::size_t* free_bytes, std::size_t* total_bytes) = nullptr;
  CUresult (*cuMemGetAllocationGranularity)(std::size_t* granularity,
                                            const CUmemAllocationProp* prop, int option) = nullptr;
  CUresult (*cuMemAddressReserve)(CUdeviceptr* address, std::size_t bytes, std::size_t alignment,
                                  CUdeviceptr hint, unsigned long long flags) = nullptr;
  CUresult (*cuMemAddressFree)(CUdeviceptr address, std::size_t bytes) = nullptr;
  CUresult (*cuMemCreate)(CUmemGenericAllocationHandle* handle, std::size_t bytes,
                          const CUmemAllocationProp* prop, unsigned long long flags) = nullptr;
  CUresult (*cuMemRelease)(CUmemGenericAllocationHandle handle) = nullptr;
  CUresult (*cuMemMap)(CUdeviceptr address, std::size_t bytes, std::size_t offset,
                       CUmemGenericAllocationHandle handle, unsigned long long flags) = nullptr;
  CUresult (*cuMemUnmap)(CUdeviceptr address, std::size_t bytes) = nullptr;
  CUresult (*cuMemSetAccess)(CUdeviceptr address, std::size_t bytes, const CUmemAccessDesc* desc,
                             std::size_t count) = nullptr;
  CUresult (*cuMemExportToShareableHandle)(void* shareable, CUmemGenericAllocationHandle handle,
                                           int handle_type, unsigned long long flags) = nullptr;
  CUresult (*cuMemImportFromShareableHandle)(CUmemGenericAllocationHandle* handle, void* os_handle,
                                             int handle_type) = nullptr;
  // streams, events, work
  CUresult (*cuStreamCreate)(CUstream* stream, unsigned flags) = nullptr;
  CUresult (*cuStreamDestroy)(CUstream stream) = nullptr;
  CUresult (*cuStreamGetCtx)(CUstream stream, CUcontext* context) = nullptr;
  CUresult (*cuStreamSynchronize)(CUstream stream) = nullptr;
  CUresult (*cuStreamQuery)(CUstream stream) = nullptr;
  CUresult (*cuStreamWaitEvent)(CUstream stream, CUevent event, unsigned flags) = nullptr;
  CUresult (*cuLaunchHostFunc)(CUstream stream, CUhostFn function, void* user_data) = nullptr;
  CUresult (*cuMemsetD8Async)(CUdeviceptr destination, unsigned char value, std::size_t bytes,
                              CUstream stream) = nullptr;
  CUresult (*cuMemcpyAsync)(CUdeviceptr destination, CUdeviceptr source, std::size_t bytes,
                            CUstream stream) = nullptr;
  CUresult (*cuStreamWaitValue32)(CUstream stream, CUdeviceptr address, unsigned value,
                                  unsigned flags) = nullptr;
  CUresult (*cuStreamWriteValue32)(CUstream stream, CUdeviceptr address, unsigned value,
                                   unsigned flags) = nullptr;
  // page-locked host memory
  CUresult (*cuMemHostAlloc)(void** pointer, std::size_t bytes, unsigned flags) = nullptr;
  CUresult (*cuMemFreeHost)(void* pointer) = nullptr;
  CUresult (*cuEventCreate)(CUevent* event, unsigned flags) = nullptr;
  CUresult (*cuEventDestroy)(CUevent event) = nullptr;
  CUresult (*cuEventRecord)(CUevent event, CUstream stream) = nullptr;
  CUresult (*cuEventQuery)(CUevent event) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent event) = nullptr;
  // graphs (S15) and stream capture
  CUresult (*cuGraphCreate)(CUgraph* graph, unsigned flags) = nullptr;
  CUresult (*cuGraphDestroy)(CUgraph graph) = nullptr;
  CUresult (*cuGraphAddEmptyNode)(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies,
                                  std::size_t dependency_count) = nullptr;
  CUresult (*cuGraphAddMemsetNode)(CUgraphNode* node, CUgraph graph,
                                   const CUgraphNode* dependencies, std::size_t dependency_count,
                                   const CUDA_MEMSET_NODE_PARAMS* params,
                                   CUcontext context) = nullptr;
  CUresult (*cuGraphAddMemcpyNode)(CUgraphNode* node, CUgraph graph,
                                   const CUgraphNode* dependencies, std::size_t dependency_count,
                                   const CUDA_MEMCPY3D* params, CUcontext context) = nullptr;
  CUresult (*cuGraphAddHostNode)(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies,
                                 std::size_t dependency_count,
                                 const CUDA_HOST_NODE_PARAMS* params) = nullptr;
  CUresult (*cuGraphAddEventRecordNode)(CUgraphNode* node, CUgraph graph,
                                        const CUgraphNode* dependencies,
                                        std::size_t dependency_count, CUevent event) = nullptr;
  CUresult (*cuGraphAddEventWaitNode)(CUgraphNode* node, CUgraph graph,
                                      const CUgraphNode* dependencies, std::size_t dependency_count,
                                      CUevent event) = nullptr;
  CUresult (*cuGraphAddChildGraphNode)(CUgraphNode* node, CUgraph graph,
                                       const CUgraphNode* dependencies,
                                       std::size_t dependency_count, CUgraph child) = nullptr;
  CUresult (*cuGraphGetNodes)(CUgraph graph, CUgraphNode* nodes, std::size_t* count) = nullptr;
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec* exec, CUgraph graph,
                                          unsigned long long flags) = nullptr;
  CUresult (*cuGraphLaunch)(CUgraphExec exec, CUstream stream) = nullptr;
  CUresult (*cuGraphUpload)(CUgraphExec exec, CUstream stream) = nullptr;
  CUresult (*cuGraphExecDestroy)(CUgraphExec exec) = nullptr;
  CUresult (*cuGraphExecMemsetNodeSetParams)(CUgraphExec exec, CUgraphNode node,
                                             const CUDA_MEMSET_NODE_PARAMS* params,
                                             CUcontext context) = nullptr;
  /// mode: CU_STREAM_CAPTURE_MODE_* (cuda.h's CUstreamCaptureMode, an int-sized enum).
  CUresult (*cuStreamBeginCapture)(CUstream stream, int mode) = nullptr;
  CUresult (*cuStreamEndCapture)(CUstream stream, CUgraph* graph) = nullptr;

  std::string library_name;  ///< what was opened, for messages
  int driver_version = 0;    ///< cuDriverGetVersion, e.g. 13000

  /// "CUDA_ERROR_OUT_OF_MEMORY: out of memory": the driver's names, or a built-in table
  /// where the driver cannot say (the toolkit's stub library answers nothing).
  std::string describe(CUresult result) const;
  /// success for CUDA_SUCCESS, else translate(result) with "<call> failed (<describe>)",
  /// followed by ": <detail>" when detail is not empty. Inline: every driver call on a fast path
  /// (event record, stream wait) checks a success.
  status check(CUresult result, const char* call) const {
    if (result == CUDA_SUCCESS) [[likely]]
      return status::success();
    return failure(result, call, std::string());
  }
  status check(CUresult result, const char* call, const std::string& detail) const {
    if (result == CUDA_SUCCESS) [[likely]]
      return status::success();
    return failure(result, call, detail);
  }
  /// The same with the detail made only on failure: made on every success it cost an allocation
  /// a call, and one that could fail after the driver had done its work (a mapping or an
  /// allocation soma then had no record of).
  template <typename Detail>
  requires std::is_invocable_r_v<std::string, Detail> status check(CUresult result,
                                                                   const char* call,
                                                                   Detail&& detail)
  const {
    if (result == CUDA_SUCCESS) [[likely]]
      return status::success();
    return failure(result, call, detail());
  }

 private:
  status failure(CUresult result, const char* call, const std::string& detail) const;
};

/// The soma code for a driver result (CUDA_ERROR_NOT_READY -> not_ready, kernel faults ->
/// launch_failure, CUDA_ERROR_STUB_LIBRARY -> no_device, ...; unknown results -> unknown).
error_code translate(CUresult result);

/// Opens library_name, resolves every entry point, calls cuInit(0) and checks the driver
/// version. Failures: no_device ("libcuda.so.1 not found: <dlerror>", "cuInit failed:
/// CUDA_ERROR_NO_DEVICE ..."), initialization_error (an entry point is missing, or the
/// driver is older than CUDA 12.0). A loaded library is never closed: driver threads may run
/// callbacks until the process exits.
result<std::unique_ptr<driver_api>> load_driver(const char* library_name = "libcuda.so.1");

/// The process's driver, loaded once on first use; a failure is remembered and repeated.
/// Thread-safe.
result<const driver_api*> process_driver();

/// Makes a context current on the calling thread for its lifetime and restores the previous
/// one afterwards, so soma never changes which device the application's own CUDA runtime
/// calls go to. Costs one cuCtxGetCurrent when the context is already current.
class context_scope {
 public:
  // Inline: record and wait enter one on every call, and the context is nearly always current.
  context_scope(const driver_api& driver, CUcontext context) noexcept : driver_(driver) {
    // The driver cannot serve a child forked after CUDA started: say so instead of calling it.
    if (forked_after_start()) [[unlikely]] {
      entered_ = forked_child_error();
      return;
    }
    if (driver_.cuCtxGetCurrent(&previous_) != CUDA_SUCCESS) previous_ = nullptr;
    if (previous_ != context) [[unlikely]]
      enter(context);
  }
  ~context_scope() {
    if (switched_) [[unlikely]]
      driver_.cuCtxSetCurrent(previous_);
  }
  context_scope(const context_scope&) = delete;
  context_scope& operator=(const context_scope&) = delete;
  /// The result of making the context current (a broken driver, a destroyed context).
  const status& entered() const noexcept { return entered_; }
  /// True if the context was not current before (it is now, until the scope ends).
  bool switched() const noexcept { return switched_; }

 private:
  void enter(CUcontext context) noexcept;

  const driver_api& driver_;
  CUcontext previous_ = nullptr;
  bool switched_ = false;
  status entered_;
};

/// Makes call() (a driver call whose handles name their context: a record or a wait on one of
/// soma's streams) without first asking which context is current, and only if it fails, again
/// within a context_scope. The stream names its context (src/backend/cuda/README.md, "Which
/// context a record or a wait needs"), so the cuCtxGetCurrent that
/// context_scope makes on every call, 16 ns on an H200 host, four in a ping-pong, is paid only
/// after a failure: where the context was current already, the first failure stands.
template <typename Call>
status call_in_stream_context(const driver_api& driver, CUcontext context, const char* name,
                              Call&& call) {
  if (forked_after_start()) [[unlikely]]
    return forked_child_error();
  const CUresult first = call();
  if (first == CUDA_SUCCESS) [[likely]]
    return status::success();
  context_scope scope(driver, context);
  if (!scope.entered().ok()) return scope.entered();
  return driver.check(scope.switched() ? call() : first, name);
}

}  // namespace soma::detail::backend::cuda
