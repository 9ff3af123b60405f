// Remapping free memory on a real GPU (S9, soma's own; design §3 "Remapping"): the granules of
// two holes are mapped again as one range, and a kernel writes through the new mapping, while
// another stream's earlier kernel, ordered before the frees by an event, still reads the old
// addresses. The old addresses stay mapped until that kernel has finished (compute-sanitizer
// would report the unmapped access otherwise), every kernel sees the bytes it should, and live
// blocks keep theirs.
#include <soma/soma.h>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>

#include "gpu_test_util.cuh"

namespace {

using namespace soma_gpu_test;

constexpr std::uint64_t kSlowKernelNs = 50'000'000;  // 50 ms

class S9_GpuRemap : public gpu_test {};

TEST_F(S9_GpuRemap, AKernelWritesTheRemappedRangeWhileAnEarlierKernelStillReadsTheOldAddresses) {
  somaMemPool_t pool = nullptr;
  const somaMemPoolProps props = pool_props(0);
  SOMA_ASSERT_OK(somaMemPoolCreate(&pool, &props));
  SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
  // Before growth: the pool then commits a physical allocation per granule (cuMemMap maps
  // whole ones only) and remaps before it grows.
  SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolAttrRemapFreeMemory, 1));
  unique_stream a;
  unique_stream b;
  unique_event read_done;
  const std::size_t block_bytes = 2 * granularity_bytes(0);
  const std::size_t block_words = block_bytes / 4;

  void* blocks[4] = {};
  for (std::uint32_t i = 0; i < 4; ++i) {
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&blocks[i], block_bytes, pool, a));
    fill(a, blocks[i], block_words, 100 + i);
  }
  // The rest of the growth step, so that no free block can serve the large request.
  void* filler = nullptr;
  const std::uint64_t slack = pool_u64(pool, somaMemPoolAttrReservedMemCurrent) -
                              pool_u64(pool, somaMemPoolAttrUsedMemCurrent);
  if (slack != 0) SOMA_ASSERT_OK(somaMallocFromPoolAsync(&filler, slack, pool, a));
  CUDA_ASSERT_LAUNCHED();
  SOMA_ASSERT_OK(somaStreamSynchronize(a));

  // b reads the first and third blocks slowly; a frees them once b has read them.
  void* counter = new_counter(b);
  check(b, blocks[0], block_words, 100, counter, kSlowKernelNs);
  check(b, blocks[2], block_words, 102, counter);
  CUDA_ASSERT_LAUNCHED();
  SOMA_ASSERT_OK(somaEventRecord(read_done, b));
  SOMA_ASSERT_OK(somaStreamWaitEvent(a, read_done, 0));
  SOMA_ASSERT_OK(somaFreeAsync(blocks[0], a));
  SOMA_ASSERT_OK(somaFreeAsync(blocks[2], a));

  // While b's kernel runs: four granules from the two holes, mapped again.
  void* large = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&large, 2 * block_bytes, pool, a));
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrRemapCount), 1u);
  EXPECT_EQ(cudaStreamQuery(native_stream(b)), cudaErrorNotReady)
      << "b's kernel finished before the remap: the test did not overlap them";
  fill(a, large, 2 * block_words, 777);
  void* large_counter = new_counter(a);
  check(a, large, 2 * block_words, 777, large_counter);
  check(a, blocks[1], block_words, 101, large_counter);
  check(a, blocks[3], block_words, 103, large_counter);
  CUDA_ASSERT_LAUNCHED();

  EXPECT_EQ(read_and_free_counter(b, counter), 0u) << "b read changed bytes at the old addresses";
  EXPECT_EQ(read_and_free_counter(a, large_counter), 0u)
      << "the remapped range or a live block holds wrong bytes";
  for (void* p : {large, blocks[1], blocks[3], filler}) {
    if (p != nullptr) SOMA_ASSERT_OK(somaFreeAsync(p, a));
  }
  SOMA_ASSERT_OK(somaStreamSynchronize(a));
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrUsedMemCurrent), 0u);
  SOMA_ASSERT_OK(somaMemPoolTrimTo(pool, 0));
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrReservedMemCurrent), 0u)
      << "every granule goes back once, the remapped ones too";
  SOMA_ASSERT_OK(somaMemPoolDestroy(pool));
}

}  // namespace
