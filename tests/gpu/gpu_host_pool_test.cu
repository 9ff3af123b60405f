// Pools of host memory on a real GPU (S5, S6, S9): the memory is page-locked host memory made
// through the driver's virtual memory calls with a host location. The host writes it at once;
// a kernel reads and writes it once somaMemPoolSetAccess grants the device, and the driver
// itself reports no access for the device before (cuMemGetAccess); a kernel that touches it
// without the grant faults (in a child process: the fault ends its CUDA context). Freed memory
// goes back at the release threshold as a device pool's does.
#include <soma/soma.h>

#include <cuda.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "gpu_test_util.cuh"

extern char** environ;

// Kernels live outside the anonymous namespace (nvcc's stub cannot name one there when the
// file has another anonymous namespace of its own).
namespace soma_host_pool_test {

__global__ void add_one(std::uint32_t* words, std::size_t count) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    words[i] += 1;
}

}  // namespace soma_host_pool_test

namespace {

using namespace soma_gpu_test;
using soma_host_pool_test::add_one;

constexpr std::size_t kWords = 1 << 20;  // 4 MiB
constexpr const char* kChildVariable = "SOMA_GPU_HOST_POOL_CHILD";

somaMemPoolProps host_pool_props(somaMemLocationType type = somaMemLocationTypeHost) {
  somaMemPoolProps props = pool_props(0);
  props.location.type = type;
  props.location.id = 0;
  return props;
}

/// The access the driver reports for device 0 at address (cuMemGetAccess, through the
/// runtime's entry point so the test links no libcuda).
unsigned long long driver_access(const void* address) {
  using get_access_fn = CUresult (*)(unsigned long long*, const CUmemLocation*, CUdeviceptr);
  void* entry = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuMemGetAccess", &entry, 10020, cudaEnableDefault,
                                       &found) != cudaSuccess ||
      entry == nullptr)
    return ~0ULL;
  unsigned long long flags = ~0ULL;
  const CUmemLocation device{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  if (reinterpret_cast<get_access_fn>(entry)(
          &flags, &device, reinterpret_cast<CUdeviceptr>(address)) != CUDA_SUCCESS)
    return ~0ULL;
  return flags;
}

class S5_GpuHostPools : public gpu_test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(gpu_test::SetUp());
    if (IsSkipped()) return;
    int supported = 0;
    SOMA_ASSERT_OK(somaDeviceGetAttribute(&supported, somaDevAttrHostMemoryPoolsSupported, 0));
    if (supported == 0) GTEST_SKIP() << "the driver reports no host memory pools";
  }
};

TEST_F(S5_GpuHostPools, AKernelReadsAndWritesHostPoolMemoryOnceGranted) {
  for (somaMemLocationType type : {somaMemLocationTypeHost, somaMemLocationTypeHostNuma}) {
    SCOPED_TRACE(type == somaMemLocationTypeHost ? "host" : "host NUMA node 0");
    unique_pool pool(host_pool_props(type));
    unique_stream stream;
    void* p = nullptr;
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&p, kWords * 4, pool, stream));
    SOMA_ASSERT_OK(somaStreamSynchronize(stream));
    auto* words = static_cast<std::uint32_t*>(p);
    for (std::size_t i = 0; i < kWords; ++i) words[i] = static_cast<std::uint32_t>(i);  // host
    cudaPointerAttributes cuda_attributes{};
    CUDA_ASSERT_OK(cudaPointerGetAttributes(&cuda_attributes, p));
    EXPECT_EQ(cuda_attributes.type, cudaMemoryTypeHost) << "the driver sees host memory";

    // Before the grant: soma refuses its own operations, and the driver reports no access.
    EXPECT_EQ(somaMemsetAsync(p, 0, 4096, stream), somaErrorNotPermitted) << last_message();
    EXPECT_EQ(driver_access(p), CU_MEM_ACCESS_FLAGS_PROT_NONE);

    const somaMemAccessDesc grant{{somaMemLocationTypeDevice, 0}, somaMemAccessFlagsProtReadWrite};
    SOMA_ASSERT_OK(somaMemPoolSetAccess(pool, &grant, 1));
    EXPECT_EQ(driver_access(p), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    add_one<<<256, 256, 0, native_stream(stream)>>>(words, kWords);
    CUDA_ASSERT_LAUNCHED();
    SOMA_ASSERT_OK(somaStreamSynchronize(stream));
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < kWords; ++i) wrong += words[i] != i + 1 ? 1 : 0;
    EXPECT_EQ(wrong, 0u) << "the kernel's writes are not what the host reads";
    SOMA_ASSERT_OK(somaFreeAsync(p, stream));
    SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  }
}

TEST_F(S5_GpuHostPools, IsReleasedAtTheThresholdAsDevicePoolsAre) {
  // The same steps on a host pool and a device pool leave the same reserved memory behind.
  unique_pool host(host_pool_props());
  unique_pool device(0);
  unique_stream stream;
  std::uint64_t reserved[2][3] = {};
  const std::size_t bytes = 64 << 20;
  int which = 0;
  for (somaMemPool_t pool : {host.get(), device.get()}) {
    void* p = nullptr;
    SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, 16 << 20));
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&p, bytes, pool, stream));
    SOMA_ASSERT_OK(somaFreeAsync(p, stream));
    reserved[which][0] = pool_u64(pool, somaMemPoolAttrReservedMemCurrent);  // before a sync
    SOMA_ASSERT_OK(somaStreamSynchronize(stream));
    reserved[which][1] = pool_u64(pool, somaMemPoolAttrReservedMemCurrent);  // at the threshold
    SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, 0));
    SOMA_ASSERT_OK(somaStreamSynchronize(stream));
    reserved[which][2] = pool_u64(pool, somaMemPoolAttrReservedMemCurrent);
    ++which;
  }
  EXPECT_GE(reserved[0][0], bytes) << "kept until a synchronize";
  for (int step = 0; step < 3; ++step)
    EXPECT_EQ(reserved[0][step], reserved[1][step])
        << "host and device pools differ, step " << step;
  EXPECT_EQ(reserved[0][2], 0u);
}

// The child's half of the next test, run before gtest starts in the process that test spawns
// (the fault ends the child's CUDA context, so it runs no test fixture): exit status 0 when the
// kernel on host-pool memory never granted to the device failed.
int child_kernel_without_grant() {
  somaMemPool_t pool = nullptr;
  const somaMemPoolProps props = host_pool_props();
  somaStream_t stream = nullptr;
  void* p = nullptr;
  if (somaMemPoolCreate(&pool, &props) != somaSuccess || somaStreamCreate(&stream) != somaSuccess ||
      somaMallocFromPoolAsync(&p, kWords * 4, pool, stream) != somaSuccess ||
      somaStreamSynchronize(stream) != somaSuccess) {
    std::fprintf(stderr, "child: set-up failed: %s\n", last_message().c_str());
    return 2;
  }
  add_one<<<256, 256, 0, native_stream(stream)>>>(static_cast<std::uint32_t*>(p), kWords);
  const cudaError_t ran = cudaStreamSynchronize(native_stream(stream));
  std::fprintf(stderr, "child: the kernel ended with %s\n", cudaGetErrorName(ran));
  return ran == cudaSuccess ? 1 : 0;
}

[[maybe_unused]] const int kChildDispatched = [] {
  if (std::getenv(kChildVariable) != nullptr) std::_Exit(child_kernel_without_grant());
  return 0;
}();

TEST_F(S5_GpuHostPools, AKernelWithoutTheGrantFaults) {
  // Left out under compute-sanitizer (scripts/gpu-check.sh): the fault is the point here.
  char* arguments[] = {const_cast<char*>("/proc/self/exe"), nullptr};
  ASSERT_EQ(setenv(kChildVariable, "1", 1), 0);
  pid_t child = 0;
  const int spawned = posix_spawn(&child, "/proc/self/exe", nullptr, nullptr, arguments, environ);
  unsetenv(kChildVariable);
  ASSERT_EQ(spawned, 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's kernel was not refused (1) or its set-up "
                                       "failed (2)";
}

}  // namespace
