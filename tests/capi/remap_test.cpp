// Remapping free memory (S9, soma's own; design §3 "Remapping"), on both backends, with
// somaMemPoolAttrRemapFreeMemory = 1 (before growth): free whole granules that lie in pieces
// serve a larger allocation by being mapped again as one range,
// while the stream that freed them is still held (no synchronize, no growth); the old addresses
// are handed to nothing until those frees complete, under every combination of the reuse
// policies (S11); live blocks keep their bytes, and work queued before the frees still runs on
// the old addresses.
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "soma_test_util.hpp"
#include "stream_gate.hpp"

namespace {

using namespace soma_test;

class S9_Remap : public capi_test {};

bool overlaps(const void* pointer, std::size_t bytes, const void* other, std::size_t other_bytes) {
  const auto a = reinterpret_cast<std::uintptr_t>(pointer);
  const auto b = reinterpret_cast<std::uintptr_t>(other);
  return a < b + other_bytes && b < a + bytes;
}

/// Four blocks of two granules, each filled with its own byte, and a filler for the rest of
/// what the pool grew by (cuda grows in steps of several granules); the first and third blocks
/// are then freed on the held stream after one more memset each (work that still uses their
/// addresses).
struct two_holes {
  two_holes(somaMemPool_t pool, somaStream_t stream, stream_gate& gate, std::size_t granule)
      : block_bytes(2 * granule) {
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(somaMallocFromPoolAsync(&blocks[i], block_bytes, pool, stream), somaSuccess);
      EXPECT_EQ(somaMemsetAsync(blocks[i], 0x10 * (i + 1), block_bytes, stream), somaSuccess);
    }
    const std::uint64_t slack = pool_u64(pool, somaMemPoolAttrReservedMemCurrent) -
                                pool_u64(pool, somaMemPoolAttrUsedMemCurrent);
    if (slack != 0) {
      EXPECT_EQ(somaMallocFromPoolAsync(&filler, slack, pool, stream), somaSuccess);
    }
    filler_bytes = slack;
    EXPECT_EQ(somaStreamSynchronize(stream), somaSuccess);
    EXPECT_EQ(gate.hold(stream), somaSuccess);
    for (int i : {0, 2}) {
      EXPECT_EQ(somaMemsetAsync(blocks[i], 0x5a, block_bytes, stream), somaSuccess);
      EXPECT_EQ(somaFreeAsync(blocks[i], stream), somaSuccess);
    }
  }
  bool lands_on_a_hole(const void* pointer, std::size_t bytes) const {
    return overlaps(pointer, bytes, blocks[0], block_bytes) ||
           overlaps(pointer, bytes, blocks[2], block_bytes);
  }
  /// Frees what stays live: the second and fourth blocks and the filler.
  void free_rest(somaStream_t stream) {
    for (void* p : {blocks[1], blocks[3], filler}) {
      if (p != nullptr) {
        EXPECT_EQ(somaFreeAsync(p, stream), somaSuccess);
      }
    }
  }
  std::size_t block_bytes;
  void* blocks[4] = {};
  void* filler = nullptr;
  std::size_t filler_bytes = 0;
};

TEST_F(S9_Remap, AHeldStreamsFreesServeALargerAllocationWithoutGrowthOrSynchronize) {
  const std::size_t granule = granularity_bytes(0);
  unique_stream stream;
  unique_pool pool(0);
  SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
  SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolAttrRemapFreeMemory, 1));  // before growth
  stream_gate gate;
  two_holes holes(pool, stream, gate, granule);
  const std::uint64_t reserved = pool_u64(pool, somaMemPoolAttrReservedMemCurrent);

  void* large = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&large, 4 * granule, pool, stream));
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrRemapCount), 1u);
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrRemappedBytes), 4 * granule);
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrRemapKeptBytes), 0u) << "a live block is on top";
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrReservedMemCurrent), reserved)
      << "the pool grew, or counted remapped memory twice";
  EXPECT_EQ(somaStreamQuery(stream), somaErrorNotReady) << "the stream was synchronized";
  EXPECT_EQ(gate.left(), 0);
  EXPECT_FALSE(holes.lands_on_a_hole(large, 4 * granule));
  SOMA_ASSERT_OK(somaMemsetAsync(large, 0x77, 4 * granule, stream));

  gate.open();
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(read_back(large, 4 * granule, stream).count_not(0x77), 0u);
  EXPECT_EQ(read_back(holes.blocks[1], holes.block_bytes, stream).count_not(0x20), 0u)
      << "a live block lost its bytes";
  EXPECT_EQ(read_back(holes.blocks[3], holes.block_bytes, stream).count_not(0x40), 0u)
      << "a live block lost its bytes";
  SOMA_ASSERT_OK(somaFreeAsync(large, stream));
  holes.free_rest(stream);
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrUsedMemCurrent), 0u);
}

// A free block at the top of mapped memory keeps its granules where they lie: the new block
// begins at it, only the hole's granules are mapped again after it, and the pool says which
// bytes were kept (somaMemPoolAttrRemapKeptBytes) and which were mapped again.
TEST_F(S9_Remap, AFreeBlockOnTopIsKeptInPlaceAndCountedAsKept) {
  const std::size_t granule = granularity_bytes(0);
  unique_stream stream;
  unique_pool pool(0);
  SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
  SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolAttrRemapFreeMemory, 1));  // before growth
  stream_gate gate;
  two_holes holes(pool, stream, gate, granule);
  // The fourth block and the filler above it go too: free on the same stream, they join the
  // third block (a hole) into one free block at the top of mapped memory.
  void* top = holes.blocks[2];
  SOMA_ASSERT_OK(somaFreeAsync(holes.blocks[3], stream));
  if (holes.filler != nullptr) {
    ASSERT_EQ(holes.filler, static_cast<char*>(holes.blocks[3]) + holes.block_bytes)
        << "not one block on top";
    SOMA_ASSERT_OK(somaFreeAsync(holes.filler, stream));
  }
  const std::uint64_t reserved = pool_u64(pool, somaMemPoolAttrReservedMemCurrent);
  const std::size_t top_bytes = 2 * holes.block_bytes + holes.filler_bytes;
  ASSERT_EQ(top_bytes % granule, 0u);

  // Larger than the top block: it keeps its granules and the first hole's two are mapped after
  // it.
  void* large = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&large, top_bytes + 2 * granule, pool, stream));
  EXPECT_EQ(large, top) << "the new block does not begin at the top block";
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrRemapCount), 1u);
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrRemapKeptBytes), top_bytes);
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrRemappedBytes), 2 * granule);
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrReservedMemCurrent), reserved) << "the pool grew";
  EXPECT_EQ(somaStreamQuery(stream), somaErrorNotReady) << "the stream was synchronized";
  SOMA_ASSERT_OK(somaMemsetAsync(large, 0x77, top_bytes + 2 * granule, stream));

  gate.open();
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(read_back(large, top_bytes + 2 * granule, stream).count_not(0x77), 0u);
  EXPECT_EQ(read_back(holes.blocks[1], holes.block_bytes, stream).count_not(0x20), 0u)
      << "a live block lost its bytes";
  SOMA_ASSERT_OK(somaFreeAsync(large, stream));
  SOMA_ASSERT_OK(somaFreeAsync(holes.blocks[1], stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrUsedMemCurrent), 0u);
}

// S11 for remapping: while the freeing stream is held, no allocation on another stream lands on
// the old addresses, whatever the policies; an allocation there may wait for them only as a
// block would (internal dependencies take pending blocks, never retired addresses).
class S9_RemapPolicies : public capi_test, public ::testing::WithParamInterface<int> {};

TEST_P(S9_RemapPolicies, OldAddressesServeNoStreamBeforeTheirFreesComplete) {
  const int mask = GetParam();
  const std::size_t granule = granularity_bytes(0);
  unique_stream stream;
  unique_stream other;
  unique_pool pool(0);
  SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
  const somaMemPoolAttr policies[] = {somaMemPoolReuseFollowEventDependencies,
                                      somaMemPoolReuseAllowOpportunistic,
                                      somaMemPoolReuseAllowInternalDependencies};
  for (int i = 0; i < 3; ++i) SOMA_ASSERT_OK(set_pool_int(pool, policies[i], (mask >> i) & 1));
  SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolAttrRemapFreeMemory, 1));
  stream_gate gate;
  two_holes holes(pool, stream, gate, granule);
  void* large = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&large, 4 * granule, pool, stream));
  ASSERT_EQ(pool_u64(pool, somaMemPoolAttrRemapCount), 1u);

  std::vector<void*> taken;
  for (std::size_t bytes : {granule, 2 * granule, granule / 2, 3 * granule, granule}) {
    void* p = nullptr;
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&p, bytes, pool, other));
    EXPECT_FALSE(holes.lands_on_a_hole(p, bytes))
        << "an old address was handed out while its free was pending (policies " << mask << ")";
    SOMA_ASSERT_OK(somaMemsetAsync(p, 0x66, bytes, other));
    taken.push_back(p);
  }
  gate.open();
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(other));
  EXPECT_EQ(read_back(holes.blocks[1], holes.block_bytes, stream).count_not(0x20), 0u);
  for (void* p : taken) SOMA_ASSERT_OK(somaFreeAsync(p, other));
  SOMA_ASSERT_OK(somaFreeAsync(large, stream));
  holes.free_rest(stream);
  SOMA_ASSERT_OK(somaDeviceSynchronize());
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrUsedMemCurrent), 0u);
}

INSTANTIATE_TEST_SUITE_P(EveryPolicyCombination, S9_RemapPolicies, ::testing::Range(0, 8));

// S7: an exportable pool keeps whole commits and never remaps.
TEST_F(S9_Remap, AnExportablePoolGrowsInstead) {
  const std::size_t granule = granularity_bytes(0);
  somaMemPoolProps props = pool_props(0);
  props.handleTypes = somaMemHandleTypePosixFileDescriptor;
  unique_pool pool(props);
  SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
  SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolAttrRemapFreeMemory, 1));
  unique_stream stream;
  stream_gate gate;
  two_holes holes(pool, stream, gate, granule);
  void* large = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&large, 4 * granule, pool, stream));
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrRemapCount), 0u);
  EXPECT_FALSE(holes.lands_on_a_hole(large, 4 * granule));
  gate.open();
  SOMA_ASSERT_OK(somaFreeAsync(large, stream));
  holes.free_rest(stream);
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
}

}  // namespace
