// Checks soma's hand-written slice of the CUDA driver ABI (src/backend/cuda/driver_types.hpp)
// against the toolkit's cuda.h. Built only where the toolkit headers are installed; the
// library itself never includes cuda.h.
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstddef>

#include "backend/cuda/driver_types.hpp"

namespace {

namespace ours = soma::detail::backend::cuda;

#define SOMA_SAME_VALUE(name) \
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
SOMA_SAME_VALUE(CU_MEMORYTYPE_HOST);
SOMA_SAME_VALUE(CU_MEMORYTYPE_DEVICE);
SOMA_SAME_VALUE(CU_MEMORYTYPE_ARRAY);
SOMA_SAME_VALUE(CU_MEMORYTYPE_UNIFIED);
SOMA_SAME_VALUE(CU_STREAM_CAPTURE_MODE_GLOBAL);
SOMA_SAME_VALUE(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
SOMA_SAME_VALUE(CU_STREAM_CAPTURE_MODE_RELAXED);
#undef SOMA_SAME_VALUE
static_assert(ours::host_alloc_portable == CU_MEMHOSTALLOC_PORTABLE);
static_assert(ours::host_alloc_devicemap == CU_MEMHOSTALLOC_DEVICEMAP);

#define SOMA_SAME_FIELD(ours_type, theirs_type, field)                                \
  static_assert(offsetof(ours::ours_type, field) == offsetof(::theirs_type, field) && \
                    sizeof(ours::ours_type::field) == sizeof(::theirs_type::field),   \
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
static_assert(sizeof(ours::CUDA_MEMSET_NODE_PARAMS) == sizeof(::CUDA_MEMSET_NODE_PARAMS));
SOMA_SAME_FIELD(CUDA_MEMSET_NODE_PARAMS, CUDA_MEMSET_NODE_PARAMS, dst);
SOMA_SAME_FIELD(CUDA_MEMSET_NODE_PARAMS, CUDA_MEMSET_NODE_PARAMS, pitch);
SOMA_SAME_FIELD(CUDA_MEMSET_NODE_PARAMS, CUDA_MEMSET_NODE_PARAMS, value);
SOMA_SAME_FIELD(CUDA_MEMSET_NODE_PARAMS, CUDA_MEMSET_NODE_PARAMS, elementSize);
SOMA_SAME_FIELD(CUDA_MEMSET_NODE_PARAMS, CUDA_MEMSET_NODE_PARAMS, width);
SOMA_SAME_FIELD(CUDA_MEMSET_NODE_PARAMS, CUDA_MEMSET_NODE_PARAMS, height);
static_assert(sizeof(ours::CUDA_MEMCPY3D) == sizeof(::CUDA_MEMCPY3D));
// Each side of the copy (ours: src.X and dst.X) stands where cuda.h's srcX and dstX do.
#define SOMA_SAME_SIDE_FIELD(side, field, theirs)                                                  \
  static_assert(offsetof(ours::CUDA_MEMCPY3D, side) + offsetof(ours::CUDA_MEMCPY3D_side, field) == \
                        offsetof(::CUDA_MEMCPY3D, theirs) &&                                       \
                    sizeof(ours::CUDA_MEMCPY3D_side::field) == sizeof(::CUDA_MEMCPY3D::theirs),    \
                "CUDA_MEMCPY3D::" #theirs)
#define SOMA_SAME_SIDE(field)                   \
  SOMA_SAME_SIDE_FIELD(src, field, src##field); \
  SOMA_SAME_SIDE_FIELD(dst, field, dst##field)
SOMA_SAME_SIDE(XInBytes);
SOMA_SAME_SIDE(Y);
SOMA_SAME_SIDE(Z);
SOMA_SAME_SIDE(LOD);
SOMA_SAME_SIDE(MemoryType);
SOMA_SAME_SIDE(Host);
SOMA_SAME_SIDE(Device);
SOMA_SAME_SIDE(Array);
SOMA_SAME_SIDE(Pitch);
SOMA_SAME_SIDE(Height);
SOMA_SAME_SIDE_FIELD(src, reserved, reserved0);
SOMA_SAME_SIDE_FIELD(dst, reserved, reserved1);
SOMA_SAME_FIELD(CUDA_MEMCPY3D, CUDA_MEMCPY3D, WidthInBytes);
SOMA_SAME_FIELD(CUDA_MEMCPY3D, CUDA_MEMCPY3D, Height);
SOMA_SAME_FIELD(CUDA_MEMCPY3D, CUDA_MEMCPY3D, Depth);
static_assert(sizeof(ours::CUDA_HOST_NODE_PARAMS) == sizeof(::CUDA_HOST_NODE_PARAMS));
SOMA_SAME_FIELD(CUDA_HOST_NODE_PARAMS, CUDA_HOST_NODE_PARAMS, fn);
SOMA_SAME_FIELD(CUDA_HOST_NODE_PARAMS, CUDA_HOST_NODE_PARAMS, userData);
#undef SOMA_SAME_FIELD
static_assert(sizeof(ours::CUdeviceptr) == sizeof(::CUdeviceptr));
static_assert(sizeof(ours::CUmemGenericAllocationHandle) == sizeof(::CUmemGenericAllocationHandle));
static_assert(sizeof(ours::CUresult) == sizeof(::CUresult));
// Enumerations soma passes as int must be int-sized.
static_assert(sizeof(::CUmemorytype) == sizeof(int));
static_assert(sizeof(::CUstreamCaptureMode) == sizeof(int));
static_assert(sizeof(ours::CUgraph) == sizeof(::CUgraph));
static_assert(sizeof(ours::CUgraphNode) == sizeof(::CUgraphNode));
static_assert(sizeof(ours::CUgraphExec) == sizeof(::CUgraphExec));
static_assert(ours::soma_driver_abi_version <= CUDA_VERSION);

TEST(cuda_driver_abi, MatchesTheToolkitHeader) {
  // The checks above ran at compile time; this records that they were built.
  EXPECT_EQ(sizeof(ours::CUmemAllocationProp), sizeof(::CUmemAllocationProp));
}

}  // namespace
