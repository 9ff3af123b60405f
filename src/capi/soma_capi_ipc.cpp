// The C API of sharing pools between processes (S7): translation to src/ipc.
#include <cstdint>
#include <string>

#include "capi/capi_support.hpp"
#include "ipc/ipc.hpp"
#include "runtime/runtime.hpp"
#include "soma/soma.h"

using namespace soma::capi;  // NOLINT(google-build-using-namespace): the C API's helpers

extern "C" {

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
