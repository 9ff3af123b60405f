// The out-of-memory message (soma's own, over S3 caps, S9 compaction and S11 reuse): where the
// pool's free memory lies, what is pending free on which stream, and the one change that would
// have let the allocation succeed. Each case is made here and its advice checked, and where the
// advice is a setting, the same sequence with that setting succeeds.
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "soma_test_util.hpp"

namespace {

using namespace soma_test;

class S3_S9_S11_OutOfMemoryAdvice : public capi_test {
 protected:
  std::size_t granule = granularity_bytes(0);

  /// Reuse only by the same stream, after proof, or (if on) through internal dependencies.
  static void make_strict(somaMemPool_t pool) {
    EXPECT_EQ(set_pool_int(pool, somaMemPoolReuseFollowEventDependencies, 0), somaSuccess);
    EXPECT_EQ(set_pool_int(pool, somaMemPoolReuseAllowOpportunistic, 0), somaSuccess);
  }
  /// The message of an allocation expected to run out of memory.
  static std::string refused(std::size_t bytes, somaMemPool_t pool, somaStream_t stream) {
    void* pointer = nullptr;
    const somaError_t status = somaMallocFromPoolAsync(&pointer, bytes, pool, stream);
    EXPECT_EQ(status, somaErrorMemoryAllocation);
    if (status == somaSuccess) {
      EXPECT_EQ(somaFreeAsync(pointer, stream), somaSuccess);
    }
    return last_message();
  }
  /// The pool's latest failure as data.
  static somaOutOfMemoryReport report_of(somaMemPool_t pool) {
    somaOutOfMemoryReport report{};
    EXPECT_EQ(somaMemPoolGetLastOutOfMemory(pool, &report), somaSuccess) << last_message();
    return report;
  }
};

TEST_F(S3_S9_S11_OutOfMemoryAdvice, ARequestAboveTheCapAsksForALargerMaxSize) {
  unique_pool pool(0, 2 * granule);
  make_strict(pool);
  const std::string message = refused(3 * granule, pool, nullptr);
  EXPECT_TRUE(
      contains(message, "What would have let it succeed: a pool whose max size is at least"))
      << message;
}

TEST_F(S3_S9_S11_OutOfMemoryAdvice, APoolFullOfLiveMemoryAsksForMoreMaxSize) {
  unique_pool pool(0, 2 * granule);
  make_strict(pool);
  unique_stream stream;
  void* live = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&live, 2 * granule, pool, stream));
  const std::string message = refused(granule, pool, stream);
  EXPECT_TRUE(contains(message, "In the pool: 0 B free")) << message;
  EXPECT_TRUE(contains(message, "What would have let it succeed: a max size at least")) << message;
  const somaOutOfMemoryReport report = report_of(pool);
  EXPECT_EQ(report.change, somaOomChangeMoreMaxSize);
  EXPECT_EQ(report.changeBytes, granule);
  EXPECT_EQ(report.usedBytes, 2 * granule);
  EXPECT_EQ(report.reservedBytes, 2 * granule);
  EXPECT_EQ(report.freeBytes, 0u);
  EXPECT_EQ(report.stream, stream.get());
  SOMA_ASSERT_OK(somaFreeAsync(live, stream));
}

TEST_F(S3_S9_S11_OutOfMemoryAdvice, AFreePendingOnAnotherStreamNamesItAndInternalDependencies) {
  unique_pool pool(0, 4 * granule);
  make_strict(pool);
  SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolReuseAllowInternalDependencies, 0));
  unique_stream a;
  unique_stream b;
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 4 * granule, pool, a));
  SOMA_ASSERT_OK(somaMemsetAsync(pointer, 1, 4 * granule, a));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, a));
  const std::string message = refused(4 * granule, pool, b);
  char name[64];
  std::snprintf(name, sizeof name, "freed on stream %p", static_cast<void*>(a.get()));
  EXPECT_TRUE(contains(message, name)) << message;
  EXPECT_TRUE(contains(message, "somaMemPoolReuseAllowInternalDependencies = 1")) << message;
  const somaOutOfMemoryReport report = report_of(pool);
  EXPECT_EQ(report.change, somaOomChangeAllowInternalDependencies);
  EXPECT_EQ(report.changeStreamKnown, 1);
  EXPECT_EQ(report.changeStream, a.get());
  EXPECT_EQ(report.changeBytes, 4 * granule);
  EXPECT_EQ(report.reuseAllowInternalDependencies, 0);
  EXPECT_EQ(report.reuseAllowOpportunistic, 0);
  ASSERT_EQ(report.pendingStreamCount, 1u);
  EXPECT_EQ(report.pendingStreams[0].stream, a.get());
  EXPECT_EQ(report.pendingStreams[0].bytes, 4 * granule);
  EXPECT_EQ(report.pendingBytes, 4 * granule);
  // The advice holds: with internal dependencies the same request is served.
  SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolReuseAllowInternalDependencies, 1));
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 4 * granule, pool, b));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, b));
  SOMA_ASSERT_OK(somaDeviceSynchronize());
}

TEST_F(S3_S9_S11_OutOfMemoryAdvice, AFreePendingOnADestroyedStreamAsksForADeviceSynchronize) {
  unique_pool pool(0, 4 * granule);
  make_strict(pool);
  unique_stream b;
  void* pointer = nullptr;
  {
    unique_stream a;
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 4 * granule, pool, a));
    SOMA_ASSERT_OK(somaMemsetAsync(pointer, 1, 4 * granule, a));
    SOMA_ASSERT_OK(somaFreeAsync(pointer, a));
  }
  const std::string message = refused(4 * granule, pool, b);
  EXPECT_TRUE(contains(message, "freed on a destroyed stream")) << message;
  EXPECT_TRUE(contains(message, "a somaDeviceSynchronize before this allocation")) << message;
  const somaOutOfMemoryReport report = report_of(pool);
  EXPECT_EQ(report.change, somaOomChangeSynchronizeDevice);
  EXPECT_EQ(report.changeStreamKnown, 0);
  ASSERT_EQ(report.pendingStreamCount, 1u);
  EXPECT_EQ(report.pendingStreams[0].streamKnown, 0);
  SOMA_ASSERT_OK(somaDeviceSynchronize());
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 4 * granule, pool, b));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, b));
}

/// Four granules live, the first and third freed and proven: half the pool free, in two pieces.
void fragment(somaMemPool_t pool, somaStream_t stream, std::size_t granule,
              std::vector<void*>* kept) {
  std::vector<void*> pieces(4);
  for (void*& p : pieces) SOMA_ASSERT_OK(somaMallocFromPoolAsync(&p, granule, pool, stream));
  SOMA_ASSERT_OK(somaFreeAsync(pieces[0], stream));
  SOMA_ASSERT_OK(somaFreeAsync(pieces[2], stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  *kept = {pieces[1], pieces[3]};
}

// Free memory in pieces at the cap: with remapping off, the advice is remapping (it needs no
// synchronize); remapping instead of failing (the default) then serves the request, and so does
// compaction before growth on its own. On cuda this pool's commits are whole physical
// allocations, which cuMemMap cannot map at an offset: there the advice is compaction, and only
// compaction serves.
TEST_F(S3_S9_S11_OutOfMemoryAdvice, FreeMemoryInPiecesAsksForRemappingWhichThenServesIt) {
  const bool remaps = on_cpu_backend();  // memfd offsets map anywhere; cuda: see above
  unique_stream stream;
  std::vector<void*> kept;
  {
    unique_pool pool(0, 4 * granule);
    make_strict(pool);
    SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
    SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolAttrRemapFreeMemory, 0));
    fragment(pool, stream, granule, &kept);
    const std::string message = refused(2 * granule, pool, stream);
    EXPECT_TRUE(contains(message, "in 2 pieces")) << message;
    EXPECT_TRUE(contains(message, remaps ? "somaMemPoolAttrRemapFreeMemory = 2"
                                         : "somaMemPoolAttrCompactBeforeGrowth = 1"))
        << message;
    const somaOutOfMemoryReport report = report_of(pool);
    EXPECT_EQ(report.change,
              remaps ? somaOomChangeRemapFreeMemory : somaOomChangeCompactBeforeGrowth);
    EXPECT_EQ(report.freePieces, 2u);
    EXPECT_EQ(report.freeBytes, 2 * granule);
    EXPECT_EQ(report.largestFreeBytes, granule);
    EXPECT_EQ(report.compactBeforeGrowth, 0);
    EXPECT_EQ(report.remapFreeMemory, 0);
    for (void* p : kept) SOMA_ASSERT_OK(somaFreeAsync(p, stream));
  }
  for (const bool compaction : {false, true}) {
    if (!compaction && !remaps) continue;
    unique_pool pool(0, 4 * granule);
    make_strict(pool);
    SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
    SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolAttrRemapFreeMemory, compaction ? 0 : 2));
    SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolAttrCompactBeforeGrowth, compaction ? 1 : 0));
    fragment(pool, stream, granule, &kept);
    void* whole = nullptr;
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&whole, 2 * granule, pool, stream))
        << (compaction ? "compaction" : "remapping");
    std::uint64_t remaps = 0;
    SOMA_ASSERT_OK(somaMemPoolGetAttribute(pool, somaMemPoolAttrRemapCount, &remaps));
    EXPECT_EQ(remaps, compaction ? 0u : 1u);
    for (void* p : kept) SOMA_ASSERT_OK(somaFreeAsync(p, stream));
    SOMA_ASSERT_OK(somaFreeAsync(whole, stream));
    SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  }
}

TEST_F(S3_S9_S11_OutOfMemoryAdvice, TheReportOfAPoolThatNeverFailedSaysNone) {
  unique_pool pool(0);
  somaOutOfMemoryReport report;
  std::memset(&report, 0xff, sizeof report);
  SOMA_ASSERT_OK(somaMemPoolGetLastOutOfMemory(pool, &report));
  EXPECT_EQ(report.change, somaOomChangeNone);
  EXPECT_EQ(report.requestedBytes, 0u);
  EXPECT_EQ(report.pendingStreamCount, 0u);
}

TEST_F(S3_S9_S11_OutOfMemoryAdvice, EachBadArgumentOfTheReportCallIsRefused) {
  unique_pool pool(0);
  somaOutOfMemoryReport report{};
  EXPECT_EQ(somaMemPoolGetLastOutOfMemory(pool, nullptr), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "report is NULL")) << last_message();
  EXPECT_EQ(somaMemPoolGetLastOutOfMemory(nullptr, &report), somaErrorInvalidValue);
  somaMemPool_t gone = destroyed_pool();
  EXPECT_EQ(somaMemPoolGetLastOutOfMemory(gone, &report), somaErrorInvalidResourceHandle);
  EXPECT_TRUE(contains(last_message(), "is not a live pool")) << last_message();
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 512, pool, nullptr));  // the pool is intact
  SOMA_ASSERT_OK(somaFreeAsync(pointer, nullptr));
}

}  // namespace
