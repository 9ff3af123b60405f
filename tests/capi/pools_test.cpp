// Pools: the default and current pool of a device (S4), explicit pools and their deferred
// destruction (S5), what a pool owns (S3). Invalid props and handles: bad_input_test.cpp.
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include <cstdint>
#include <string>

#include "soma_test_util.hpp"

namespace {

using namespace soma_test;

class S3_Pools : public capi_test {};
class S4_DefaultPool : public capi_test {};
class S4_CurrentPool : public capi_test {};
class S5_ExplicitPools : public capi_test {};

somaMemPool_t pool_of(const void* pointer) {
  somaPointerAttributes attributes{};
  EXPECT_EQ(somaPointerGetAttributes(&attributes, pointer), somaSuccess) << last_message();
  return attributes.pool;
}

TEST_F(S4_DefaultPool, EveryDeviceHasItsOwnDefaultPool) {
  const int count = device_count();
  ASSERT_GE(count, 1);
  for (int device = 0; device < count; ++device) {
    const somaMemPool_t pool = default_pool(device);
    ASSERT_NE(pool, nullptr) << "device " << device;
    EXPECT_EQ(default_pool(device), pool) << "stable handle";
    for (int other = 0; other < device; ++other) EXPECT_NE(default_pool(other), pool);
  }
}

TEST_F(S4_DefaultPool, IsCurrentAtStartAndServesMallocAsync) {
  unique_stream stream;
  EXPECT_EQ(current_pool(0), default_pool(0));
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, 4096, stream));
  EXPECT_EQ(pool_of(pointer), default_pool(0));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S4_DefaultPool, DefaultAttributes) {
  const somaMemPool_t pool = default_pool(0);
  EXPECT_EQ(pool_int(pool, somaMemPoolReuseFollowEventDependencies), 1);
  EXPECT_EQ(pool_int(pool, somaMemPoolReuseAllowOpportunistic), 1);
  EXPECT_EQ(pool_int(pool, somaMemPoolReuseAllowInternalDependencies), 1);
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrReleaseThreshold), 0u) << "S9: default 0";
}

TEST_F(S4_CurrentPool, SetMemPoolRedirectsMallocAsync) {
  unique_stream stream;
  unique_pool pool(0);
  SOMA_ASSERT_OK(somaDeviceSetMemPool(0, pool));
  EXPECT_EQ(current_pool(0), pool.get());
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, 10000, stream));
  EXPECT_EQ(pool_of(pointer), pool.get());
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrUsedMemCurrent), 10000u);
  EXPECT_EQ(pool_u64(default_pool(0), somaMemPoolAttrUsedMemCurrent), 0u);

  SOMA_ASSERT_OK(somaDeviceSetMemPool(0, default_pool(0)));
  void* from_default = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&from_default, 10000, stream));
  EXPECT_EQ(pool_of(from_default), default_pool(0));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaFreeAsync(from_default, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S4_CurrentPool, IsPerDevice) {
  if (!have_devices(2)) GTEST_SKIP() << "needs 2 devices";
  unique_pool pool(0);
  SOMA_ASSERT_OK(somaDeviceSetMemPool(0, pool));
  EXPECT_EQ(current_pool(1), default_pool(1)) << "device 1's current pool did not change";
  SOMA_ASSERT_OK(somaSetDevice(1));
  unique_stream on_device_1;
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, 4096, on_device_1));
  EXPECT_EQ(pool_of(pointer), default_pool(1));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, on_device_1));
  SOMA_ASSERT_OK(somaStreamSynchronize(on_device_1));
}

TEST_F(S4_CurrentPool, PoolOfAnotherDeviceIsRejected) {
  if (!have_devices(2)) GTEST_SKIP() << "needs 2 devices";
  unique_pool on_device_1(1);
  EXPECT_EQ(somaDeviceSetMemPool(0, on_device_1), somaErrorInvalidValue);
  EXPECT_FALSE(last_message().empty());
  EXPECT_EQ(somaDeviceSetMemPool(0, default_pool(1)), somaErrorInvalidValue);
  EXPECT_EQ(current_pool(0), default_pool(0)) << "a refused call changes nothing";
}

TEST_F(S4_CurrentPool, DestroyingTheCurrentPoolRevertsToTheDefault) {
  unique_stream stream;
  somaMemPool_t pool = nullptr;
  const somaMemPoolProps props = pool_props(0);
  SOMA_ASSERT_OK(somaMemPoolCreate(&pool, &props));
  SOMA_ASSERT_OK(somaDeviceSetMemPool(0, pool));
  SOMA_ASSERT_OK(somaMemPoolDestroy(pool));
  EXPECT_EQ(current_pool(0), default_pool(0));
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, 4096, stream));
  EXPECT_EQ(pool_of(pointer), default_pool(0));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S4_CurrentPool, DestroyingTheCurrentPoolWithLiveMemoryRevertsToTheDefault) {
  unique_stream stream;
  somaMemPool_t pool = nullptr;
  const somaMemPoolProps props = pool_props(0);
  SOMA_ASSERT_OK(somaMemPoolCreate(&pool, &props));
  SOMA_ASSERT_OK(somaDeviceSetMemPool(0, pool));
  void* live = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&live, 4096, stream));
  SOMA_ASSERT_OK(somaMemPoolDestroy(pool));
  EXPECT_EQ(current_pool(0), default_pool(0));
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, 4096, stream));
  EXPECT_EQ(pool_of(pointer), default_pool(0));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaFreeAsync(live, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S5_ExplicitPools, CreateAllocateDestroy) {
  unique_stream stream;
  somaMemPool_t pool = nullptr;
  const somaMemPoolProps props = pool_props(0);
  SOMA_ASSERT_OK(somaMemPoolCreate(&pool, &props));
  ASSERT_NE(pool, nullptr);
  EXPECT_NE(pool, default_pool(0));
  EXPECT_EQ(read_pool_stats(pool), pool_stats{}) << "a new pool holds nothing";
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 5000, pool, stream));
  EXPECT_EQ(pool_of(pointer), pool);
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrUsedMemCurrent), 5000u);
  EXPECT_EQ(current_pool(0), default_pool(0)) << "creating a pool does not make it current";
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  SOMA_ASSERT_OK(somaMemPoolDestroy(pool));
}

TEST_F(S5_ExplicitPools, ExportablePoolCanBeCreated) {
  unique_stream stream;
  somaMemPool_t pool = nullptr;
  const somaMemPoolProps props = pool_props(0, 0, somaMemHandleTypePosixFileDescriptor);
  SOMA_ASSERT_OK(somaMemPoolCreate(&pool, &props));
  expect_pool_usable(pool, stream);
  SOMA_ASSERT_OK(somaMemPoolDestroy(pool));
}

TEST_F(S5_ExplicitPools, DestroyWithLiveAllocationReturnsAtOnceAndFreesLater) {
  unique_stream stream;
  SOMA_ASSERT_OK(somaDeviceSynchronize());
  const std::size_t start = committed_bytes(0);

  somaMemPool_t pool = nullptr;
  const somaMemPoolProps props = pool_props(0);
  SOMA_ASSERT_OK(somaMemPoolCreate(&pool, &props));
  constexpr std::size_t size = 8 * MiB;
  void* first = nullptr;
  void* second = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&first, size, pool, stream));
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&second, size, pool, stream));
  SOMA_ASSERT_OK(somaMemsetAsync(first, 0x21, size, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_GE(committed_bytes(0), start + 2 * size);

  SOMA_ASSERT_OK(somaMemPoolDestroy(pool));
  // The handle is dead for new work...
  void* refused = nullptr;
  EXPECT_EQ(somaMallocFromPoolAsync(&refused, 4096, pool, stream), somaErrorInvalidResourceHandle);
  EXPECT_EQ(somaDeviceSetMemPool(0, pool), somaErrorInvalidResourceHandle);
  // ...but the live allocations stay usable and can be freed.
  const host_buffer bytes = read_back(first, size, stream);
  EXPECT_EQ(bytes.count_not(0x21), 0u);
  somaPointerAttributes attributes{};
  SOMA_ASSERT_OK(somaPointerGetAttributes(&attributes, first));
  EXPECT_EQ(attributes.isLiveAllocation, 1);
  EXPECT_EQ(attributes.size, size);

  SOMA_ASSERT_OK(somaFreeAsync(first, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_GT(committed_bytes(0), start) << "memory of a live allocation went back before its free";
  SOMA_ASSERT_OK(somaFreeAsync(second, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(committed_bytes(0), start) << "the destroyed pool kept memory";
  if (exact_test_config()) {  // nothing else holds device memory on the cpu backend
    const memory_info end = device_memory_info(0);
    EXPECT_EQ(end.free_bytes, end.total_bytes);
  }
}

TEST_F(S5_ExplicitPools, DestroyWithPendingFreeReleasesWhenItCompletes) {
  unique_stream stream;
  SOMA_ASSERT_OK(somaDeviceSynchronize());
  const std::size_t start = committed_bytes(0);
  somaMemPool_t pool = nullptr;
  const somaMemPoolProps props = pool_props(0);
  SOMA_ASSERT_OK(somaMemPoolCreate(&pool, &props));
  SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 4 * MiB, pool, stream));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaMemPoolDestroy(pool));  // free not yet known complete
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(committed_bytes(0), start)
      << "a destroyed pool must return its cached memory, whatever its threshold";
}

TEST_F(S5_ExplicitPools, DestroyingTheDefaultPoolIsInvalidValue) {
  unique_stream stream;
  const somaMemPool_t pool = default_pool(0);
  EXPECT_EQ(somaMemPoolDestroy(pool), somaErrorInvalidValue);
  EXPECT_FALSE(last_message().empty());
  expect_pool_usable(pool, stream);
  EXPECT_EQ(current_pool(0), pool);
}

TEST_F(S5_ExplicitPools, PoolsAreIndependentAllocationDomains) {
  unique_stream stream;
  unique_pool tenant_a(0);
  unique_pool tenant_b(0);
  void* a = nullptr;
  void* b = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&a, 1 * MiB, tenant_a, stream));
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&b, 3 * MiB, tenant_b, stream));
  EXPECT_EQ(pool_u64(tenant_a, somaMemPoolAttrUsedMemCurrent), 1 * MiB);
  EXPECT_EQ(pool_u64(tenant_b, somaMemPoolAttrUsedMemCurrent), 3 * MiB);
  EXPECT_EQ(pool_of(a), tenant_a.get());
  EXPECT_EQ(pool_of(b), tenant_b.get());
  SOMA_ASSERT_OK(somaFreeAsync(a, stream));
  SOMA_ASSERT_OK(somaFreeAsync(b, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S5_ExplicitPools, MaxSizeCapsThePool) {
  unique_stream stream;
  constexpr std::size_t cap = 12 * MiB;
  unique_pool pool(0, cap);
  void* first = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&first, 8 * MiB, pool, stream));
  void* second = nullptr;
  EXPECT_EQ(somaMallocFromPoolAsync(&second, 5 * MiB, pool, stream), somaErrorMemoryAllocation);
  const std::string message = last_message();
  EXPECT_TRUE(contains_icase(message, "out of memory")) << message;
  EXPECT_TRUE(mentions_size(message, 5 * MiB)) << "request missing: " << message;
  EXPECT_TRUE(mentions_size(message, cap)) << "limit missing: " << message;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&second, 4 * MiB, pool, stream)) << "up to the cap";
  SOMA_ASSERT_OK(somaFreeAsync(first, stream));
  SOMA_ASSERT_OK(somaFreeAsync(second, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S5_ExplicitPools, MaxSizeIsRoundedUpToTheGranularity) {
  unique_stream stream;
  const std::size_t granule = granularity_bytes(0);
  ASSERT_GT(granule, 1024u);
  unique_pool pool(0, 1);  // one byte: becomes one granule
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 1024, pool, stream));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(somaMallocFromPoolAsync(&pointer, granule + 1, pool, stream),
            somaErrorMemoryAllocation);
}

TEST_F(S5_ExplicitPools, NameAppearsInMessages) {
  unique_stream stream;
  const std::size_t granule = granularity_bytes(0);
  unique_pool pool(0, granule);
  SOMA_ASSERT_OK(somaMemPoolSetName(pool, "tenant-a"));
  void* pointer = nullptr;
  ASSERT_EQ(somaMallocFromPoolAsync(&pointer, 2 * granule, pool, stream),
            somaErrorMemoryAllocation);
  EXPECT_TRUE(contains(last_message(), "tenant-a")) << last_message();
}

TEST_F(S3_Pools, PoolsOnDifferentDevicesCommitOnTheirOwnDevice) {
  if (!have_devices(2)) GTEST_SKIP() << "needs 2 devices";
  unique_stream stream;
  SOMA_ASSERT_OK(synchronize_device(0));
  SOMA_ASSERT_OK(synchronize_device(1));
  const std::size_t device_0 = committed_bytes(0);
  const std::size_t device_1 = committed_bytes(1);
  unique_pool pool(1);
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 4 * MiB, pool, stream));
  EXPECT_EQ(committed_bytes(0), device_0);
  EXPECT_GE(committed_bytes(1), device_1 + 4 * MiB);
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(committed_bytes(1), device_1);
}

}  // namespace

namespace {

using namespace soma_test;

// Regression: a synchronize releases memory of every pool outside the registry lock; a pool
// destroyed and reaped by another thread meanwhile must not be touched (the sanitizer builds
// of CI see a use after free if it is).
TEST_F(S5_ExplicitPools, DestroyAndReapWhileAnotherThreadSynchronizes) {
  std::atomic<bool> stop{false};
  std::thread synchronizer([&] {
    while (!stop.load()) (void)somaDeviceSynchronize();
  });
  unique_stream stream;
  for (int round = 0; round < 200; ++round) {
    somaMemPool_t pool = nullptr;
    const somaMemPoolProps props = pool_props(0);
    SOMA_ASSERT_OK(somaMemPoolCreate(&pool, &props));
    void* pointer = nullptr;
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 64 * KiB, pool, stream));
    SOMA_ASSERT_OK(somaMemPoolDestroy(pool));  // live allocation: reaped at its free
    SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
    SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  }
  stop.store(true);
  synchronizer.join();
}

}  // namespace
