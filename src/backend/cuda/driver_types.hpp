// The slice of the CUDA driver's ABI (cuda.h, CUDA 12.0 and later) that soma calls, declared
// here so that the build never needs the toolkit: the driver is loaded at run time
// (driver_api.hpp). Names and values copy cuda.h on purpose, so each line can be checked
// against it; tests/backend/cuda_driver_abi_test.cpp does that where the toolkit is installed.
// Signatures are those current at CUDA 12.0: driver_api asks cuGetProcAddress for that
// version, so a newer driver hands back entry points with exactly these types.
#pragma once

#include <cstddef>

namespace soma::detail::backend::cuda {

// ---- handles and scalars, by what they name ------------------------------------------------
// A handle is a pointer to a struct the driver never shows (declared by naming it).
using CUresult = int;
using cuuint64_t = unsigned long long;
// devices
using CUdevice = int;
using CUcontext = struct CUctx_st*;
// memory
using CUdeviceptr = unsigned long long;
using CUmemGenericAllocationHandle = unsigned long long;
using CUarray = struct CUarray_st*;
// work
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUhostFn = void (*)(void* user_data);
using CUgraph = struct CUgraph_st*;
using CUgraphNode = struct CUgraphNode_st*;
using CUgraphExec = struct CUgraphExec_st*;

// ---- results (CUresult) -------------------------------------------------------------------
inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
inline constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
inline constexpr CUresult CUDA_ERROR_NOT_INITIALIZED = 3;
inline constexpr CUresult CUDA_ERROR_DEINITIALIZED = 4;
inline constexpr CUresult CUDA_ERROR_STUB_LIBRARY = 34;
inline constexpr CUresult CUDA_ERROR_DEVICE_UNAVAILABLE = 46;
inline constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
inline constexpr CUresult CUDA_ERROR_INVALID_DEVICE = 101;
inline constexpr CUresult CUDA_ERROR_INVALID_CONTEXT = 201;
inline constexpr CUresult CUDA_ERROR_INVALID_HANDLE = 400;
inline constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;
inline constexpr CUresult CUDA_ERROR_OPERATING_SYSTEM = 304;
inline constexpr CUresult CUDA_ERROR_NOT_READY = 600;
inline constexpr CUresult CUDA_ERROR_ILLEGAL_ADDRESS = 700;
inline constexpr CUresult CUDA_ERROR_CONTEXT_IS_DESTROYED = 709;
inline constexpr CUresult CUDA_ERROR_ASSERT = 710;
inline constexpr CUresult CUDA_ERROR_HARDWARE_STACK_ERROR = 714;
inline constexpr CUresult CUDA_ERROR_ILLEGAL_INSTRUCTION = 715;
inline constexpr CUresult CUDA_ERROR_MISALIGNED_ADDRESS = 716;
inline constexpr CUresult CUDA_ERROR_INVALID_ADDRESS_SPACE = 717;
inline constexpr CUresult CUDA_ERROR_INVALID_PC = 718;
inline constexpr CUresult CUDA_ERROR_LAUNCH_FAILED = 719;
inline constexpr CUresult CUDA_ERROR_NOT_PERMITTED = 800;
inline constexpr CUresult CUDA_ERROR_NOT_SUPPORTED = 801;
inline constexpr CUresult CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803;
inline constexpr CUresult CUDA_ERROR_UNKNOWN = 999;

// ---- flags and enumerations ---------------------------------------------------------------
inline constexpr unsigned CU_STREAM_NON_BLOCKING = 0x1;
inline constexpr unsigned CU_EVENT_DISABLE_TIMING = 0x2;
inline constexpr unsigned CU_EVENT_WAIT_DEFAULT = 0x0;
inline constexpr cuuint64_t CU_GET_PROC_ADDRESS_DEFAULT = 0;
/// The ABI version soma asks cuGetProcAddress for (CUDA 12.0).
inline constexpr int soma_driver_abi_version = 12000;

inline constexpr int CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41;
inline constexpr int CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102;
inline constexpr int CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115;
inline constexpr int CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES = 119;
inline constexpr int CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 141;
inline constexpr int CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED = 142;
inline constexpr int CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED = 144;
inline constexpr int CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 145;

inline constexpr int CU_MEM_ALLOCATION_TYPE_PINNED = 0x1;
inline constexpr int CU_MEM_LOCATION_TYPE_DEVICE = 0x1;
inline constexpr int CU_MEM_LOCATION_TYPE_HOST = 0x2;
inline constexpr int CU_MEM_LOCATION_TYPE_HOST_NUMA = 0x3;
inline constexpr int CU_MEM_HANDLE_TYPE_NONE = 0x0;
inline constexpr int CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 0x1;
inline constexpr int CU_MEM_ACCESS_FLAGS_PROT_NONE = 0x0;
inline constexpr int CU_MEM_ACCESS_FLAGS_PROT_READ = 0x1;
inline constexpr int CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3;
inline constexpr int CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0;
inline constexpr int CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 0x1;
// cuda.h makes these two macros; ours are named apart so the ABI test can compare them.
inline constexpr unsigned host_alloc_portable = 0x01;   ///< CU_MEMHOSTALLOC_PORTABLE
inline constexpr unsigned host_alloc_devicemap = 0x02;  ///< CU_MEMHOSTALLOC_DEVICEMAP
inline constexpr unsigned CU_STREAM_WAIT_VALUE_GEQ = 0x0;
inline constexpr unsigned CU_STREAM_WAIT_VALUE_EQ = 0x1;
inline constexpr unsigned CU_STREAM_WAIT_VALUE_AND = 0x2;
inline constexpr unsigned CU_STREAM_WAIT_VALUE_NOR = 0x3;
inline constexpr unsigned CU_STREAM_WRITE_VALUE_DEFAULT = 0x0;
// CUmemorytype and CUstreamCaptureMode are int-sized enums in cuda.h.
inline constexpr int CU_MEMORYTYPE_HOST = 0x01;
inline constexpr int CU_MEMORYTYPE_DEVICE = 0x02;
inline constexpr int CU_MEMORYTYPE_ARRAY = 0x03;
inline constexpr int CU_MEMORYTYPE_UNIFIED = 0x04;
inline constexpr int CU_STREAM_CAPTURE_MODE_GLOBAL = 0;
inline constexpr int CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1;
inline constexpr int CU_STREAM_CAPTURE_MODE_RELAXED = 2;

// ---- structures (layouts of cuda.h's structs, the *_v1 ones unless said) ------------------
struct CUmemLocation {
  int type = 0;  ///< CU_MEM_LOCATION_TYPE_*
  int id = 0;    ///< device ordinal for CU_MEM_LOCATION_TYPE_DEVICE
};

struct CUmemAllocationProp {
  int type = 0;                  ///< CU_MEM_ALLOCATION_TYPE_*
  int requestedHandleTypes = 0;  ///< CU_MEM_HANDLE_TYPE_* bits
  CUmemLocation location;
  void* win32HandleMetaData = nullptr;
  struct {
    unsigned char compressionType = 0;
    unsigned char gpuDirectRDMACapable = 0;
    unsigned short usage = 0;
    unsigned char reserved[4] = {};
  } allocFlags;
};
static_assert(sizeof(CUmemAllocationProp) == 32, "cuda.h's CUmemAllocationProp_v1 is 32 bytes");

struct CUmemAccessDesc {
  CUmemLocation location;
  int flags = 0;  ///< CU_MEM_ACCESS_FLAGS_PROT_*
};
static_assert(sizeof(CUmemAccessDesc) == 12, "cuda.h's CUmemAccessDesc_v1 is 12 bytes");

/// A memset node: height rows of width elements of elementSize (1, 2 or 4) bytes.
struct CUDA_MEMSET_NODE_PARAMS {
  CUdeviceptr dst = 0;
  std::size_t pitch = 0;  ///< unused when height is 1
  unsigned value = 0;
  unsigned elementSize = 1;
  std::size_t width = 0;  ///< in elements
  std::size_t height = 1;
};
static_assert(sizeof(CUDA_MEMSET_NODE_PARAMS) == 40,
              "cuda.h's CUDA_MEMSET_NODE_PARAMS_v1 is 40 bytes");

/// One side of a 3-D copy: cuda.h's src* or dst* fields of CUDA_MEMCPY3D_v2, which lay out
/// the same for both (cuda.h's dstHost is a void*, of the same size and place).
struct CUDA_MEMCPY3D_side {
  std::size_t XInBytes = 0;
  std::size_t Y = 0;
  std::size_t Z = 0;
  std::size_t LOD = 0;
  int MemoryType = 0;  ///< CU_MEMORYTYPE_*
  const void* Host = nullptr;
  CUdeviceptr Device = 0;
  CUarray Array = nullptr;
  void* reserved = nullptr;
  std::size_t Pitch = 0;
  std::size_t Height = 0;
};
static_assert(sizeof(CUDA_MEMCPY3D_side) == 88, "cuda.h's src* fields take 88 bytes");

/// A 3-D copy (cuda.h's CUDA_MEMCPY3D_v2); soma fills only 1-D unified-address copies.
struct CUDA_MEMCPY3D {
  CUDA_MEMCPY3D_side src;
  CUDA_MEMCPY3D_side dst;
  std::size_t WidthInBytes = 0;
  std::size_t Height = 1;
  std::size_t Depth = 1;
};
static_assert(sizeof(CUDA_MEMCPY3D) == 200, "cuda.h's CUDA_MEMCPY3D_v2 is 200 bytes");

struct CUDA_HOST_NODE_PARAMS {
  CUhostFn fn = nullptr;
  void* userData = nullptr;
};
static_assert(sizeof(CUDA_HOST_NODE_PARAMS) == 16, "cuda.h's CUDA_HOST_NODE_PARAMS_v1 is 16 bytes");

}  // namespace soma::detail::backend::cuda
