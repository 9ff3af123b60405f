// Pool memory on a real GPU, checked against the driver's own figures: release at a
// synchronize with threshold 0 and caching with UINT64_MAX (S9, S12) as cudaMemGetInfo sees
// them, statistics (S10), out of memory with the numbers in the message and a pool that still
// works (S1), pointer attributes that agree with cudaPointerGetAttributes (S14), and device
// figures that agree with the runtime's (S8).
#include <soma/soma.h>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "gpu_test_util.cuh"

namespace {

using namespace soma_gpu_test;

class S9_S12_GpuRelease : public gpu_test {
 protected:
  void SetUp() override {
    gpu_test::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    // Load the test kernels and let the runtime make its own allocations before the first
    // cudaMemGetInfo baseline: a kernel on a small allocation, then a synchronize.
    {
      unique_stream warm_up;
      expect_pool_usable(default_pool(0), warm_up);
    }
    SOMA_ASSERT_OK(somaDeviceSynchronize());
    SOMA_ASSERT_OK(somaMemPoolTrimTo(default_pool(0), 0));
  }
};
class S10_GpuStatistics : public gpu_test {};
class S1_S10_GpuOutOfMemory : public gpu_test {};
class S14_GpuPointerAttributes : public gpu_test {};
class S8_GpuDevice : public gpu_test {};

TEST_F(S9_S12_GpuRelease, ThresholdZeroGivesMemoryBackAtSynchronizeAsCudaMemGetInfoShows) {
  somaMemPool_t pool = default_pool(0);
  SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, 0));
  const std::size_t slack = meminfo_slack_bytes();
  constexpr std::size_t size = 2 * GiB;
  unique_stream stream;
  const memory_info before = driver_memory_info();

  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, size, stream));
  fill(stream, pointer, size / 4, 9);
  CUDA_ASSERT_LAUNCHED();
  SOMA_ASSERT_OK(somaStreamSynchronize(stream)) << "a live allocation is never released";
  const memory_info live = driver_memory_info();
  EXPECT_GE(pool_u64(pool, somaMemPoolAttrReservedMemCurrent), size);
  EXPECT_GE(before.free_bytes, live.free_bytes + size - slack)
      << "the driver does not see " << size << " bytes committed (before " << before.free_bytes
      << " free, with the allocation live " << live.free_bytes << ")";

  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  const memory_info after = driver_memory_info();
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrUsedMemCurrent), 0u);
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrReservedMemCurrent), 0u)
      << "threshold 0: everything whose free the synchronize proved complete goes back (S9)";
  EXPECT_GE(after.free_bytes, live.free_bytes + size - slack)
      << "free device memory did not rise back after the synchronize (live " << live.free_bytes
      << ", after " << after.free_bytes << ")";
  EXPECT_GE(after.free_bytes + slack, before.free_bytes)
      << "free device memory after release " << after.free_bytes << " < before "
      << before.free_bytes;
}

TEST_F(S9_S12_GpuRelease, ThresholdMaxKeepsMemoryReservedAcrossSynchronize) {
  somaMemPool_t pool = default_pool(0);
  SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
  const std::size_t slack = meminfo_slack_bytes();
  constexpr std::size_t size = 1 * GiB;
  unique_stream stream;
  const memory_info before = driver_memory_info();

  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, size, stream));
  fill(stream, pointer, size / 4, 10);
  CUDA_ASSERT_LAUNCHED();
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  SOMA_ASSERT_OK(somaDeviceSynchronize());
  const std::uint64_t reserved = pool_u64(pool, somaMemPoolAttrReservedMemCurrent);
  EXPECT_GE(reserved, size) << "UINT64_MAX: the synchronize must not release (S9)";
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrUsedMemCurrent), 0u);
  const memory_info cached = driver_memory_info();
  EXPECT_GE(before.free_bytes, cached.free_bytes + size - slack)
      << "the driver says the memory went back although the pool still reserves " << reserved;

  // The cached memory serves the next allocation: no growth, same address on the same stream.
  void* again = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&again, size, stream));
  EXPECT_EQ(again, pointer);
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrReservedMemCurrent), reserved);
  SOMA_ASSERT_OK(somaFreeAsync(again, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));

  // Lowering the threshold and synchronizing releases it (as CUDA does); TrimTo(0) in any case.
  SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, 0));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrReservedMemCurrent), 0u)
      << "threshold lowered to 0, then a synchronize: CUDA releases the cached memory here";
  SOMA_ASSERT_OK(somaMemPoolTrimTo(pool, 0));
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrReservedMemCurrent), 0u);
  const memory_info trimmed = driver_memory_info();
  EXPECT_GE(trimmed.free_bytes + slack, before.free_bytes)
      << "after TrimTo(0) the driver still misses " << before.free_bytes - trimmed.free_bytes
      << " bytes";
}

TEST_F(S9_S12_GpuRelease, TrimToKeepsAtMostTheRequestedBytesAndTheDriverSeesTheRest) {
  unique_pool pool(0);
  SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
  unique_stream stream;
  const std::size_t granule = granularity_bytes(0);
  const std::size_t slack = meminfo_slack_bytes();
  std::vector<void*> pointers(8, nullptr);
  for (void*& pointer : pointers)
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 32 * MiB, pool, stream));
  for (void* pointer : pointers) SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  const std::uint64_t cached = pool_u64(pool, somaMemPoolAttrReservedMemCurrent);
  ASSERT_GE(cached, 256 * MiB);
  const memory_info before = driver_memory_info();

  SOMA_ASSERT_OK(somaMemPoolTrimTo(pool, 64 * MiB));
  const std::uint64_t kept = pool_u64(pool, somaMemPoolAttrReservedMemCurrent);
  EXPECT_LE(kept, 64 * MiB) << "TrimTo leaves at most minBytesToKeep (S9)";
  EXPECT_EQ(kept % granule, 0u);
  const memory_info trimmed = driver_memory_info();
  EXPECT_GE(trimmed.free_bytes + slack, before.free_bytes + (cached - kept))
      << "the pool gave back " << cached - kept << " bytes but the driver's free memory rose by "
      << static_cast<long long>(trimmed.free_bytes) - static_cast<long long>(before.free_bytes);

  SOMA_ASSERT_OK(somaMemPoolTrimTo(pool, 0));
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrReservedMemCurrent), 0u);
}

TEST_F(S10_GpuStatistics, ReservedAndUsedFollowAllocationsAndFrees) {
  unique_pool pool(0);
  unique_stream stream;
  const std::size_t granule = granularity_bytes(0);
  ASSERT_GT(granule, 0u);
  EXPECT_EQ(read_pool_stats(pool), pool_stats{}) << "a new pool holds nothing";

  const std::vector<std::size_t> sizes = {1, 100, 4097, 3 * MiB + 5, 64 * MiB};
  std::vector<void*> pointers;
  std::uint64_t sum = 0;
  for (std::size_t size : sizes) {
    void* pointer = nullptr;
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, size, pool, stream));
    pointers.push_back(pointer);
    sum += size;
    const pool_stats stats = read_pool_stats(pool);
    EXPECT_EQ(stats.used_current, sum) << "used = sum of requested sizes (S10)";
    EXPECT_EQ(stats.used_high, sum);
    EXPECT_GE(stats.reserved_current, stats.used_current);
    EXPECT_EQ(stats.reserved_current % granule, 0u) << "reserved is whole granules";
    EXPECT_GE(stats.reserved_high, stats.reserved_current);
  }
  // Kernels use every allocation: the memory the statistics count is real device memory.
  void* counter = new_counter(stream);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 4) continue;
    fill(stream, pointers[i], sizes[i] / 4, static_cast<std::uint32_t>(i));
    check(stream, pointers[i], sizes[i] / 4, static_cast<std::uint32_t>(i), counter);
  }
  CUDA_ASSERT_LAUNCHED();
  EXPECT_EQ(read_and_free_counter(stream, counter), 0u);

  const pool_stats peak = read_pool_stats(pool);
  for (std::size_t i = 0; i < pointers.size(); ++i) {
    SOMA_ASSERT_OK(somaFreeAsync(pointers[i], stream));
    sum -= sizes[i];
    EXPECT_EQ(pool_u64(pool, somaMemPoolAttrUsedMemCurrent), sum)
        << "a freed allocation is no longer live (S2)";
  }
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  pool_stats stats = read_pool_stats(pool);
  EXPECT_EQ(stats.used_current, 0u);
  EXPECT_EQ(stats.used_high, peak.used_high);
  EXPECT_EQ(stats.reserved_current, 0u) << "threshold 0 (default): released at the synchronize";
  EXPECT_EQ(stats.reserved_high, peak.reserved_high);

  SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrUsedMemHigh, 0));
  SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReservedMemHigh, 0));
  EXPECT_EQ(read_pool_stats(pool), pool_stats{}) << "reset sets the watermarks to current";
}

TEST_F(S10_GpuStatistics, PoolMemoryIsDeviceMemoryTheDriverCounts) {
  unique_pool pool(0);
  unique_stream stream;
  const std::size_t slack = meminfo_slack_bytes();
  const memory_info before = driver_memory_info();
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 512 * MiB, pool, stream));
  const std::uint64_t reserved = pool_u64(pool, somaMemPoolAttrReservedMemCurrent);
  const memory_info live = driver_memory_info();
  EXPECT_GE(before.free_bytes + slack, live.free_bytes + reserved)
      << "reserved " << reserved << " but the driver's free memory fell by "
      << before.free_bytes - live.free_bytes;
  EXPECT_LE(before.free_bytes, live.free_bytes + reserved + slack)
      << "the driver's free memory fell by more than the pool reserves: "
      << before.free_bytes - live.free_bytes << " vs " << reserved;
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S1_S10_GpuOutOfMemory, MoreThanTheDeviceHasFailsWithNumbersAndThePoolStaysUsable) {
  somaMemPool_t pool = default_pool(0);
  unique_stream stream;
  const memory_info device = driver_memory_info();
  ASSERT_GT(device.total_bytes, 0u);
  const pool_stats before = read_pool_stats(pool);

  for (const std::size_t request :
       {device.total_bytes + device.total_bytes / 2, 4 * device.total_bytes}) {
    const std::size_t rounded = request / MiB * MiB;
    void* pointer = nullptr;
    ASSERT_EQ(somaMallocAsync(&pointer, rounded, stream), somaErrorMemoryAllocation)
        << "request " << rounded << " bytes, device total " << device.total_bytes;
    EXPECT_EQ(pointer, nullptr);
    const std::string message = last_message();
    EXPECT_TRUE(mentions_bytes_near(message, static_cast<double>(rounded), 0.005))
        << "the message does not state the request of " << rounded << " bytes: " << message;
    EXPECT_TRUE(mentions_bytes_near(message, static_cast<double>(device.total_bytes), 0.02) ||
                mentions_bytes_near(message, static_cast<double>(device.free_bytes), 0.02))
        << "the message does not state the device's memory (" << device.total_bytes << " total, "
        << device.free_bytes << " free): " << message;
    EXPECT_EQ(read_pool_stats(pool), before) << "a failed call changes nothing in the pool";
  }
  expect_pool_usable(pool, stream);
}

TEST_F(S1_S10_GpuOutOfMemory, PoolMaxSizeIsALimitWithNumbersAndThePoolStaysUsable) {
  unique_pool pool(0, 64 * MiB);
  unique_stream stream;
  void* first = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&first, 40 * MiB, pool, stream));
  void* second = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&second, 24 * MiB, pool, stream))
      << "40 + 24 MiB fit in a 64 MiB pool (as in CUDA)";
  const pool_stats full = read_pool_stats(pool);
  void* refused = nullptr;
  ASSERT_EQ(somaMallocFromPoolAsync(&refused, 40 * MiB, pool, stream), somaErrorMemoryAllocation);
  const std::string message = last_message();
  EXPECT_TRUE(mentions_bytes_near(message, 40.0 * MiB, 0.001)) << message;
  EXPECT_TRUE(mentions_bytes_near(message, 64.0 * MiB, 0.001)) << message;
  EXPECT_EQ(read_pool_stats(pool), full);
  SOMA_ASSERT_OK(somaFreeAsync(second, stream));
  SOMA_ASSERT_OK(somaFreeAsync(first, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  expect_pool_usable(pool, stream);
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&refused, 40 * MiB, pool, stream))
      << "after the frees the pool has room again";
  SOMA_ASSERT_OK(somaFreeAsync(refused, stream));
}

TEST_F(S14_GpuPointerAttributes, LiveAllocationNamesDevice0AndAgreesWithTheDriver) {
  unique_stream stream;
  constexpr std::size_t size = 1 * MiB + 100;
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, size, stream));
  auto* inside = static_cast<unsigned char*>(pointer) + 4096 + 3;

  for (const void* query : {static_cast<const void*>(pointer), static_cast<const void*>(inside)}) {
    somaPointerAttributes attributes{};
    SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, query));
    EXPECT_EQ(attributes.type, somaMemoryTypeDevice);
    EXPECT_EQ(attributes.device, 0);
    EXPECT_EQ(attributes.pool, default_pool(0));
    EXPECT_EQ(attributes.base, pointer);
    EXPECT_EQ(attributes.size, size);
    EXPECT_EQ(attributes.isLiveAllocation, 1);
    EXPECT_EQ(attributes.hostPointer, nullptr) << "cuda backend: device memory has no host view";

    cudaPointerAttributes driver{};
    CUDA_ASSERT_OK(cudaPointerGetAttributes(&driver, query));
    EXPECT_EQ(driver.type, cudaMemoryTypeDevice) << "the driver sees device memory";
    EXPECT_EQ(driver.device, 0);
    EXPECT_EQ(driver.devicePointer, query);
  }
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  somaPointerAttributes freed{};
  SOMA_ASSERT_OK(somaPointerGetAttributes(&freed, pointer));
  EXPECT_EQ(freed.isLiveAllocation, 0) << "soma knows the allocation was freed (S14)";
  EXPECT_EQ(freed.device, -1);
  EXPECT_EQ(freed.type, somaMemoryTypeUnregistered);
}

TEST_F(S14_GpuPointerAttributes, HostMemoryIsNotAPoolAllocation) {
  std::vector<int> host(16);
  somaPointerAttributes attributes{};
  SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, host.data()));
  EXPECT_EQ(attributes.isLiveAllocation, 0);
  EXPECT_EQ(attributes.type, somaMemoryTypeUnregistered);
  EXPECT_EQ(attributes.device, -1);
}

TEST_F(S8_GpuDevice, DeviceFiguresAgreeWithTheRuntime) {
  int soma_count = 0;
  int cuda_count = 0;
  SOMA_ASSERT_OK(somaGetDeviceCount(&soma_count));
  CUDA_ASSERT_OK(cudaGetDeviceCount(&cuda_count));
  EXPECT_EQ(soma_count, cuda_count);
  int supported = 0;
  SOMA_ASSERT_OK(somaDeviceGetAttribute(&supported, somaDevAttrMemoryPoolsSupported, 0));
  EXPECT_EQ(supported, 1);
  // Total memory: the driver has two figures (cudaMemGetInfo, totalGlobalMem); soma's must be
  // one of them.
  cudaDeviceProp properties{};
  CUDA_ASSERT_OK(cudaGetDeviceProperties(&properties, 0));
  const std::size_t meminfo_total = driver_memory_info().total_bytes;
  int total_mib = 0;
  SOMA_ASSERT_OK(somaDeviceGetAttribute(&total_mib, somaDevAttrTotalMemoryMiB, 0));
  EXPECT_TRUE(static_cast<std::size_t>(total_mib) == meminfo_total / MiB ||
              static_cast<std::size_t>(total_mib) == properties.totalGlobalMem / MiB)
      << "soma " << total_mib << " MiB, cudaMemGetInfo " << meminfo_total / MiB
      << " MiB, totalGlobalMem " << properties.totalGlobalMem / MiB << " MiB";
  const std::size_t granule = granularity_bytes(0);
  EXPECT_GE(granule, 64 * KiB);
  EXPECT_EQ(granule & (granule - 1), 0u) << "granularity " << granule << " is a power of two";
  std::size_t soma_free = 0;
  std::size_t soma_total = 0;
  SOMA_ASSERT_OK(somaMemGetInfo(&soma_free, &soma_total));
  EXPECT_TRUE(soma_total == meminfo_total || soma_total == properties.totalGlobalMem)
      << "somaMemGetInfo total " << soma_total << ", cudaMemGetInfo " << meminfo_total
      << ", totalGlobalMem " << properties.totalGlobalMem;
  EXPECT_LE(soma_free, soma_total);
}

}  // namespace
