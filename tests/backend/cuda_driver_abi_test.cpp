// Checks soma's hand-written slice of the CUDA driver ABI (src/backend/cuda/driver_types.hpp)
// against the toolkit's cuda.h. Built only where the toolkit headers are installed; the
// library itself never includes cuda.h.
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstddef>

#include "backend/cuda/driver_types.hpp"

namespace {

namespace ours = soma::detail::backend::cuda;

#define SOMA_SAME_VALUE(name)                                                                      \
  static_assert(static_cast<long long>(ours::name) == static_cast<long long>(::name), #name)
SOMA_SAME_VALUE(CUDA_SUCCESS);
SOMA_SAME_VALUE(CUDA_ERROR_INVALID_VALUE);
SOMA_SAME_VALUE(CUDA_ERROR_OUT_OF_MEMORY);
SOMA_SAME_VALUE(CUDA_ERROR_NOT_INITIALIZED);
SOMA_SAME_VALUE(CUDA_ERROR_DEINITIALIZED);
SOMA_SAME_VALUE(CUDA_ERROR_STUB_LIBRARY);
SOMA_SAME_VALUE(CUDA_ERROR_DEVICE_UNAVAILABLE);
SOMA_SAME_VALUE(CUDA_ERROR_NO_DEVICE);
SOMA_SAME_VALUE(CUDA_ERROR_INVALID_DEVICE);
SOMA_SAME_VALUE(CUDA_ERROR_INVALID_CONTEXT);
SOMA_SAME_VALUE(CUDA_ERROR_INVALID_HANDLE);
SOMA_SAME_VALUE(CUDA_ERROR_NOT_FOUND);
SOMA_SAME_VALUE(CUDA_ERROR_NOT_READY);
SOMA_SAME_VALUE(CUDA_ERROR_ILLEGAL_ADDRESS);
SOMA_SAME_VALUE(CUDA_ERROR_CONTEXT_IS_DESTROYED);
SOMA_SAME_VALUE(CUDA_ERROR_ASSERT);
SOMA_SAME_VALUE(CUDA_ERROR_HARDWARE_STACK_ERROR);
SOMA_SAME_VALUE(CUDA_ERROR_ILLEGAL_INSTRUCTION);
SOMA_SAME_VALUE(CUDA_ERROR_MISALIGNED_ADDRESS);
SOMA_SAME_VALUE(CUDA_ERROR_INVALID_ADDRESS_SPACE);
SOMA_SAME_VALUE(CUDA_ERROR_INVALID_PC);
SOMA_SAME_VALUE(CUDA_ERROR_LAUNCH_FAILED);
SOMA_SAME_VALUE(CUDA_ERROR_NOT_PERMITTED);
SOMA_SAME_VALUE(CUDA_ERROR_NOT_SUPPORTED);
SOMA_SAME_VALUE(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH);
SOMA_SAME_VALUE(CUDA_ERROR_UNKNOWN);
SOMA_SAME_VALUE(CU_STREAM_NON_BLOCKING);
SOMA_SAME_VALUE(CU_EVENT_DISABLE_TIMING);
SOMA_SAME_VALUE(CU_EVENT_WAIT_DEFAULT);
SOMA_SAME_VALUE(CU_GET_PROC_ADDRESS_DEFAULT);
SOMA_SAME_VALUE(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING);
SOMA_SAME_VALUE(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED);
SOMA_SAME_VALUE(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED);
SOMA_SAME_VALUE(CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES);
SOMA_SAME_VALUE(CU_MEM_ALLOCATION_TYPE_PINNED);
SOMA_SAME_VALUE(CU_MEM_LOCATION_TYPE_DEVICE);
SOMA_SAME_VALUE(CU_MEM_HANDLE_TYPE_NONE);
SOMA_SAME_VALUE(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
SOMA_SAME_VALUE(CU_MEM_ACCESS_FLAGS_PROT_NONE);
SOMA_SAME_VALUE(CU_MEM_ACCESS_FLAGS_PROT_READ);
SOMA_SAME_VALUE(CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
SOMA_SAME_VALUE(CU_MEM_ALLOC_GRANULARITY_MINIMUM);
SOMA_SAME_VALUE(CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
SOMA_SAME_VALUE(CU_STREAM_WAIT_VALUE_GEQ);
SOMA_SAME_VALUE(CU_STREAM_WAIT_VALUE_EQ);
SOMA_SAME_VALUE(CU_STREAM_WAIT_VALUE_AND);
SOMA_SAME_VALUE(CU_STREAM_WAIT_VALUE_NOR);
SOMA_SAME_VALUE(CU_STREAM_WRITE_VALUE_DEFAULT);
#undef SOMA_SAME_VALUE
static_assert(ours::host_alloc_portable == CU_MEMHOSTALLOC_PORTABLE);
static_assert(ours::host_alloc_devicemap == CU_MEMHOSTALLOC_DEVICEMAP);

#define SOMA_SAME_FIELD(ours_type, theirs_type, field)                                             \
  static_assert(offsetof(ours::ours_type, field) == offsetof(::theirs_type, field) &&              \
                    sizeof(ours::ours_type::field) == sizeof(::theirs_type::field),                \
                #ours_type "::" #field)
static_assert(sizeof(ours::CUmemLocation) == sizeof(::CUmemLocation));
SOMA_SAME_FIELD(CUmemLocation, CUmemLocation, type);
SOMA_SAME_FIELD(CUmemLocation, CUmemLocation, id);
static_assert(sizeof(ours::CUmemAllocationProp) == sizeof(::CUmemAllocationProp));
SOMA_SAME_FIELD(CUmemAllocationProp, CUmemAllocationProp, type);
SOMA_SAME_FIELD(CUmemAllocationProp, CUmemAllocationProp, requestedHandleTypes);
SOMA_SAME_FIELD(CUmemAllocationProp, CUmemAllocationProp, location);
SOMA_SAME_FIELD(CUmemAllocationProp, CUmemAllocationProp, win32HandleMetaData);
SOMA_SAME_FIELD(CUmemAllocationProp, CUmemAllocationProp, allocFlags);
static_assert(sizeof(ours::CUmemAccessDesc) == sizeof(::CUmemAccessDesc));
SOMA_SAME_FIELD(CUmemAccessDesc, CUmemAccessDesc, location);
SOMA_SAME_FIELD(CUmemAccessDesc, CUmemAccessDesc, flags);
#undef SOMA_SAME_FIELD
static_assert(sizeof(ours::CUdeviceptr) == sizeof(::CUdeviceptr));
static_assert(sizeof(ours::CUmemGenericAllocationHandle) == sizeof(::CUmemGenericAllocationHandle));
static_assert(sizeof(ours::CUresult) == sizeof(::CUresult));
static_assert(ours::soma_driver_abi_version <= CUDA_VERSION);

TEST(cuda_driver_abi, MatchesTheToolkitHeader) {
  // The checks above ran at compile time; this records that they were built.
  EXPECT_EQ(sizeof(ours::CUmemAllocationProp), sizeof(::CUmemAllocationProp));
}

} // namespace
