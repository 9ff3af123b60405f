// Shared helpers of the GPU-side tests (tests/gpu/*.cu, compiled with nvcc): the gpu_test
// fixture that skips where the cuda backend is not active, status assertions for soma and the
// CUDA runtime, small kernels that write, check and wait, and RAII handles. Devices, pools and
// the handles come from tests/support (devices_and_pools.hpp), shared with the cpu test suites;
// what stays here needs the CUDA runtime or is the GPU's own check.
//
// These tests drive soma's cuda backend with real kernels launched on the native stream behind
// a soma stream (somaStreamGetNative), and compare what soma says with what the driver says
// (cudaMemGetInfo, cudaPointerGetAttributes).
//
// Environment:
//   SOMA_BACKEND                 set to cuda by CTest (and defaulted to cuda here, so running a
//                                binary by hand tests the cuda backend too)
//   SOMA_GPU_TESTS_REQUIRE_CUDA  1: a test FAILS instead of skipping when the cuda backend is
//                                not active (scripts/gpu-check.sh sets it on the GPU machine)
//   SOMA_GPU_TESTS_MEMINFO_SLACK_MIB  tolerance of cudaMemGetInfo comparisons (default 64),
//                                raised under compute-sanitizer, which allocates device memory
//                                of its own
//
// Requires: the including binary links `soma`, GoogleTest and the CUDA runtime.
#pragma once

#include <soma/soma.h>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

#include "devices_and_pools.hpp"
#include "pool_attributes.hpp"
#include "soma_status.hpp"

// ---- status assertions (SOMA_ASSERT_OK, SOMA_EXPECT_OK: soma_status.hpp) --------------------

namespace soma_gpu_test {

using soma_test::KiB;
using soma_test::last_message;
using soma_test::MiB;
inline constexpr std::size_t GiB = std::size_t{1} << 30;

inline ::testing::AssertionResult is_cuda_success(const char* expression, cudaError_t status) {
  if (status == cudaSuccess) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << expression << " returned " << cudaGetErrorName(status)
                                       << ": " << cudaGetErrorString(status);
}

}  // namespace soma_gpu_test

#define CUDA_ASSERT_OK(expr) ASSERT_PRED_FORMAT1(::soma_gpu_test::is_cuda_success, expr)
#define CUDA_EXPECT_OK(expr) EXPECT_PRED_FORMAT1(::soma_gpu_test::is_cuda_success, expr)
/// After a kernel launch: the launch itself was accepted.
#define CUDA_ASSERT_LAUNCHED() CUDA_ASSERT_OK(cudaGetLastError())

namespace soma_gpu_test {

namespace detail {
/// SOMA_BACKEND defaults to cuda in these binaries (CTest sets it too). Runs during static
/// initialization, before anything starts soma's runtime; listing tests starts nothing.
inline const bool backend_defaulted = [] {
  ::setenv("SOMA_BACKEND", "cuda", /*overwrite=*/0);
  return true;
}();
}  // namespace detail

inline bool env_flag(const char* name) {
  const char* text = std::getenv(name);
  return text != nullptr && *text != '\0' && std::string_view(text) != "0";
}

/// Tolerance of comparisons with cudaMemGetInfo: other allocations of the process (module
/// loading, the CUDA runtime, compute-sanitizer) move the driver's figure a little.
inline std::size_t meminfo_slack_bytes() {
  const char* text = std::getenv("SOMA_GPU_TESTS_MEMINFO_SLACK_MIB");
  if (text != nullptr && *text != '\0') return std::strtoull(text, nullptr, 10) * MiB;
  return 64 * MiB;
}

// ---- kernels -------------------------------------------------------------------------------

namespace {

__device__ inline std::uint64_t global_timer_ns() {
  std::uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
}

/// Every thread waits spin_ns first: a slow kernel keeps its stream busy, so a missing
/// dependency shows up as a wrong value instead of passing by luck.
__device__ inline void spin_for(std::uint64_t spin_ns) {
  if (spin_ns == 0) return;
  const std::uint64_t start = global_timer_ns();
  while (global_timer_ns() - start < spin_ns) {
  }
}

__host__ __device__ inline std::uint32_t pattern_value(std::size_t index, std::uint32_t seed) {
  return seed ^ static_cast<std::uint32_t>(index * 2654435761u) ^
         static_cast<std::uint32_t>(index >> 32);
}

__global__ void fill_pattern_kernel(std::uint32_t* words, std::size_t count, std::uint32_t seed,
                                    std::uint64_t spin_ns) {
  spin_for(spin_ns);
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride) {
    words[i] = pattern_value(i, seed);
  }
}

__global__ void check_pattern_kernel(const std::uint32_t* words, std::size_t count,
                                     std::uint32_t seed, std::uint64_t spin_ns,
                                     unsigned long long* mismatches) {
  spin_for(spin_ns);
  unsigned long long local = 0;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride) {
    if (words[i] != pattern_value(i, seed)) ++local;
  }
  if (local != 0) atomicAdd(mismatches, local);
}

__global__ void check_bytes_kernel(const unsigned char* bytes, std::size_t count,
                                   unsigned char expected, unsigned long long* mismatches) {
  unsigned long long local = 0;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride) {
    if (bytes[i] != expected) ++local;
  }
  if (local != 0) atomicAdd(mismatches, local);
}

/// One thread: waits spin_ns, then stores value to (mapped, pinned) host memory.
__global__ void spin_then_store_kernel(volatile int* flag, int value, std::uint64_t spin_ns) {
  spin_for(spin_ns);
  *flag = value;
  __threadfence_system();
}

/// Blocks of 256 threads for `count` elements. A slow kernel (spin_ns > 0) gets few blocks, so
/// that it leaves most of the GPU free: work on another stream that lacks a dependency on it
/// then really runs at the same time (and shows the bug) instead of queueing behind it.
inline dim3 grid_for(std::size_t count, std::uint64_t spin_ns = 0) {
  const std::size_t limit = spin_ns > 0 ? 16 : 1024;
  const std::size_t blocks = (count + 255) / 256;
  return dim3(static_cast<unsigned>(blocks < limit ? (blocks == 0 ? 1 : blocks) : limit));
}

}  // namespace

/// cudaStream_t behind a soma stream (somaStreamGetNative); nullptr if soma has none.
inline cudaStream_t native_stream(somaStream_t stream) {
  void* native = nullptr;
  const somaError_t status = somaStreamGetNative(stream, &native);
  EXPECT_EQ(status, somaSuccess) << "somaStreamGetNative: " << last_message();
  EXPECT_NE(native, nullptr) << "the cuda backend must expose a native stream";
  return static_cast<cudaStream_t>(native);
}

// ---- pools and devices (devices_and_pools.hpp, pool_attributes.hpp) --------------------------
// The tests name device 0, the device the fixture sets for soma and the CUDA runtime.

using soma_test::default_pool;
using soma_test::granularity_bytes;
using soma_test::memory_info;
using soma_test::pool_int;
using soma_test::pool_props;
using soma_test::pool_stats;
using soma_test::pool_u64;
using soma_test::read_pool_stats;
using soma_test::set_pool_int;
using soma_test::set_pool_u64;

/// The driver's view of device 0, current for the CUDA runtime (cudaMemGetInfo);
/// soma_test::device_memory_info is soma's (somaMemGetInfo).
inline memory_info driver_memory_info() {
  memory_info info;
  const cudaError_t status = cudaMemGetInfo(&info.free_bytes, &info.total_bytes);
  EXPECT_EQ(status, cudaSuccess) << "cudaMemGetInfo: " << cudaGetErrorString(status);
  return info;
}

// ---- messages -----------------------------------------------------------------------------

/// True if `message` states a quantity of bytes within `relative_tolerance` of `bytes`: a
/// number ("161061273600", "150.0", "1,024") followed by an optional unit (B, bytes, KiB, MiB,
/// GiB, TiB, KB, MB, GB, TB). soma's messages may print sizes in any of these forms. Unlike
/// soma_test::mentions_size (exact, whole units), it takes figures the driver rounds, such as a
/// device's total or free memory.
inline bool mentions_bytes_near(std::string_view message, double bytes, double relative_tolerance) {
  auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  std::size_t at = 0;
  while (at < message.size()) {
    if (!is_digit(message[at]) || (at > 0 && (is_digit(message[at - 1]) || message[at - 1] == '.' ||
                                              message[at - 1] == 'x'))) {
      ++at;
      continue;
    }
    std::string digits;
    std::size_t end = at;
    while (end < message.size() &&
           (is_digit(message[end]) || message[end] == '.' ||
            (message[end] == ',' && end + 1 < message.size() && is_digit(message[end + 1])))) {
      if (message[end] != ',') digits.push_back(message[end]);
      ++end;
    }
    std::size_t unit_at = end;
    while (unit_at < message.size() && message[unit_at] == ' ') ++unit_at;
    double scale = 1;
    const std::string_view rest = message.substr(unit_at);
    const struct {
      std::string_view name;
      double scale;
    } units[] = {{"KiB", 1024.0},
                 {"MiB", 1024.0 * 1024},
                 {"GiB", 1024.0 * 1024 * 1024},
                 {"TiB", 1024.0 * 1024 * 1024 * 1024},
                 {"KB", 1e3},
                 {"kB", 1e3},
                 {"MB", 1e6},
                 {"GB", 1e9},
                 {"TB", 1e12}};
    for (const auto& unit : units) {
      if (rest.substr(0, unit.name.size()) == unit.name) {
        scale = unit.scale;
        break;
      }
    }
    const double value = std::strtod(digits.c_str(), nullptr) * scale;
    if (value >= bytes * (1 - relative_tolerance) && value <= bytes * (1 + relative_tolerance))
      return true;
    at = end;
  }
  return false;
}

// ---- RAII handles (devices_and_pools.hpp) ---------------------------------------------------

using soma_test::unique_pool;

/// soma_test::unique_stream that waits for the stream before destroying it (kernels launched
/// on it may still run) and gives the CUDA stream behind it.
class unique_stream : public soma_test::unique_stream {
 public:
  unique_stream() = default;
  ~unique_stream() {
    if (get() != nullptr) (void)somaStreamSynchronize(get());
  }
  unique_stream(const unique_stream&) = delete;
  unique_stream& operator=(const unique_stream&) = delete;
  cudaStream_t native() const { return native_stream(get()); }
};

/// An event without timing data (somaEventDisableTiming): what ordering between streams needs.
class unique_event : public soma_test::unique_handle<somaEvent_t, somaEventDestroy> {
 public:
  unique_event() {
    soma_test::expect_created(somaEventCreateWithFlags(out(), somaEventDisableTiming),
                              "somaEventCreateWithFlags");
  }
};

/// Page-locked host memory mapped into the device (a flag a kernel sets and a host function
/// reads).
template <typename T>
class pinned_host {
 public:
  explicit pinned_host(std::size_t count = 1) {
    const cudaError_t status =
        cudaHostAlloc(reinterpret_cast<void**>(&data_), count * sizeof(T), cudaHostAllocMapped);
    EXPECT_EQ(status, cudaSuccess) << "cudaHostAlloc: " << cudaGetErrorString(status);
    if (data_ != nullptr) std::memset(static_cast<void*>(data_), 0, count * sizeof(T));
  }
  ~pinned_host() {
    if (data_ != nullptr) (void)cudaFreeHost(data_);
  }
  pinned_host(const pinned_host&) = delete;
  pinned_host& operator=(const pinned_host&) = delete;
  T* get() const { return data_; }
  T& operator[](std::size_t i) const { return data_[i]; }

 private:
  T* data_ = nullptr;
};

// ---- work on streams ----------------------------------------------------------------------

/// Fills `count` 32-bit words at `words` on `stream` (after spin_ns).
inline void fill(somaStream_t stream, void* words, std::size_t count, std::uint32_t seed,
                 std::uint64_t spin_ns = 0) {
  fill_pattern_kernel<<<grid_for(count, spin_ns), 256, 0, native_stream(stream)>>>(
      static_cast<std::uint32_t*>(words), count, seed, spin_ns);
}

/// Counts words that differ from the pattern into *mismatches (device memory), on `stream`.
inline void check(somaStream_t stream, const void* words, std::size_t count, std::uint32_t seed,
                  void* mismatches, std::uint64_t spin_ns = 0) {
  check_pattern_kernel<<<grid_for(count, spin_ns), 256, 0, native_stream(stream)>>>(
      static_cast<const std::uint32_t*>(words), count, seed, spin_ns,
      static_cast<unsigned long long*>(mismatches));
}

/// Allocates a zeroed mismatch counter on `stream` from the default pool.
inline void* new_counter(somaStream_t stream) {
  void* counter = nullptr;
  EXPECT_EQ(somaMallocAsync(&counter, sizeof(unsigned long long), stream), somaSuccess)
      << last_message();
  EXPECT_EQ(somaMemsetAsync(counter, 0, sizeof(unsigned long long), stream), somaSuccess)
      << last_message();
  return counter;
}

/// Copies the counter to the host with somaMemcpyAsync, frees it (both on `stream`),
/// synchronizes `stream` and returns the count.
inline unsigned long long read_and_free_counter(somaStream_t stream, void* counter) {
  unsigned long long value = ~0ull;
  EXPECT_EQ(somaMemcpyAsync(&value, counter, sizeof value, somaMemcpyDeviceToHost, stream),
            somaSuccess)
      << last_message();
  EXPECT_EQ(somaFreeAsync(counter, stream), somaSuccess) << last_message();
  EXPECT_EQ(somaStreamSynchronize(stream), somaSuccess) << last_message();
  return value;
}

/// The pool still works after a refused request: 1 MiB from `pool` on `stream`, written and
/// checked by kernels, freed; used comes back to what it was. (soma_test::expect_pool_usable
/// checks with memset and memcpy, which every backend has; here the device's own code does.)
inline void expect_pool_usable(somaMemPool_t pool, somaStream_t stream) {
  constexpr std::size_t words = MiB / 4;
  const std::uint64_t used_before = pool_u64(pool, somaMemPoolAttrUsedMemCurrent);
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, words * 4, pool, stream));
  ASSERT_NE(pointer, nullptr);
  void* counter = new_counter(stream);
  fill(stream, pointer, words, 0x600d);
  check(stream, pointer, words, 0x600d, counter);
  CUDA_ASSERT_LAUNCHED();
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  EXPECT_EQ(read_and_free_counter(stream, counter), 0u) << "the pool's memory is not usable";
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrUsedMemCurrent), used_before);
}

// ---- the fixture ----------------------------------------------------------------------------

/// Every GPU test starts here: it runs only when soma's active backend is cuda (otherwise it
/// is SKIPPED with the reason, or FAILS when SOMA_GPU_TESTS_REQUIRE_CUDA=1), on device 0 for
/// both soma and the CUDA runtime. TearDown puts back the default pool's release threshold and
/// reuse policies and synchronizes, so the next test in the same process starts clean.
class gpu_test : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* name = nullptr;
    const somaError_t status = somaGetBackendName(&name);
    std::string reason;
    if (status != somaSuccess) {
      reason = std::string("no CUDA device: soma's cuda backend did not start (") +
               somaGetErrorName(status) + ": " + last_message() + ")";
    } else if (name == nullptr || std::string_view(name) != "cuda") {
      reason = std::string("no CUDA device: backend is ") + (name != nullptr ? name : "(null)");
    } else {
      int devices = 0;
      const cudaError_t cuda_status = cudaGetDeviceCount(&devices);
      if (cuda_status != cudaSuccess || devices == 0)
        reason = std::string("soma's backend is cuda but the CUDA runtime sees no device: ") +
                 cudaGetErrorString(cuda_status);
    }
    if (!reason.empty()) {
      if (env_flag("SOMA_GPU_TESTS_REQUIRE_CUDA"))
        FAIL() << reason << " (SOMA_GPU_TESTS_REQUIRE_CUDA is set: a GPU was expected)";
      GTEST_SKIP() << reason;
    }
    cuda_active_ = true;
    SOMA_ASSERT_OK(somaSetDevice(0));
    CUDA_ASSERT_OK(cudaSetDevice(0));
  }

  void TearDown() override {
    if (!cuda_active_) return;
    somaMemPool_t pool = nullptr;
    if (somaDeviceGetDefaultMemPool(&pool, 0) == somaSuccess) {
      (void)somaDeviceSetMemPool(0, pool);
      (void)set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, 0);
      (void)set_pool_int(pool, somaMemPoolReuseFollowEventDependencies, 1);
      (void)set_pool_int(pool, somaMemPoolReuseAllowOpportunistic, 1);
      (void)set_pool_int(pool, somaMemPoolReuseAllowInternalDependencies, 1);
    }
    SOMA_EXPECT_OK(somaDeviceSynchronize());
    CUDA_EXPECT_OK(cudaDeviceSynchronize());
    CUDA_EXPECT_OK(cudaGetLastError()) << "a kernel of this test failed";
  }

 private:
  bool cuda_active_ = false;
};

}  // namespace soma_gpu_test
