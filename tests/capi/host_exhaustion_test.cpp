// Host memory running out inside soma (api-behaviour.md, "Host memory exhausted"): a call whose own
// bookkeeping cannot allocate returns somaErrorMemoryAllocation ("host memory exhausted inside
// soma") and throws nothing across the C API, and the pool works on once memory is there again.
// This binary replaces the global operator new (failing_operator_new.hpp).
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "failing_operator_new.hpp"
#include "soma_test_util.hpp"

namespace {

using namespace soma_test;

class HostExhaustion : public capi_test {};

// The first allocation on a stream in a pool makes the stream's cache there: the allocation
// that fails. Before the C API's fast lanes caught what they throw, std::bad_alloc left the
// C API.
TEST_F(HostExhaustion, AFirstAllocationOnAStreamFailsCleanlyAndTheNextSucceeds) {
  unique_stream stream;
  void* pointer = reinterpret_cast<void*>(0x1);
  allocations_until_failure = 1;
  EXPECT_EQ(somaMallocAsync(&pointer, 4096, stream), somaErrorMemoryAllocation);
  allocations_until_failure = 0;
  EXPECT_TRUE(contains(last_message(), "host memory exhausted inside soma")) << last_message();
  EXPECT_EQ(pointer, reinterpret_cast<void*>(0x1)) << "output written on failure";
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, 4096, stream));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

TEST_F(HostExhaustion, AFirstAllocationFromAPoolFailsCleanlyAndThePoolGoesOn) {
  unique_stream stream;
  unique_pool pool(0);
  void* pointer = reinterpret_cast<void*>(0x1);
  allocations_until_failure = 1;
  EXPECT_EQ(somaMallocFromPoolAsync(&pointer, 4096, pool, stream), somaErrorMemoryAllocation);
  allocations_until_failure = 0;
  EXPECT_TRUE(contains(last_message(), "host memory exhausted inside soma")) << last_message();
  EXPECT_EQ(pointer, reinterpret_cast<void*>(0x1)) << "output written on failure";
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 4096, pool, stream));
  std::uint64_t used = 0;
  SOMA_ASSERT_OK(somaMemPoolGetAttribute(pool, somaMemPoolAttrUsedMemCurrent, &used));
  EXPECT_EQ(used, 4096U);
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

}  // namespace

namespace {

std::uint64_t used_of(somaMemPool_t pool) {
  std::uint64_t used = 0;
  EXPECT_EQ(somaMemPoolGetAttribute(pool, somaMemPoolAttrUsedMemCurrent, &used), somaSuccess);
  return used;
}

// A free on a stream new to the pool makes the stream's cache there. Host memory running out
// then must not lose the block: before, the free failed after the block had left its
// allocation, and the block was neither live nor free (used stayed, a second free was refused).
TEST_F(HostExhaustion, AFreeOnAStreamNewToThePoolSucceedsWithoutHostMemory) {
  unique_stream first;
  unique_stream second;
  unique_pool pool(0);
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 4096, pool, first));
  SOMA_ASSERT_OK(somaStreamSynchronize(first));
  allocations_until_failure = 1;
  EXPECT_EQ(somaFreeAsync(pointer, second), somaSuccess) << last_message();
  EXPECT_EQ(allocations_until_failure, 0) << "the free allocated nothing: the case was not reached";
  allocations_until_failure = 0;
  EXPECT_EQ(used_of(pool), 0U);
  EXPECT_EQ(somaFreeAsync(pointer, second), somaErrorInvalidValue) << "freed once, not twice";
  SOMA_ASSERT_OK(somaStreamSynchronize(second));
  void* again = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&again, 4096, pool, second));
  EXPECT_EQ(again, pointer) << "the freed block serves again";
  SOMA_ASSERT_OK(somaFreeAsync(again, second));
  SOMA_ASSERT_OK(somaStreamSynchronize(second));
}

// Frees of many sizes on one stream grow its cache's table of sizes; each may find host memory
// gone at that moment, and each still frees.
TEST_F(HostExhaustion, FreesOfManySizesSucceedWithoutHostMemory) {
  unique_stream stream;
  unique_pool pool(0);
  constexpr std::size_t count = 200;
  std::vector<void*> pointers(count);
  for (std::size_t i = 0; i < count; ++i)
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointers[i], (i + 1) * 256, pool, stream));
  int allocating_frees = 0;
  for (std::size_t i = 0; i < count; ++i) {
    allocations_until_failure = 1;
    EXPECT_EQ(somaFreeAsync(pointers[i], stream), somaSuccess)
        << "size " << (i + 1) * 256 << ": " << last_message();
    if (allocations_until_failure == 0) ++allocating_frees;
    allocations_until_failure = 0;
  }
  EXPECT_GT(allocating_frees, 0) << "no free allocated: the case was not reached";
  EXPECT_EQ(used_of(pool), 0U);
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

// A miss drains the stream's cache into the pool's index. Where the index cannot take a drained
// block for want of host memory, the block waits, free, and a later miss files it: the pool
// neither loses it nor counts it twice, and its memory serves again.
TEST_F(HostExhaustion, ADrainThatFindsHostMemoryGoneLosesNoBlock) {
  unique_stream stream;
  unique_pool pool(0);
  std::vector<void*> cached(8);
  for (std::size_t i = 0; i < cached.size(); ++i)
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&cached[i], (i + 1) * 4096, pool, stream));
  for (void* p : cached) SOMA_ASSERT_OK(somaFreeAsync(p, stream));
  std::uint64_t reserved = 0;
  SOMA_ASSERT_OK(somaMemPoolGetAttribute(pool, somaMemPoolAttrReservedMemCurrent, &reserved));
  void* missed = nullptr;
  allocations_until_failure = 1;
  const somaError_t status = somaMallocFromPoolAsync(&missed, 3000, pool, stream);
  EXPECT_EQ(allocations_until_failure, 0) << "the miss allocated nothing: the case was not reached";
  allocations_until_failure = 0;
  if (status == somaSuccess) {
    SOMA_ASSERT_OK(somaFreeAsync(missed, stream));
  }
  EXPECT_EQ(used_of(pool), 0U);
  // Every cached block is free again: together they serve one allocation of their size, in
  // place, once a later miss has filed what waited.
  void* whole = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&whole, std::size_t{36} * 4096, pool, stream));
  EXPECT_EQ(whole, cached[0]) << "a drained block was lost";
  std::uint64_t after = 0;
  SOMA_ASSERT_OK(somaMemPoolGetAttribute(pool, somaMemPoolAttrReservedMemCurrent, &after));
  EXPECT_EQ(after, reserved) << "the pool grew instead";
  SOMA_ASSERT_OK(somaFreeAsync(whole, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

}  // namespace

namespace {

std::uint64_t pool_figure(somaMemPool_t pool, somaMemPoolAttr attr) {
  std::uint64_t value = 0;
  EXPECT_EQ(somaMemPoolGetAttribute(pool, attr, &value), somaSuccess);
  return value;
}

// Every step an allocation may take in a pool that remaps before growth (growth, a split, a
// granule moved to the small region, a remap, release at the synchronize), with the first,
// second, ... host allocation inside soma failing: the call fails with
// somaErrorMemoryAllocation or succeeds, and the pool stays whole. Once everything is freed and
// the stream synchronized, trimming gives every byte back: no block was lost halfway.
TEST_F(HostExhaustion, AnAllocationThatFailsForHostMemoryAnywhereLeavesThePoolWhole) {
  const std::size_t granule = granularity_bytes(0);
  int reached = 0;
  for (int failing = 1; failing <= 400; ++failing) {
    SCOPED_TRACE(testing::Message() << "allocation " << failing << " of the call fails");
    unique_stream stream;
    unique_pool pool(0);
    int before_growth = 1;
    SOMA_ASSERT_OK(somaMemPoolSetAttribute(pool, somaMemPoolAttrRemapFreeMemory, &before_growth));
    std::vector<void*> live(4);
    for (void*& p : live) SOMA_ASSERT_OK(somaMallocFromPoolAsync(&p, 2 * granule, pool, stream));
    SOMA_ASSERT_OK(somaFreeAsync(live[0], stream));
    SOMA_ASSERT_OK(somaFreeAsync(live[2], stream));
    live = {live[1], live[3]};
    live.reserve(8);  // the test's own bookkeeping allocates nothing during the calls
    // Free granules in two holes: a larger block is mapped again from them, a small one takes
    // a granule of its own; then the stream runs its frees and the pool may release.
    const std::size_t sizes[] = {4 * granule, 512, 3 * granule};
    allocations_until_failure = failing;
    bool failed = false;
    for (std::size_t bytes : sizes) {
      void* p = nullptr;
      const somaError_t status = somaMallocFromPoolAsync(&p, bytes, pool, stream);
      if (status == somaSuccess) {
        live.push_back(p);
      } else {
        EXPECT_EQ(status, somaErrorMemoryAllocation) << last_message();
        failed = true;
      }
    }
    const somaError_t synchronized = somaStreamSynchronize(stream);
    const bool was_reached = allocations_until_failure == 0;
    allocations_until_failure = 0;
    EXPECT_EQ(synchronized, somaSuccess) << last_message();
    if (!was_reached) {
      EXPECT_FALSE(failed) << "a call failed with no allocation failing";
    }
    reached += was_reached ? 1 : 0;
    for (void* p : live) SOMA_ASSERT_OK(somaFreeAsync(p, stream));
    SOMA_ASSERT_OK(somaStreamSynchronize(stream));
    EXPECT_EQ(pool_figure(pool, somaMemPoolAttrUsedMemCurrent), 0U);
    SOMA_ASSERT_OK(somaMemPoolTrimTo(pool, 0));
    EXPECT_EQ(pool_figure(pool, somaMemPoolAttrReservedMemCurrent), 0U)
        << "memory was lost: it is neither live nor free";
    if (!was_reached) break;
  }
  EXPECT_GT(reached, 0) << "the calls allocated nothing: no case was reached";
}

// A synchronize also gives memory back and forgets destroyed streams whose work has run: what it
// does besides its work. Whichever host allocation inside it fails, it succeeds, and the pool's
// memory and the streams' frees are all accounted for afterwards. (On an H100 the forgetting of
// destroyed streams failed the synchronize with somaErrorMemoryAllocation.)
TEST_F(HostExhaustion, ASynchronizeSucceedsWhicheverHostAllocationFails) {
  int reached = 0;
  for (int failing = 1; failing <= 100; ++failing) {
    SCOPED_TRACE(testing::Message() << "allocation " << failing << " of the synchronize fails");
    unique_stream stream;
    unique_pool pool(0);
    for (int i = 0; i < 4; ++i) {
      somaStream_t gone = nullptr;
      SOMA_ASSERT_OK(somaStreamCreate(&gone));
      void* p = nullptr;
      SOMA_ASSERT_OK(somaMallocFromPoolAsync(&p, 4096, pool, gone));
      SOMA_ASSERT_OK(somaFreeAsync(p, gone));
      SOMA_ASSERT_OK(somaStreamDestroy(gone));
    }
    void* q = nullptr;
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&q, 4096, pool, stream));
    SOMA_ASSERT_OK(somaFreeAsync(q, stream));
    allocations_until_failure = failing;
    const somaError_t synchronized = somaStreamSynchronize(stream);
    const bool was_reached = allocations_until_failure == 0;
    allocations_until_failure = 0;
    EXPECT_EQ(synchronized, somaSuccess) << last_message();
    SOMA_ASSERT_OK(somaStreamSynchronize(stream));
    EXPECT_EQ(pool_figure(pool, somaMemPoolAttrUsedMemCurrent), 0U);
    SOMA_ASSERT_OK(somaMemPoolTrimTo(pool, 0));
    EXPECT_EQ(pool_figure(pool, somaMemPoolAttrReservedMemCurrent), 0U);
    if (!was_reached) break;
    ++reached;
  }
  EXPECT_GT(reached, 0) << "the synchronize allocated nothing: no case was reached";
}

}  // namespace
