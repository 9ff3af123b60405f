// Pool statistics (S10): used = sum of requested sizes of live allocations, reserved =
// committed physical memory in whole granules, high watermarks reset by setting them to 0.
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "soma_test_util.hpp"

namespace {

using namespace soma_test;

class S10_Statistics : public capi_test {};

TEST_F(S10_Statistics, UsedIsTheSumOfRequestedSizes) {
  unique_stream stream;
  unique_pool pool(0);
  const std::size_t granule = granularity_bytes(0);
  const std::vector<std::size_t> sizes = {1, 1000, 4097, 1 * MiB + 3, 255, 70000};
  std::vector<void*> pointers;
  std::uint64_t sum = 0;
  for (std::size_t size : sizes) {
    void* pointer = nullptr;
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, size, pool, stream));
    pointers.push_back(pointer);
    sum += size;
    const pool_stats stats = read_pool_stats(pool);
    EXPECT_EQ(stats.used_current, sum);
    EXPECT_GE(stats.reserved_current, stats.used_current);
    EXPECT_EQ(stats.reserved_current % granule, 0u);
  }
  for (std::size_t i = 0; i < pointers.size(); ++i) {
    SOMA_ASSERT_OK(somaFreeAsync(pointers[i], stream));
    sum -= sizes[i];
    EXPECT_EQ(pool_u64(pool, somaMemPoolAttrUsedMemCurrent), sum)
        << "a freed allocation is no longer live (S2), even before the stream runs the free";
  }
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(read_pool_stats(pool).used_current, 0u);
}

TEST_F(S10_Statistics, UsedHighTracksThePeakAndResetsToCurrent) {
  unique_stream stream;
  unique_pool pool(0);
  void* a = nullptr;
  void* b = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&a, 8 * MiB, pool, stream));
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&b, 5 * MiB, pool, stream));
  SOMA_ASSERT_OK(somaFreeAsync(b, stream));
  pool_stats stats = read_pool_stats(pool);
  EXPECT_EQ(stats.used_current, 8 * MiB);
  EXPECT_EQ(stats.used_high, 13 * MiB);

  SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrUsedMemHigh, 0));
  stats = read_pool_stats(pool);
  EXPECT_EQ(stats.used_high, 8 * MiB) << "reset sets the high watermark to the current value";
  SOMA_ASSERT_OK(somaFreeAsync(a, stream));
  EXPECT_EQ(read_pool_stats(pool).used_high, 8 * MiB);
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S10_Statistics, ReservedHighTracksThePeakAndResetsToCurrent) {
  unique_stream stream;
  unique_pool pool(0);  // threshold 0: the synchronize releases everything
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 10 * MiB, pool, stream));
  const std::uint64_t peak = pool_u64(pool, somaMemPoolAttrReservedMemCurrent);
  ASSERT_GE(peak, 10 * MiB);
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  pool_stats stats = read_pool_stats(pool);
  EXPECT_EQ(stats.reserved_current, 0u);
  EXPECT_EQ(stats.reserved_high, peak);
  SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReservedMemHigh, 0));
  stats = read_pool_stats(pool);
  EXPECT_EQ(stats.reserved_high, 0u);
  EXPECT_EQ(stats.used_high, 10 * MiB) << "resetting one watermark leaves the other";
}

TEST_F(S10_Statistics, UsedVersusReservedExplainsCachedMemory) {
  unique_stream stream;
  unique_pool pool(0);
  SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 6 * MiB, pool, stream));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  const pool_stats stats = read_pool_stats(pool);
  EXPECT_EQ(stats.used_current, 0u) << "everything was freed";
  EXPECT_GE(stats.reserved_current, 6 * MiB) << "but the pool still holds it";
}

TEST_F(S10_Statistics, StatisticsArePerPool) {
  unique_stream stream;
  unique_pool first(0);
  unique_pool second(0);
  const pool_stats default_before = read_pool_stats(default_pool(0));
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 3 * MiB, first, stream));
  EXPECT_EQ(read_pool_stats(second), pool_stats{});
  EXPECT_EQ(read_pool_stats(default_pool(0)), default_before);
  EXPECT_EQ(pool_u64(first, somaMemPoolAttrUsedMemCurrent), 3 * MiB);
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S10_Statistics, SameStreamReuseDoesNotGrowReserved) {
  unique_stream stream;
  unique_pool pool(0);
  SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 2 * MiB, pool, stream));
  const std::uint64_t reserved = pool_u64(pool, somaMemPoolAttrReservedMemCurrent);
  for (int i = 0; i < 100; ++i) {
    SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 2 * MiB, pool, stream));
  }
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrReservedMemCurrent), reserved);
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrUsedMemHigh), 2 * MiB);
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(S10_Statistics, FailedAllocationChangesNoStatistic) {
  unique_stream stream;
  unique_pool pool(0, 2 * MiB);
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 1 * MiB, pool, stream));
  const pool_stats before = read_pool_stats(pool);
  void* refused = nullptr;
  ASSERT_EQ(somaMallocFromPoolAsync(&refused, 3 * MiB, pool, stream), somaErrorMemoryAllocation);
  EXPECT_EQ(read_pool_stats(pool), before);
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

}  // namespace
