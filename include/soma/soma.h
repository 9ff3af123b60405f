/**
 * @file soma.h
 * @brief soma's C API: a stream-ordered memory allocator with memory pools.
 *
 * The names mirror the CUDA runtime's with the prefix `soma` (cudaMallocAsync ->
 * somaMallocAsync), so porting stream-ordered CUDA code is a rename. Where soma adds
 * something, the name says so (somaGetLastErrorMessage, somaSetCpuBackendConfig, ...).
 *
 * Every function returns a somaError_t and never lets an exception escape. On failure
 * somaGetLastErrorMessage() gives the calling thread's detail (which limit, which size,
 * which pointer). All functions are thread-safe unless a comment says otherwise.
 *
 * Contract clauses (S1..S16) are those of docs/design.md.
 */
#ifndef SOMA_SOMA_H
#define SOMA_SOMA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define SOMA_API __attribute__((visibility("default")))
#else
#define SOMA_API
#endif

/** Status of every call. Values follow the CUDA runtime's where CUDA has the code. */
typedef enum somaError {
  somaSuccess = 0,
  somaErrorInvalidValue = 1,        /**< bad argument, unknown/freed pointer, double free */
  somaErrorMemoryAllocation = 2,    /**< out of physical memory (device or pool max size) */
  somaErrorInitializationError = 3, /**< the backend could not start */
  somaErrorInvalidDevice = 101,     /**< device ordinal out of range */
  somaErrorNoDevice = 100,          /**< no device for the requested backend */
  /** an operating-system call failed for a reason of the system's, not of the arguments (out of
   *  file descriptors: EMFILE, ENFILE); the message names the call, errno and what to do */
  somaErrorOperatingSystem = 304,
  somaErrorInvalidResourceHandle = 400, /**< destroyed or never-created stream/event/pool */
  somaErrorIllegalState = 401,          /**< not now: e.g. capture begun on a capturing stream */
  somaErrorNotReady = 600,              /**< queried work has not completed yet */
  somaErrorIllegalAddress = 700,        /**< an operation touched memory it may not */
  somaErrorLaunchFailure = 719,         /**< asynchronous work failed (sticky on its stream) */
  somaErrorNotPermitted = 800,          /**< operation not permitted on this object */
  somaErrorNotSupported = 801,          /**< valid request this pool/backend does not support */
  /** S15: a call that cannot be captured (synchronize, query) on a capturing stream; the
   *  capture is invalidated */
  somaErrorStreamCaptureUnsupported = 900,
  somaErrorStreamCaptureInvalidated = 901, /**< S15: the capture failed earlier; it is over */
  somaErrorStreamCaptureUnmatched = 903,   /**< S15: end of a capture on a stream that began none */
  somaErrorStreamCaptureUnjoined = 904, /**< S15: a stream that joined the capture never rejoined */
  somaErrorUnknown = 999,
  /** soma's own (S16): reserving virtual addresses failed (e.g. RLIMIT_AS), while
   *  physical memory may be plentiful. The message names the limit and the sizes. */
  somaErrorAddressSpaceExhausted = 10001,
} somaError_t;

typedef struct somaStream_st* somaStream_t; /**< NULL = the current device's default stream */
typedef struct somaEvent_st* somaEvent_t;
typedef struct somaMemPool_st* somaMemPool_t;

/* ---- enums and structs mirroring CUDA's ------------------------------------------ */

typedef enum somaMemAllocationType {
  somaMemAllocationTypeInvalid = 0,
  somaMemAllocationTypePinned = 1,
  /** not supported: NotSupported wherever asked for, because the driver's virtual memory calls
   *  soma is built on (cuMemCreate) make pinned memory only */
  somaMemAllocationTypeManaged = 2,
} somaMemAllocationType;

typedef enum somaMemAllocationHandleType {
  somaMemHandleTypeNone = 0,
  /** exportable (S7); for device pools and host-NUMA pools, not for Host pools (as CUDA) */
  somaMemHandleTypePosixFileDescriptor = 1,
  somaMemHandleTypeWin32 = 2,
  somaMemHandleTypeWin32Kmt = 4,
  somaMemHandleTypeFabric = 8,
} somaMemAllocationHandleType;

typedef enum somaMemLocationType {
  somaMemLocationTypeInvalid = 0,
  somaMemLocationTypeDevice = 1,   /**< id: the device ordinal */
  somaMemLocationTypeHost = 2,     /**< host memory on any NUMA node; id ignored (S5) */
  somaMemLocationTypeHostNuma = 3, /**< host memory on NUMA node id (S5) */
  /** the calling thread's NUMA node: refused by pool creation and the location-keyed calls,
   *  as CUDA refuses it there */
  somaMemLocationTypeHostNumaCurrent = 4,
} somaMemLocationType;

typedef struct somaMemLocation {
  somaMemLocationType type;
  int id;
} somaMemLocation;

/** Creation-time properties of an explicit pool (S5). Same layout as cudaMemPoolProps. */
typedef struct somaMemPoolProps {
  somaMemAllocationType allocType;         /**< must be Pinned */
  somaMemAllocationHandleType handleTypes; /**< None or PosixFileDescriptor (S7) */
  /** Device with a valid ordinal; Host; HostNuma with a node of this host (S5). Host memory is
   *  the host's at once and a device's after somaMemPoolSetAccess grants it. */
  somaMemLocation location;
  void* win32SecurityAttributes; /**< must be NULL */
  size_t maxSize;                /**< 0 = the device's memory; else a cap in bytes */
  unsigned short usage;          /**< must be 0 */
  unsigned char reserved[54];    /**< must be zero */
} somaMemPoolProps;

typedef enum somaMemAccessFlags {
  somaMemAccessFlagsProtNone = 0,
  somaMemAccessFlagsProtRead = 1,
  somaMemAccessFlagsProtReadWrite = 3,
} somaMemAccessFlags;

typedef struct somaMemAccessDesc {
  somaMemLocation location;
  somaMemAccessFlags flags;
} somaMemAccessDesc;

/** Pool attributes (S9, S10, S11). Values follow cudaMemPoolAttr. */
typedef enum somaMemPoolAttr {
  somaMemPoolReuseFollowEventDependencies = 1,   /**< int, default 1 */
  somaMemPoolReuseAllowOpportunistic = 2,        /**< int, default 1 */
  somaMemPoolReuseAllowInternalDependencies = 3, /**< int, default 1 */
  somaMemPoolAttrReleaseThreshold = 4,           /**< uint64_t bytes, default 0 (S9) */
  somaMemPoolAttrReservedMemCurrent = 5,         /**< uint64_t, get only (S10) */
  somaMemPoolAttrReservedMemHigh = 6,            /**< uint64_t, set only to 0 = reset */
  somaMemPoolAttrUsedMemCurrent = 7,             /**< uint64_t, get only */
  somaMemPoolAttrUsedMemHigh = 8,                /**< uint64_t, set only to 0 = reset */
  /* get only, as CUDA 13.2's: what the pool was created with (S5) */
  somaMemPoolAttrAllocationType = 9,     /**< int: somaMemAllocationType (Pinned) */
  somaMemPoolAttrExportHandleTypes = 10, /**< int: handle types; None for imported pools */
  somaMemPoolAttrLocationId = 11,        /**< int: device ordinal or NUMA node (0 for Host) */
  somaMemPoolAttrLocationType = 12,      /**< int: somaMemLocationType */
  somaMemPoolAttrMaxPoolSize = 13,       /**< uint64_t: the cap (granule rounded); 0 none */
  /** soma's own, int, default 0. 1: when an allocation would make the pool grow although it
   *  holds as much free memory as the request, only not in one piece, soma synchronizes the
   *  allocating stream, gives the pool's free memory back (as TrimTo(0)) and then grows, so the
   *  peak stays near live memory; on cuda the pool then commits one physical allocation per
   *  granule, so free granules inside a commit can go back. Costs a synchronize at such an
   *  allocation. Not for pools created exportable (their commits stay whole). */
  somaMemPoolAttrCompactBeforeGrowth = 1000,
  /** soma's own, int: 0 never, 1 before growth, 2 instead of failing (the default). To remap:
   *  where no free block fits an allocation, soma maps the physical memory of the pool's free
   *  whole granules again, one after another, at fresh addresses, commits only what they lack
   *  after them and serves the allocation there, with no synchronize. 2 does so only where
   *  growth fails; 1 wherever the granules hold a quarter of the request (peak memory near live
   *  memory, at a cost per granule moved). The old addresses are handed out again only after
   *  the frees that let them go have completed. Statistics count the physical memory once. Not
   *  for pools created exportable (S7). On cuda only memory committed a physical allocation per
   *  granule remaps: a pool commits so with 1 and a release threshold above 0, or with
   *  compaction. docs/api-behaviour.md. */
  somaMemPoolAttrRemapFreeMemory = 1001,
  somaMemPoolAttrRemapCount = 1002,    /**< uint64_t, get only: allocations served by remapping */
  somaMemPoolAttrRemappedBytes = 1003, /**< uint64_t, get only: bytes those remaps mapped */
  /** uint64_t, get only: bytes of free blocks at the top of mapped memory that remaps served
   *  where they lay, mapping nothing for them (not in RemappedBytes) */
  somaMemPoolAttrRemapKeptBytes = 1004,
} somaMemPoolAttr;

typedef enum somaDeviceAttr {
  somaDevAttrMemoryPoolsSupported = 115,
  somaDevAttrMemoryPoolSupportedHandleTypes = 119,
  somaDevAttrHostNumaMemoryPoolsSupported = 142, /**< pools at HostNuma locations */
  somaDevAttrHostMemoryPoolsSupported = 144,     /**< pools at the Host location */
  /* soma's own, for tools and tests */
  somaDevAttrTotalMemoryMiB = 20001,           /**< device memory in MiB */
  somaDevAttrAllocationGranularityKiB = 20002, /**< physical granularity in KiB */
} somaDeviceAttr;

typedef enum somaMemoryType {
  somaMemoryTypeUnregistered = 0,
  somaMemoryTypeHost = 1,
  somaMemoryTypeDevice = 2,
  somaMemoryTypeManaged = 3,
} somaMemoryType;

/** Pointer attributes (S14). First four fields as cudaPointerAttributes. */
typedef struct somaPointerAttributes {
  /** Device for a live allocation of a device pool, Host for one of a host pool (and for
   *  somaMallocHost memory), Unregistered otherwise */
  somaMemoryType type;
  int device; /**< owning device; -1 for host memory and where not a live allocation */
  void* devicePointer;
  /** the address where the host reaches it: host memory, and every allocation of the cpu
   *  backend; NULL for device memory on cuda */
  void* hostPointer;
  /* soma's own fields */
  somaMemPool_t pool;   /**< pool that owns the allocation */
  void* base;           /**< start of the allocation that contains the pointer */
  size_t size;          /**< requested size of that allocation in bytes */
  int isLiveAllocation; /**< 1 for a live pool allocation; 0 if soma knows it is not */
  /** where a live pool allocation's memory is: {Device, ordinal}, {Host, 0} or
   *  {HostNuma, node} (S5); zero otherwise */
  somaMemLocation location;
} somaPointerAttributes;

typedef enum somaMemcpyKind {
  somaMemcpyHostToHost = 0,
  somaMemcpyHostToDevice = 1,
  somaMemcpyDeviceToHost = 2,
  somaMemcpyDeviceToDevice = 3,
  somaMemcpyDefault = 4,
} somaMemcpyKind;

enum { somaStreamDefault = 0, somaStreamNonBlocking = 1 };
enum { somaNativeStreamKept = 0, somaNativeStreamMayEndFirst = 1 };
enum { somaEventDefault = 0, somaEventBlockingSync = 1, somaEventDisableTiming = 2 };

typedef void (*somaHostFn_t)(void* userData);

/** Opaque export data for one allocation (S7); 64 bytes like cudaMemPoolPtrExportData. */
typedef struct somaMemPoolPtrExportData {
  unsigned char reserved[64];
} somaMemPoolPtrExportData;

/* ---- errors ------------------------------------------------------------------------ */

SOMA_API const char* somaGetErrorName(somaError_t error);
SOMA_API const char* somaGetErrorString(somaError_t error);
/** Detail of the calling thread's last failure (empty string if none). Valid until the
 *  thread's next soma call. */
SOMA_API const char* somaGetLastErrorMessage(void);
/** Returns and clears the calling thread's last error code. */
SOMA_API somaError_t somaGetLastError(void);

/* ---- backend and devices (S8) --------------------------------------------------------- */
/* A child forked after soma started in its parent cannot use it (cuda: CUDA cannot be used
 * after fork; cpu: stream threads are gone and pool memory is shared with the parent): every
 * call that needs the runtime returns somaErrorInitializationError, saying what to do instead
 * (start soma in the child after fork, or exec / posix_spawn / multiprocessing 'spawn'). */

/** cpu backend settings; any field 0 keeps the default/environment value. */
typedef struct somaCpuBackendConfig {
  int deviceCount;          /**< SOMA_CPU_DEVICES, default 1, at most 64 */
  size_t deviceMemoryBytes; /**< SOMA_CPU_DEVICE_MEMORY, default 4 GiB */
  size_t granularityBytes;  /**< SOMA_CPU_GRANULARITY, default 2 MiB (power of two, >= page) */
} somaCpuBackendConfig;

/** Sets the cpu backend's configuration. Only before the first other soma call that starts
 *  the runtime; afterwards it fails with NotPermitted. deviceCount outside 0..64 (the limit
 *  SOMA_CPU_DEVICES has too): InvalidValue, and the configuration stays as it was. */
SOMA_API somaError_t somaSetCpuBackendConfig(const somaCpuBackendConfig* config);
/** Name of the active backend ("cpu" or "cuda"); starts the runtime. */
SOMA_API somaError_t somaGetBackendName(const char** name);
SOMA_API somaError_t somaGetDeviceCount(int* count);
SOMA_API somaError_t somaSetDevice(int device);
SOMA_API somaError_t somaGetDevice(int* device);
SOMA_API somaError_t somaDeviceGetAttribute(int* value, somaDeviceAttr attr, int device);
SOMA_API somaError_t somaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice);
/** Free and total bytes of the current device (cudaMemGetInfo). cpu: the device's budget minus
 *  what pools committed; cuda: the driver's device-wide figure, which other processes and the
 *  driver's own allocations move too. */
SOMA_API somaError_t somaMemGetInfo(size_t* freeBytes, size_t* totalBytes);
/** soma's own: bytes of physical memory this process's pools hold on device (all pools,
 *  destroyed ones still draining included; imported memory excluded). Unlike somaMemGetInfo
 *  it moves only with soma's commits and releases, on every backend. */
SOMA_API somaError_t somaDeviceGetCommittedBytes(size_t* bytes, int device);
/** Waits for all work on every stream of the current device (S9, S12). */
SOMA_API somaError_t somaDeviceSynchronize(void);

/* ---- streams and events --------------------------------------------------------------- */

SOMA_API somaError_t somaStreamCreate(somaStream_t* stream);
SOMA_API somaError_t somaStreamCreateWithFlags(somaStream_t* stream, unsigned int flags);
/** Returns at once; queued work still runs. The handle is invalid afterwards. */
SOMA_API somaError_t somaStreamDestroy(somaStream_t stream);
SOMA_API somaError_t somaStreamSynchronize(somaStream_t stream);
/** Success if all queued work completed, NotReady otherwise. */
SOMA_API somaError_t somaStreamQuery(somaStream_t stream);
SOMA_API somaError_t somaStreamWaitEvent(somaStream_t stream, somaEvent_t event,
                                         unsigned int flags);
SOMA_API somaError_t somaStreamGetDevice(somaStream_t stream, int* device);
/** soma's own: a soma stream over an existing native stream of device (cuda backend: a
 *  CUstream, e.g. PyTorch's current stream). The caller keeps owning the native stream and
 *  must keep it alive until somaStreamDestroy; soma never destroys it. cpu backend:
 *  somaErrorNotSupported. */
SOMA_API somaError_t somaStreamCreateFromNative(somaStream_t* stream, void* nativeStream,
                                                int device);
/** soma's own: somaStreamCreateFromNative with flags. somaNativeStreamMayEndFirst: the native
 *  stream's owner may destroy it before somaStreamDestroy (CuPy's streams, which Python
 *  collects whenever it likes). soma then records a completion marker on the native stream
 *  after each operation that takes a place on it (each free among them, one cuEventRecord
 *  each), so it never needs the native stream again afterwards: somaStreamDestroy and every
 *  later reuse decision leave it untouched, and somaStreamSynchronize / somaStreamQuery on it
 *  answer from those markers (soma's work there, not the owner's later work). Without the flag
 *  the native stream must outlive the soma stream. Other flag bits: somaErrorInvalidValue. */
SOMA_API somaError_t somaStreamCreateFromNativeWithFlags(somaStream_t* stream, void* nativeStream,
                                                         int device, unsigned int flags);
/** soma's own: the native stream behind a soma stream (cuda: its CUstream, to launch your
 *  own kernels on), or NULL on the cpu backend. */
SOMA_API somaError_t somaStreamGetNative(somaStream_t stream, void** nativeStream);

SOMA_API somaError_t somaEventCreate(somaEvent_t* event);
SOMA_API somaError_t somaEventCreateWithFlags(somaEvent_t* event, unsigned int flags);
SOMA_API somaError_t somaEventDestroy(somaEvent_t event);
/** Captures the position of all work queued so far on stream. */
SOMA_API somaError_t somaEventRecord(somaEvent_t event, somaStream_t stream);
SOMA_API somaError_t somaEventQuery(somaEvent_t event);
SOMA_API somaError_t somaEventSynchronize(somaEvent_t event);

/** Runs fn(userData) on the stream after all earlier work; later work waits for it. */
SOMA_API somaError_t somaLaunchHostFunc(somaStream_t stream, somaHostFn_t fn, void* userData);
typedef somaError_t (*somaHostStatusFn_t)(void* userData);
/** soma's own: a host task that can fail. A status other than somaSuccess becomes the
 *  stream's sticky error (somaErrorLaunchFailure): later work on that stream is skipped and
 *  every call that observes the stream (synchronize, query, enqueue) reports it. */
SOMA_API somaError_t somaLaunchHostFuncWithStatus(somaStream_t stream, somaHostStatusFn_t fn,
                                                  void* userData);
SOMA_API somaError_t somaMemsetAsync(void* devPtr, int value, size_t count, somaStream_t stream);
SOMA_API somaError_t somaMemcpyAsync(void* dst, const void* src, size_t count, somaMemcpyKind kind,
                                     somaStream_t stream);

/* ---- host memory and stream value operations --------------------------------------------- */

/** Host memory that streams can reach (cudaMallocHost): copies between it and pool memory
 *  are asynchronous, and stream value operations may use its words. cuda: page-locked and
 *  mapped for every device (cuMemHostAlloc, portable); cpu: ordinary pages. Page aligned.
 *  Size 0 gives NULL. Refused by the platform: somaErrorMemoryAllocation. */
SOMA_API somaError_t somaMallocHost(void** ptr, size_t size);
/** Frees what somaMallocHost returned; NULL is a no-op. Any other pointer (interior, freed,
 *  never allocated): somaErrorInvalidValue, and nothing is freed. No stream may still use it. */
SOMA_API somaError_t somaFreeHost(void* ptr);

/** Conditions of somaStreamWaitValue32 (values of CU_STREAM_WAIT_VALUE_*). */
typedef enum somaStreamWaitValueFlags {
  somaStreamWaitValueGeq = 0, /**< (int32_t)(*addr - value) >= 0: a counter that may wrap */
  somaStreamWaitValueEq = 1,  /**< *addr == value */
  somaStreamWaitValueAnd = 2, /**< (*addr & value) != 0 */
  somaStreamWaitValueNor = 3, /**< ~(*addr | value) != 0 */
} somaStreamWaitValueFlags;
/** Later work on the stream waits until the 32-bit word at addr satisfies the condition
 *  (cuStreamWaitValue32). addr: 4-byte aligned, inside somaMallocHost memory or a live pool
 *  allocation; the host or another stream (somaStreamWriteValue32) writes it. Lets a test or
 *  an application hold a stream without a host task: on the GPU a blocked host task can hold
 *  up other streams' host tasks, a value wait does not. Bad address or flags:
 *  somaErrorInvalidValue. */
SOMA_API somaError_t somaStreamWaitValue32(somaStream_t stream, uint32_t* addr, uint32_t value,
                                           unsigned int flags);
/** Writes value to the word at addr once earlier work on the stream completed
 *  (cuStreamWriteValue32); the host sees it with an acquire load. flags must be 0. */
SOMA_API somaError_t somaStreamWriteValue32(somaStream_t stream, uint32_t* addr, uint32_t value,
                                            unsigned int flags);

/** soma's own: a memory range a host task declares it touches, and how (ProtRead or
 *  ProtReadWrite). */
typedef struct somaHostAccess {
  const void* ptr;
  size_t size;
  somaMemAccessFlags access;
} somaHostAccess;
/** soma's own: somaLaunchHostFunc for a task that declares the memory it touches. Each range in
 *  pool memory must lie in a live allocation that the stream's device may use that way (its own
 *  pools, or pools whose somaMemPoolSetAccess granted it; S6): otherwise somaErrorNotPermitted
 *  (no access, or read-only access to a range declared ProtReadWrite) or somaErrorInvalidValue
 *  (not a live allocation, past its end, bad flags), and nothing is enqueued. Ranges in host
 *  memory are not checked. */
SOMA_API somaError_t somaLaunchHostFuncWithAccess(somaStream_t stream, somaHostFn_t fn,
                                                  void* userData, const somaHostAccess* accesses,
                                                  size_t count);

/* ---- stream-ordered allocation (S1, S2, S4) ---------------------------------------------- */

/** Allocates bytes from the current pool of the stream's device (S1, S4). Size 0 gives
 *  NULL and success. Out of memory: MemoryAllocation; address space: AddressSpaceExhausted. */
SOMA_API somaError_t somaMallocAsync(void** devPtr, size_t size, somaStream_t stream);
/** Allocates from an explicit pool, which may belong to another device than the stream's. */
SOMA_API somaError_t somaMallocFromPoolAsync(void** ptr, size_t size, somaMemPool_t memPool,
                                             somaStream_t stream);
/** Releases devPtr after all earlier work in stream (S2). NULL is a no-op. */
SOMA_API somaError_t somaFreeAsync(void* devPtr, somaStream_t stream);

/* ---- pools (S3, S5, S9, S10, S11) ---------------------------------------------------------- */

SOMA_API somaError_t somaMemPoolCreate(somaMemPool_t* memPool, const somaMemPoolProps* poolProps);
/** Returns at once; the pool's resources go back when its last allocation is freed (S5).
 *  The default pool cannot be destroyed. */
SOMA_API somaError_t somaMemPoolDestroy(somaMemPool_t memPool);
SOMA_API somaError_t somaDeviceGetDefaultMemPool(somaMemPool_t* memPool, int device);
SOMA_API somaError_t somaDeviceSetMemPool(int device, somaMemPool_t memPool);
/** The default pool of a location and allocation type (as cudaMemGetDefaultMemPool): a
 *  device's, or the host's or a host NUMA node's, made at the first call (S3, S5). Location
 *  Device/Host/HostNuma and type Pinned; Managed: NotSupported; anything else: InvalidValue. */
SOMA_API somaError_t somaMemGetDefaultMemPool(somaMemPool_t* memPool, somaMemLocation* location,
                                              somaMemAllocationType type);
/** The current pool of a location and allocation type: the last one somaMemSetMemPool (or,
 *  for a device, somaDeviceSetMemPool) set, else its default pool. somaMallocAsync uses the
 *  current pool of the stream's device, never a host location's (as cudaMallocAsync); use
 *  somaMallocFromPoolAsync for host pools. */
SOMA_API somaError_t somaMemGetMemPool(somaMemPool_t* memPool, somaMemLocation* location,
                                       somaMemAllocationType type);
/** Sets the current pool of a location; the pool's location and allocation type must be the
 *  ones named (InvalidValue otherwise). For {Device, d} it is somaDeviceSetMemPool(d, ...). */
SOMA_API somaError_t somaMemSetMemPool(somaMemLocation* location, somaMemAllocationType type,
                                       somaMemPool_t memPool);
SOMA_API somaError_t somaDeviceGetMemPool(somaMemPool_t* memPool, int device);
SOMA_API somaError_t somaMemPoolSetAttribute(somaMemPool_t memPool, somaMemPoolAttr attr,
                                             void* value);
SOMA_API somaError_t somaMemPoolGetAttribute(somaMemPool_t memPool, somaMemPoolAttr attr,
                                             void* value);
/** Releases memory whose free is known complete until at most minBytesToKeep stay
 *  reserved, as far as live memory and granularity allow (S9). */
SOMA_API somaError_t somaMemPoolTrimTo(somaMemPool_t memPool, size_t minBytesToKeep);
/** Grants (ProtRead, ProtReadWrite) or revokes (ProtNone) access of devices to every allocation
 *  of the pool, present and future (S6). The owning device keeps read-write access (ProtNone
 *  for it: InvalidDevice; ProtRead: NotSupported). Host locations: NotSupported; an unknown
 *  location type or flags, descList NULL with a count, or more entries than devices (checked
 *  before any is read): InvalidValue; a bad ordinal or a device that cannot access the owner's
 *  memory (somaDeviceCanAccessPeer): InvalidDevice. Every entry is checked before any is
 *  applied. Independent of any peer-access switch. */
SOMA_API somaError_t somaMemPoolSetAccess(somaMemPool_t memPool, const somaMemAccessDesc* descList,
                                          size_t count);
/** The access location has to the pool's memory: ReadWrite for the owning device, what
 *  somaMemPoolSetAccess granted (ProtNone by default) for others. */
SOMA_API somaError_t somaMemPoolGetAccess(somaMemAccessFlags* flags, somaMemPool_t memPool,
                                          somaMemLocation* location);
/** soma's own: gives the pool a name used in messages ("pool 'tenant-a' on device 0"). */
SOMA_API somaError_t somaMemPoolSetName(somaMemPool_t memPool, const char* name);

/* ---- snapshots (soma's own: what a pool holds, for people to read) --------------------------- */

/** A block's state in a snapshot. */
typedef enum somaMemBlockState {
  somaMemBlockLive = 0,       /**< handed to the application */
  somaMemBlockFree = 1,       /**< free for every stream */
  somaMemBlockFreePending = 2 /**< freed on a stream whose work up to `position` is not known
                                   complete: that stream may reuse it at once, others per the
                                   reuse policies or after a synchronize (S11) */
} somaMemBlockState;

/** One block of a pool's mapped memory. */
typedef struct somaMemBlockInfo {
  void* address;
  size_t bytes;          /**< capacity, a multiple of 256 */
  size_t requestedBytes; /**< live: what somaMallocAsync was asked for; else 0 */
  somaMemBlockState state;
  /** FreePending: 1 if `stream` names the stream the free waits for (NULL: the default stream
   *  of the pool's device); 0 when that stream was destroyed: its queued work still runs, and
   *  once it has, a device synchronize proves the free for every stream. */
  int streamKnown;
  somaStream_t stream;
  unsigned long long position; /**< FreePending: that stream's position (operations enqueued) */
  /** Live: the innermost somaMemScopePush label of the allocating thread when the block was
   *  allocated while memory history recorded; NULL otherwise. Valid for the process's life. */
  const char* scope;
} somaMemBlockInfo;

/** An address range: a reservation of address space, or physical memory mapped into it. */
typedef struct somaMemRange {
  void* address;
  size_t bytes;
} somaMemRange;

/** One pool at the moment of the snapshot. Exact when no other thread allocates or frees in the
 *  pool meanwhile: then the live blocks' requestedBytes sum to usedBytes, and the blocks tile
 *  the commits, whose sizes sum to reservedBytes. */
typedef struct somaMemPoolSnapshot {
  somaMemPool_t pool;
  int device;
  char name[64]; /**< somaMemPoolSetName's, truncated; "" for none */
  unsigned long long reservedBytes, reservedHighBytes, usedBytes, usedHighBytes;
  size_t reservationCount;
  const somaMemRange* reservations; /**< address space, in address order */
  size_t commitCount;
  const somaMemRange* commits; /**< physical memory mapped, in address order */
  size_t blockCount;
  const somaMemBlockInfo* blocks; /**< in address order */
} somaMemPoolSnapshot;

/** Snapshots of one or more pools; every array is soma's until somaMemSnapshotFree. */
typedef struct somaMemSnapshot {
  size_t poolCount;
  const somaMemPoolSnapshot* pools;
  void* storage; /**< soma's */
} somaMemSnapshot;

/** soma's own: the state of memPool into *snapshot (one pool). */
SOMA_API somaError_t somaMemPoolSnapshotTake(somaMemPool_t memPool, somaMemSnapshot* snapshot);
/** soma's own: the state of every live pool of every device (default pools first, then the
 *  others in creation order) into *snapshot. */
SOMA_API somaError_t somaMemSnapshotTakeAll(somaMemSnapshot* snapshot);
/** Frees what a Take call gave and zeroes *snapshot; a zeroed snapshot is a no-op. */
SOMA_API somaError_t somaMemSnapshotFree(somaMemSnapshot* snapshot);

/** The one change that would have let a failed allocation succeed (somaOutOfMemoryReport). */
typedef enum somaOutOfMemoryChange {
  somaOomChangeNone = 0,                      /**< no allocation of the pool ran out of memory */
  somaOomChangeLargerMaxSize = 1,             /**< changeBytes: the max size the request needs */
  somaOomChangeSynchronizeStream = 2,         /**< changeStream's free of changeBytes would serve */
  somaOomChangeAllowInternalDependencies = 3, /**< the same, with internal dependencies off */
  somaOomChangeSynchronizeDevice = 4,         /**< frees of a destroyed stream or of several */
  somaOomChangeCompactBeforeGrowth = 5,       /**< changeBytes free, in more than one piece */
  somaOomChangeFreeDeviceMemory = 6,          /**< the platform refused to commit changeBytes */
  somaOomChangeSynchronizeDeviceAndCompact = 7,
  somaOomChangeMoreMaxSize = 8,    /**< a max size larger by changeBytes */
  somaOomChangeRemapFreeMemory = 9 /**< changeBytes free, in more than one piece: remapping */
} somaOutOfMemoryChange;

/** Memory freed on one stream and not yet known complete, at the failure. */
typedef struct somaPendingFrees {
  int streamKnown; /**< 0: a destroyed stream */
  somaStream_t stream;
  unsigned long long bytes;
  unsigned long long largestBytes;
} somaPendingFrees;

/** The latest out-of-memory failure of an allocation from a pool: the facts its message gives,
 *  as data. */
typedef struct somaOutOfMemoryReport {
  size_t requestedBytes;
  somaStream_t stream; /**< the allocating stream (NULL: a default stream) */
  unsigned long long reservedBytes, usedBytes, maxSizeBytes;
  unsigned long long freeBytes; /**< free for every stream */
  size_t freePieces;
  unsigned long long largestFreeBytes;
  unsigned long long pendingBytes;    /**< freed, not yet known complete, on all streams */
  size_t pendingStreamCount;          /**< entries of pendingStreams used (at most 8) */
  somaPendingFrees pendingStreams[8]; /**< most bytes first */
  int reuseFollowEventDependencies, reuseAllowOpportunistic, reuseAllowInternalDependencies;
  int compactBeforeGrowth;
  somaOutOfMemoryChange change;
  unsigned long long changeBytes;
  int changeStreamKnown;
  somaStream_t changeStream;
  int remapFreeMemory; /**< somaMemPoolAttrRemapFreeMemory at the failure */
} somaOutOfMemoryReport;

/** soma's own: the latest out-of-memory failure of an allocation from memPool into *report;
 *  change = somaOomChangeNone (and the rest zero) when there was none. */
SOMA_API somaError_t somaMemPoolGetLastOutOfMemory(somaMemPool_t memPool,
                                                   somaOutOfMemoryReport* report);

/* ---- memory history (soma's own) ----------------------------------------------------------- */

/** Starts recording what every pool does into a ring of the last maxEntries events (64 bytes
 *  each; at most 2^26), dropping what was recorded; 0 stops recording and keeps what was
 *  recorded. Records allocations (with the reuse rule that served each and the thread's scope
 *  label), frees, inserted waits, growth, release, trims, compaction, synchronize points and
 *  out-of-memory failures. SOMA_HISTORY=<maxEntries> starts it when soma starts. The ring's
 *  memory (maxEntries rounded up to a power of two) stays for the process's life and serves
 *  every later start that rounds to the same size. */
SOMA_API somaError_t somaMemRecordHistory(size_t maxEntries);
/** Writes the recorded history to path as Chrome trace-event JSON, which Perfetto
 *  (ui.perfetto.dev) and chrome://tracing open: a process per device, a track per stream, a
 *  counter per pool with its reserved and used bytes. SOMA_HISTORY_TRACE=<path> writes it when
 *  the process exits. */
SOMA_API somaError_t somaMemHistoryExportTrace(const char* path);
/** Opens a scope on the calling thread: while history records, its allocations carry label
 *  (innermost scope) in the trace and in snapshots. Scopes nest; label is copied. */
SOMA_API somaError_t somaMemScopePush(const char* label);
/** Closes the calling thread's innermost scope; somaErrorIllegalState if none is open. */
SOMA_API somaError_t somaMemScopePop(void);

/* ---- pointers (S14) -------------------------------------------------------------------------- */

SOMA_API somaError_t somaPointerGetAttributes(somaPointerAttributes* attributes, const void* ptr);

/* ---- sharing pools between processes (S7) ------------------------------------------------- */
/* docs/ipc.md: how it works, what a handle grants, the lifetime rule. */

/** Exports memPool as an OS handle for one other process. The pool must have been created with
 *  handleType in its handleTypes (exportability is fixed at creation); handleType must be
 *  somaMemHandleTypePosixFileDescriptor: an int is written through shareableHandle, a new
 *  descriptor (close-on-exec) that the caller owns, passes to the importing process (SCM_RIGHTS
 *  over a Unix socket) and closes. Each call gives a new descriptor: give each importing process
 *  its own. Default pool, pool without that handle type, imported pool, another handle type,
 *  flags != 0, NULL shareableHandle: InvalidValue; destroyed pool: InvalidResourceHandle; no
 *  descriptor left in this process (EMFILE): OperatingSystem. */
SOMA_API somaError_t somaMemPoolExportToShareableHandle(void* shareableHandle,
                                                        somaMemPool_t memPool,
                                                        somaMemAllocationHandleType handleType,
                                                        unsigned long long flags);
/** Imports a pool exported by another process. For somaMemHandleTypePosixFileDescriptor,
 *  shareableHandle is the descriptor's int value cast to void* (as CUDA); the caller keeps
 *  owning the descriptor. The imported pool is on the exporter's device ordinal, cannot
 *  allocate, be a current pool, change or read its release threshold and reuse policies, be
 *  trimmed or exported again (InvalidValue); somaMemPoolDestroy releases it. A descriptor that
 *  is not open, not a pool handle, whose exporter is gone or does not answer within
 *  SOMA_IPC_TIMEOUT_MS (default 10000 ms): InvalidValue, with the reason in the message. No
 *  descriptor left in this process (EMFILE): OperatingSystem. */
SOMA_API somaError_t somaMemPoolImportFromShareableHandle(somaMemPool_t* memPool,
                                                          void* shareableHandle,
                                                          somaMemAllocationHandleType handleType,
                                                          unsigned long long flags);
/** Export data for the live allocation that starts at ptr, of an exportable pool: 64 bytes to
 *  pass by any channel. Exporting the same allocation again gives the same data; it goes stale
 *  when the allocation is freed. Need not wait for the allocating stream. A pointer that is not
 *  the start of a live allocation, or of a pool that is not exportable (default, no handle
 *  types, imported): InvalidValue. */
SOMA_API somaError_t somaMemPoolExportPointer(somaMemPoolPtrExportData* exportData, void* ptr);
/** Maps the allocation named by exportData into this process and returns its address here. The
 *  memory is shared: both processes see the same bytes (order accesses across processes, e.g.
 *  with messages after a stream synchronize). Importing the same data again while the first
 *  import is live gives the same pointer. Free it with somaFreeAsync, which unmaps it once the
 *  stream passes the free, and before the exporter frees the allocation. Data that is
 *  malformed, of another pool, forged (wrong nonce, never issued) or stale (freed), a pool that
 *  is not imported, an exporter that is gone: InvalidValue, and nothing is mapped. No descriptor
 *  left in this process to receive the memory (EMFILE): OperatingSystem; nothing is mapped and
 *  the same data can be imported again. */
SOMA_API somaError_t somaMemPoolImportPointer(void** ptr, somaMemPool_t memPool,
                                              somaMemPoolPtrExportData* exportData);

/* ---- graphs with memory nodes (S15) ---------------------------------------------------------- */
/* docs/graphs.md: how to use them, the rules, and what soma checks that CUDA leaves undefined.
 *
 * A graph holds nodes with dependencies; an executable graph (somaGraphInstantiate) is launched
 * into a stream as a whole. Alloc and free nodes put an allocation's life inside the graph: it
 * starts when execution reaches the alloc node and ends at the free node, or, when the graph does
 * not free it, at a somaFreeAsync ordered after the launch. Every node that touches graph memory
 * (memset, copy, host node with declared access) must be reachable from the alloc node and must
 * reach the free node: otherwise InvalidValue naming both nodes, when the node is added if the
 * graph already shows it, else at instantiation.
 *
 * Graph memory comes from a per-device graph pool, apart from the stream-ordered pools
 * (somaMemPoolTrimTo does not touch it). Graphs launched into one stream share physical memory;
 * graphs that may run at the same time, and memory an unfreed allocation holds, never do. Inside
 * a graph, allocations whose lifetimes cannot overlap share physical memory.
 *
 * cuda backend: a launch is one cuGraphLaunch; cpu backend: the nodes run on the launching
 * stream in an order that respects every dependency. Graph objects are not thread-safe: use one
 * graph or executable graph from one thread at a time. */

typedef struct somaGraph_st* somaGraph_t;
typedef struct somaGraphNode_st* somaGraphNode_t;
typedef struct somaGraphExec_st* somaGraphExec_t;

/** Parameters of an alloc node (cudaMemAllocNodeParams). */
typedef struct somaMemAllocNodeParams {
  somaMemPoolProps poolProps;           /**< Pinned, Device location, handleTypes None */
  const somaMemAccessDesc* accessDescs; /**< other devices' access; may be NULL with count 0 */
  size_t accessDescCount;
  size_t bytesize; /**< > 0 */
  void* dptr;      /**< out: the address, fixed for every launch */
} somaMemAllocNodeParams;

/** Parameters of a memset node (cudaMemsetParams). soma sets bytes: elementSize 1, height 1. */
typedef struct somaMemsetParams {
  void* dst;
  size_t pitch;       /**< ignored for height 1 */
  unsigned int value; /**< the low byte is written */
  unsigned int elementSize;
  size_t width; /**< bytes */
  size_t height;
} somaMemsetParams;

/** Parameters of a host node (cudaHostNodeParams). */
typedef struct somaHostNodeParams {
  somaHostFn_t fn;
  void* userData;
} somaHostNodeParams;

typedef enum somaStreamCaptureMode {
  somaStreamCaptureModeGlobal = 0,
  somaStreamCaptureModeThreadLocal = 1,
  somaStreamCaptureModeRelaxed = 2,
} somaStreamCaptureMode;

typedef enum somaStreamCaptureStatus {
  somaStreamCaptureStatusNone = 0,
  somaStreamCaptureStatusActive = 1,
  somaStreamCaptureStatusInvalidated = 2,
} somaStreamCaptureStatus;

enum {
  /** each launch first frees, in stream order, what the previous launch left unfreed */
  somaGraphInstantiateFlagAutoFreeOnLaunch = 1,
  /** upload at instantiation, on the device's default stream */
  somaGraphInstantiateFlagUpload = 2,
  somaGraphInstantiateFlagDeviceLaunch = 4,    /**< NotSupported */
  somaGraphInstantiateFlagUseNodePriority = 8, /**< accepted; soma has no priorities */
};

typedef enum somaGraphMemAttributeType {
  somaGraphMemAttrUsedMemCurrent = 0,     /**< uint64_t: bytes mapped into at least one graph */
  somaGraphMemAttrUsedMemHigh = 1,        /**< uint64_t; set only to 0 = reset */
  somaGraphMemAttrReservedMemCurrent = 2, /**< uint64_t: physical bytes held for graphs */
  somaGraphMemAttrReservedMemHigh = 3,    /**< uint64_t; set only to 0 = reset */
} somaGraphMemAttributeType;

SOMA_API somaError_t somaGraphCreate(somaGraph_t* graph, unsigned int flags);
/** Frees the graph's nodes. Executable graphs made from it stay valid, and allocations their
 *  launches left unfreed stay live. */
SOMA_API somaError_t somaGraphDestroy(somaGraph_t graph);

/* Every somaGraphAdd*Node takes the new node's dependencies: numDependencies nodes of the same
 * graph (NULL with 0 for a root). A node of another graph, a repeated dependency or a NULL
 * argument: InvalidValue. */

/** Adds an alloc node; params->dptr receives the address at once. A pool property other than
 *  Pinned on a Device location with no handle types, bytesize 0, or an access list with an
 *  entry for a device that cannot reach the owner (InvalidDevice): refused. All alloc nodes of
 *  a graph belong to one device. */
SOMA_API somaError_t somaGraphAddMemAllocNode(somaGraphNode_t* node, somaGraph_t graph,
                                              const somaGraphNode_t* dependencies,
                                              size_t numDependencies,
                                              somaMemAllocNodeParams* params);
/** Adds a free node for dptr: the start of an alloc node's allocation of this graph, or of
 *  another graph's that that graph does not free. The same allocation freed twice, in one graph
 *  or in two, an address that is no graph allocation: InvalidValue. */
SOMA_API somaError_t somaGraphAddMemFreeNode(somaGraphNode_t* node, somaGraph_t graph,
                                             const somaGraphNode_t* dependencies,
                                             size_t numDependencies, void* dptr);
/** Sets width bytes at dst. Inside a graph allocation: the range must lie in it and the node
 *  may not depend on its free node (InvalidValue). elementSize other than 1 or height other
 *  than 1: NotSupported. */
SOMA_API somaError_t somaGraphAddMemsetNode(somaGraphNode_t* node, somaGraph_t graph,
                                            const somaGraphNode_t* dependencies,
                                            size_t numDependencies,
                                            const somaMemsetParams* memsetParams);
/** Copies count bytes (cudaGraphAddMemcpyNode1D). Ranges in graph memory follow the memset
 *  node's rules; ranges in pool memory must lie in a live allocation when the node is added. */
SOMA_API somaError_t somaGraphAddMemcpyNode1D(somaGraphNode_t* node, somaGraph_t graph,
                                              const somaGraphNode_t* dependencies,
                                              size_t numDependencies, void* dst, const void* src,
                                              size_t count, somaMemcpyKind kind);
SOMA_API somaError_t somaGraphAddHostNode(somaGraphNode_t* node, somaGraph_t graph,
                                          const somaGraphNode_t* dependencies,
                                          size_t numDependencies,
                                          const somaHostNodeParams* nodeParams);
/** soma's own: a host node that declares the memory it touches (as somaLaunchHostFuncWithAccess);
 *  declared graph memory is checked like a memset node's. */
SOMA_API somaError_t somaGraphAddHostNodeWithAccess(somaGraphNode_t* node, somaGraph_t graph,
                                                    const somaGraphNode_t* dependencies,
                                                    size_t numDependencies,
                                                    const somaHostNodeParams* nodeParams,
                                                    const somaHostAccess* accesses, size_t count);
/** The event must outlive the graph and its executable graphs. */
SOMA_API somaError_t somaGraphAddEventRecordNode(somaGraphNode_t* node, somaGraph_t graph,
                                                 const somaGraphNode_t* dependencies,
                                                 size_t numDependencies, somaEvent_t event);
SOMA_API somaError_t somaGraphAddEventWaitNode(somaGraphNode_t* node, somaGraph_t graph,
                                               const somaGraphNode_t* dependencies,
                                               size_t numDependencies, somaEvent_t event);
SOMA_API somaError_t somaGraphAddEmptyNode(somaGraphNode_t* node, somaGraph_t graph,
                                           const somaGraphNode_t* dependencies,
                                           size_t numDependencies);
/** soma's own: the platform's own graph as one node (cuda: a CUgraph, e.g. made with
 *  cudaStreamBeginCapture around your kernels; it is copied, so the caller keeps owning it).
 *  cpu backend: NotSupported. */
SOMA_API somaError_t somaGraphAddNativeChildGraphNode(somaGraphNode_t* node, somaGraph_t graph,
                                                      const somaGraphNode_t* dependencies,
                                                      size_t numDependencies, void* nativeGraph);
/** Adds the edges from[i] -> to[i]. An edge that would close a cycle, or a node of another
 *  graph: InvalidValue, and no edge is added. */
SOMA_API somaError_t somaGraphAddDependencies(somaGraph_t graph, const somaGraphNode_t* from,
                                              const somaGraphNode_t* to, size_t numDependencies);
/** The alloc node's parameters; accessDescs points into the node (valid while the graph lives). */
SOMA_API somaError_t somaGraphMemAllocNodeGetParams(somaGraphNode_t node,
                                                    somaMemAllocNodeParams* paramsOut);
SOMA_API somaError_t somaGraphMemFreeNodeGetParams(somaGraphNode_t node, void** dptrOut);

/** Captures the stream's work into a graph instead of running it: somaMallocAsync,
 *  somaMallocFromPoolAsync, somaFreeAsync, somaMemsetAsync, somaMemcpyAsync, somaLaunchHostFunc
 *  (and WithAccess), somaEventRecord and somaStreamWaitEvent become nodes in stream order.
 *  Another stream joins the capture by waiting for an event recorded on a capturing stream, and
 *  must rejoin the origin stream the same way before the capture ends. cuda backend: the native
 *  stream (somaStreamGetNative) is captured too, so your kernels land in the graph in order with
 *  soma's nodes. The default stream (NULL): StreamCaptureUnsupported; a stream already capturing:
 *  IllegalState. */
SOMA_API somaError_t somaStreamBeginCapture(somaStream_t stream, somaStreamCaptureMode mode);
/** Ends the capture begun on stream and returns its graph. A stream that did not begin it:
 *  StreamCaptureUnmatched; a joined stream that did not rejoin: StreamCaptureUnjoined; a capture
 *  that failed earlier: StreamCaptureInvalidated. In each case the capture ends, *graph is NULL. */
SOMA_API somaError_t somaStreamEndCapture(somaStream_t stream, somaGraph_t* graph);
SOMA_API somaError_t somaStreamIsCapturing(somaStream_t stream,
                                           somaStreamCaptureStatus* captureStatus);

/** A graph holding memory nodes has one executable graph at a time (a second: NotSupported).
 *  Checks the ordering rules and lays out the graph's memory. */
SOMA_API somaError_t somaGraphInstantiate(somaGraphExec_t* graphExec, somaGraph_t graph,
                                          unsigned long long flags);
/** Maps the graph's memory for launches on stream, ahead of the first launch. */
SOMA_API somaError_t somaGraphUpload(somaGraphExec_t graphExec, somaStream_t stream);
/** Launches into stream (of the graph memory's device). The previous launch's allocations
 *  still unfreed without somaGraphInstantiateFlagAutoFreeOnLaunch: InvalidValue. */
SOMA_API somaError_t somaGraphLaunch(somaGraphExec_t graphExec, somaStream_t stream);
/** Returns at once; launched work still runs. Allocations left unfreed stay live. */
SOMA_API somaError_t somaGraphExecDestroy(somaGraphExec_t graphExec);
/** Changes a memset node for later launches. A node of another graph, or a range that leaves the
 *  graph allocation the node was made for (or a graph allocation when it was made for other
 *  memory): InvalidValue. */
SOMA_API somaError_t somaGraphExecMemsetNodeSetParams(somaGraphExec_t graphExec,
                                                      somaGraphNode_t node,
                                                      const somaMemsetParams* memsetParams);

/** Gives back the device's graph memory that no unfreed allocation and no scheduled or running
 *  graph holds. */
SOMA_API somaError_t somaDeviceGraphMemTrim(int device);
SOMA_API somaError_t somaDeviceGetGraphMemAttribute(int device, somaGraphMemAttributeType attr,
                                                    void* value);
/** Only the two High attributes, only to 0: InvalidValue otherwise. */
SOMA_API somaError_t somaDeviceSetGraphMemAttribute(int device, somaGraphMemAttributeType attr,
                                                    void* value);

#ifdef __cplusplus
}
#endif

#endif /* SOMA_SOMA_H */
