/**
 * @file soma_torch.h
 * @brief soma as PyTorch's CUDA allocator: the C functions of libsoma_torch.so.
 *
 * `torch.cuda.memory.CUDAPluggableAllocator(path, "soma_torch_malloc", "soma_torch_free")`
 * loads this library and calls the first two functions for every CUDA tensor; the hooks PyTorch
 * lets a pluggable allocator set (`set_reset_fn`, `set_record_stream_fn`,
 * `set_memory_fraction_fn`, `set_base_alloc_fn`) take the next four. The rest is for
 * `soma_torch.py` (integrations/torch/) and for C or C++ callers. docs/torch.md tells the story.
 *
 * Streams: PyTorch passes its own CUDA streams. On the cuda backend each (device, stream) is
 * adopted once with somaStreamCreateFromNative and the soma stream is kept for the life of the
 * process, so soma's stream order is PyTorch's. Stream 0 (PyTorch's default stream, the legacy
 * NULL stream) is adopted as CU_STREAM_LEGACY (0x1), the same stream named explicitly;
 * cudaStreamPerThread (0x2) is refused (it names a different stream on every host thread). On
 * the cpu backend, which has no native streams, each distinct (device, stream value) gets a
 * soma stream of its own, so the library can be tested without a GPU.
 *
 * Memory: one explicit pool per device, created at the first allocation on it, with the
 * settings of soma_torch_configure (by default: release threshold UINT64_MAX, the three reuse
 * policies on).
 *
 * Every function is thread-safe and never lets an exception escape. Failures are counted in
 * soma_torch_stats, the first of each kind is printed to stderr with soma's message
 * (SOMA_TORCH_VERBOSE=1 prints every one), and the last one is kept for
 * soma_torch_last_error.
 */
#ifndef SOMA_TORCH_H
#define SOMA_TORCH_H

#include <soma/soma.h>

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define SOMA_TORCH_API __attribute__((visibility("default")))
#else
#define SOMA_TORCH_API
#endif

/* The CUDA runtime's stream handle, declared here so that no CUDA header is needed; identical
 * to the typedef of cuda_runtime_api.h, so including both is fine. */
typedef struct CUstream_st* cudaStream_t;

/** Statistics of one device (soma_torch_get_stats). Byte figures are those of the device's
 *  soma_torch pool (S10): reserved = physical memory the pool holds, used = the sum of the
 *  requested sizes of live allocations; the high watermarks since the last reset. Counters
 *  count calls since the process started. */
typedef struct soma_torch_stats {
  uint64_t reserved_bytes;
  uint64_t reserved_high_bytes;
  uint64_t used_bytes;
  uint64_t used_high_bytes;
  uint64_t allocations;        /**< soma_torch_malloc calls that returned memory */
  uint64_t frees;              /**< soma_torch_free calls that released memory */
  uint64_t failed_allocations; /**< soma_torch_malloc calls that returned NULL for size > 0 */
  uint64_t failed_frees;       /**< unknown pointer, double free, or a free kept back (leaked)
                                    because its ordering after recorded streams failed */
  uint64_t cross_stream_frees; /**< frees made after other streams named by record_stream */
  uint64_t streams;            /**< native streams of this device seen so far */
} soma_torch_stats;

/* ---- the allocator PyTorch calls ------------------------------------------------------------ */

/** Allocates size bytes on device, in the order of stream (PyTorch's current stream; 0 is the
 *  default stream). Size 0 gives NULL. On failure it returns NULL: out of memory is retried
 *  once after a device synchronize (which proves pending frees complete), and with
 *  SOMA_TORCH_ABORT_ON_OOM=1 any failed allocation (out of memory above all) aborts the process
 *  after printing the message. PyTorch's pluggable allocator does not check for NULL, so a
 *  failed allocation shows up later as a fault where the tensor is used: read the message
 *  printed here. */
SOMA_TORCH_API void* soma_torch_malloc(ssize_t size, int device, cudaStream_t stream);

/** Frees ptr in the order of stream (PyTorch passes the allocation's stream): later work on
 *  stream may reuse it at once. When soma_torch_record_stream named other streams for ptr, the
 *  free happens instead on the device's free stream, a stream of soma's own that first waits
 *  (events) for stream's and each named stream's work up to this call: the memory is handed
 *  out again only after all of it, and no PyTorch stream waits. NULL does nothing. An unknown
 *  pointer or a second free is counted and reported, never a crash. size is not used. */
SOMA_TORCH_API void soma_torch_free(void* ptr, ssize_t size, int device, cudaStream_t stream);

/* ---- PyTorch's optional hooks ---------------------------------------------------------------- */

/** record_stream hook (torch.Tensor.record_stream; signature of set_record_stream_fn): the
 *  allocation starting at ptr is also used on stream, so its free must wait for that stream.
 *  A pointer that is not the start of a live soma allocation is ignored (counted nowhere). */
SOMA_TORCH_API void soma_torch_record_stream(void* ptr, cudaStream_t stream);

/** emptyCache hook (torch.cuda.empty_cache; signature of set_reset_fn): synchronizes each
 *  device that has a pool and trims its pool to 0 bytes (somaMemPoolTrimTo), returning every
 *  granule that no live allocation uses. */
SOMA_TORCH_API void soma_torch_empty_cache(void);

/** Memory fraction hook (torch.cuda.set_per_process_memory_fraction; signature of
 *  set_memory_fraction_fn): allocations on device fail once the live bytes would exceed
 *  fraction x the device's memory. fraction >= 1 removes the limit; below 0 is ignored. */
SOMA_TORCH_API void soma_torch_set_memory_fraction(double fraction, int device);

/** Base allocation hook (signature of set_base_alloc_fn): the start of the live allocation
 *  that contains ptr, and its requested size in *size (when size is not NULL). ptr itself,
 *  and *size untouched, when ptr is in no live soma allocation. */
SOMA_TORCH_API void* soma_torch_base_allocation(void* ptr, size_t* size);

/* ---- configuration, statistics, cache control ----------------------------------------------- */

/** Sets the pool settings of every device: release threshold in bytes (S9) and the three reuse
 *  policies (S11; each 0 or 1). Applies to pools already created and to those created later,
 *  so it may be called at any time; call it before the first allocation to have every pool
 *  start with it. Returns somaSuccess, somaErrorInvalidValue (a flag other than 0 or 1) or
 *  the error that starting soma gave. A finite threshold takes effect at soma's
 *  synchronization points (soma_torch_synchronize, soma_torch_empty_cache, a retried
 *  allocation): PyTorch's own synchronizations are CUDA calls soma does not see. */
SOMA_TORCH_API int soma_torch_configure(uint64_t release_threshold_bytes,
                                        int follow_event_dependencies, int allow_opportunistic,
                                        int allow_internal_dependencies);

/** Fills *stats for device. A device without a pool yet reads all zero byte figures.
 *  somaErrorInvalidValue for a NULL stats, somaErrorInvalidDevice for a bad ordinal. */
SOMA_TORCH_API int soma_torch_get_stats(int device, soma_torch_stats* stats);

/** Resets the reserved and used high watermarks of device's pool to their current values
 *  (S10); device -1: every device. */
SOMA_TORCH_API int soma_torch_reset_peak(int device);

/** somaDeviceSynchronize of device (-1: every device with a pool): waits for the work of its
 *  streams (PyTorch's adopted ones included) and lets the pools release memory above their
 *  release threshold (S9, S12). */
SOMA_TORCH_API int soma_torch_synchronize(int device);

/** Number of devices of the soma backend, or -1 if soma could not start (see
 *  soma_torch_last_error). */
SOMA_TORCH_API int soma_torch_device_count(void);

/** 1 when native streams are adopted (cuda backend), 0 when each stream value gets a soma
 *  stream of its own (cpu backend), -1 if soma could not start. */
SOMA_TORCH_API int soma_torch_adopts_native_streams(void);

/** The soma stream that stands for (device, stream), created (adopted) on first use: soma calls
 *  on it are ordered with PyTorch's work on that stream. NULL on failure. */
SOMA_TORCH_API somaStream_t soma_torch_get_stream(int device, cudaStream_t stream);

/** The pool of device (created on first use), NULL on failure. For statistics and attributes;
 *  do not destroy it. */
SOMA_TORCH_API somaMemPool_t soma_torch_get_pool(int device);

/** Copies the last failure message of the library (any thread) into buffer (NUL-terminated,
 *  truncated to size - 1 characters) and returns its full length; 0 when nothing failed. */
SOMA_TORCH_API size_t soma_torch_last_error(char* buffer, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* SOMA_TORCH_H */
