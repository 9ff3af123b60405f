// Physical caching and release (S9) at synchronization points (S12), and somaMemPoolTrimTo.
// reserved = committed physical bytes (whole granules); the device's free bytes
// (somaMemGetInfo) rise when a pool gives memory back.
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

#include "soma_test_util.hpp"
#include "stream_gate.hpp"

namespace {

using namespace soma_test;

class S9_S12_Release : public capi_test {};
class S9_Trim : public capi_test {};

enum class sync_kind { stream, event, device };

std::string sync_name(const ::testing::TestParamInfo<sync_kind>& info) {
  switch (info.param) {
    case sync_kind::stream:
      return "StreamSynchronize";
    case sync_kind::event:
      return "EventSynchronize";
    case sync_kind::device:
      return "DeviceSynchronize";
  }
  return "unknown";
}

somaError_t synchronize(sync_kind kind, somaStream_t stream) {
  switch (kind) {
    case sync_kind::stream:
      return somaStreamSynchronize(stream);
    case sync_kind::event: {
      somaEvent_t event = nullptr;
      somaError_t status = somaEventCreate(&event);
      if (status != somaSuccess) return status;
      status = somaEventRecord(event, stream);
      if (status == somaSuccess) status = somaEventSynchronize(event);
      const somaError_t destroyed = somaEventDestroy(event);
      return status != somaSuccess ? status : destroyed;
    }
    case sync_kind::device:
      return somaDeviceSynchronize();
  }
  return somaErrorUnknown;
}

class S9_S12_ReleaseAtSynchronize : public capi_test,
                                    public ::testing::WithParamInterface<sync_kind> {};

TEST_P(S9_S12_ReleaseAtSynchronize, ThresholdZeroReturnsFreedMemory) {
  unique_stream stream;
  unique_pool pool(0);
  ASSERT_EQ(pool_u64(pool, somaMemPoolAttrReleaseThreshold), 0u) << "S9: default threshold 0";
  SOMA_ASSERT_OK(somaDeviceSynchronize());
  const std::size_t committed_at_start = committed_bytes(0);

  constexpr std::size_t size = 8 * MiB;
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, size, pool, stream));
  const std::uint64_t reserved = pool_u64(pool, somaMemPoolAttrReservedMemCurrent);
  EXPECT_GE(reserved, size);
  EXPECT_EQ(reserved % granularity_bytes(0), 0u);
  EXPECT_EQ(committed_bytes(0), committed_at_start + reserved)
      << "the device's committed bytes grow by what the pool reserved";
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(synchronize(GetParam(), stream));
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrReservedMemCurrent), 0u);
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrUsedMemCurrent), 0u);
  EXPECT_EQ(committed_bytes(0), committed_at_start);
}

TEST_P(S9_S12_ReleaseAtSynchronize, MaxThresholdKeepsFreedMemory) {
  unique_stream stream;
  unique_pool pool(0);
  SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrReleaseThreshold), UINT64_MAX);
  constexpr std::size_t size = 8 * MiB;
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, size, pool, stream));
  const std::uint64_t reserved = pool_u64(pool, somaMemPoolAttrReservedMemCurrent);
  const std::size_t committed = committed_bytes(0);
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(synchronize(GetParam(), stream));
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrReservedMemCurrent), reserved);
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrUsedMemCurrent), 0u) << "S10: used vs reserved";
  EXPECT_EQ(committed_bytes(0), committed);

  // The cached memory serves the next allocation without committing more.
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, size, pool, stream));
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrReservedMemCurrent), reserved);
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(synchronize(GetParam(), stream));

  // Lowering the threshold takes effect at the next synchronize.
  SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, 0));
  SOMA_ASSERT_OK(synchronize(GetParam(), stream));
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrReservedMemCurrent), 0u);
}

INSTANTIATE_TEST_SUITE_P(SyncKinds, S9_S12_ReleaseAtSynchronize,
                         ::testing::Values(sync_kind::stream, sync_kind::event, sync_kind::device),
                         sync_name);

TEST_F(S9_S12_Release, ThresholdBoundsWhatStaysCached) {
  // Three frees, so that on every backend there is more than one release unit (cpu: a
  // granule; cuda: a commit, 32 MiB) beyond the threshold. A synchronize gives back whole units
  // while the pool stays at or above the threshold, as cudaMemPoolTrimTo keeps at least its
  // argument.
  unique_stream stream;
  unique_pool pool(0);
  constexpr std::uint64_t threshold = 4 * MiB;
  constexpr std::size_t size = 16 * MiB;
  SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, threshold));
  void* pointers[3] = {};
  for (void*& pointer : pointers)
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, size, pool, stream));
  for (void* pointer : pointers) SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  const std::uint64_t reserved = pool_u64(pool, somaMemPoolAttrReservedMemCurrent);
  EXPECT_GE(reserved, threshold) << "memory within the threshold stays cached";
  EXPECT_LT(reserved, 3 * size) << "memory beyond the threshold goes back";
  EXPECT_EQ(reserved % granularity_bytes(0), 0u);
  if (on_cpu_backend()) {  // granules go back one by one: exactly the threshold stays
    EXPECT_EQ(reserved, threshold);
  }
}

TEST_F(S9_S12_Release, LiveMemoryIsNeverReleased) {
  unique_stream stream;
  unique_pool pool(0);
  constexpr std::size_t size = 2 * MiB;
  void* live = nullptr;
  void* freed = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&live, size, pool, stream));
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&freed, 6 * MiB, pool, stream));
  SOMA_ASSERT_OK(somaMemsetAsync(live, 0x6D, size, stream));
  SOMA_ASSERT_OK(somaFreeAsync(freed, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  const std::uint64_t reserved = pool_u64(pool, somaMemPoolAttrReservedMemCurrent);
  EXPECT_GE(reserved, size);
  if (on_cpu_backend()) {  // cuda: both blocks share one commit, which goes back whole only
    EXPECT_LT(reserved, size + 6 * MiB) << "the freed 6 MiB should have gone back";
  }
  const host_buffer bytes = read_back(live, size, stream);
  EXPECT_EQ(bytes.count_not(0x6D), 0u) << "release touched a live allocation";
  SOMA_ASSERT_OK(somaFreeAsync(live, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrReservedMemCurrent), 0u);
}

TEST_F(S9_S12_Release, WholeGranulesOfAFreeBlockNextToLiveMemoryGoBack) {
  // The freed block shares its last granule with a live allocation: every other granule of it
  // lies in whole granules and must go back (api-behaviour.md, Release).
  SOMA_REQUIRE_CPU_BACKEND(
      "gives back part of a commit; cuda gives back whole cuMemCreate "
      "allocations (32 MiB steps), here shared with the live block");
  unique_stream stream;
  unique_pool pool(0);
  const std::size_t granule = granularity_bytes(0);
  void* big = nullptr;
  void* small = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&big, 16 * granule + 1000, pool, stream));
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&small, 1000, pool, stream));
  SOMA_ASSERT_OK(somaFreeAsync(big, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_LE(pool_u64(pool, somaMemPoolAttrReservedMemCurrent), 2 * granule)
      << "only the granules under the live 1000-byte allocation may stay";
  SOMA_ASSERT_OK(somaMemPoolTrimTo(pool, 0));
  EXPECT_LE(pool_u64(pool, somaMemPoolAttrReservedMemCurrent), 2 * granule);
  SOMA_ASSERT_OK(somaFreeAsync(small, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrReservedMemCurrent), 0u);
}

TEST_F(S9_S12_Release, ReuseThenFreeEverythingLeavesNothingReserved) {
  // Found by the model test (seed 1): a block reused at the same address, then a release while
  // a neighbour is live, then the last free. Every byte must come back.
  unique_stream stream;
  SOMA_ASSERT_OK(somaDeviceSynchronize());
  const std::size_t committed_at_start = committed_bytes(0);
  {
    unique_pool pool(0);
    void* a = nullptr;
    void* b = nullptr;
    void* c = nullptr;
    void* d = nullptr;
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&a, 14861, pool, stream));
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&b, 53945, pool, stream));
    SOMA_ASSERT_OK(somaFreeAsync(b, stream));
    SOMA_ASSERT_OK(somaFreeAsync(a, stream));
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&c, 300104, pool, stream));
    SOMA_ASSERT_OK(somaFreeAsync(c, stream));
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&d, 1009, pool, stream));
    SOMA_ASSERT_OK(somaStreamSynchronize(stream));
    SOMA_ASSERT_OK(somaFreeAsync(d, stream));
    SOMA_ASSERT_OK(somaStreamSynchronize(stream));
    EXPECT_EQ(pool_u64(pool, somaMemPoolAttrUsedMemCurrent), 0u);
    EXPECT_EQ(pool_u64(pool, somaMemPoolAttrReservedMemCurrent), 0u)
        << "everything was freed and synchronized at threshold 0";
    SOMA_ASSERT_OK(somaMemPoolTrimTo(pool, 0));
    EXPECT_EQ(pool_u64(pool, somaMemPoolAttrReservedMemCurrent), 0u);
  }  // pool destroyed
  SOMA_ASSERT_OK(somaDeviceSynchronize());
  EXPECT_EQ(committed_bytes(0), committed_at_start) << "device memory was lost";
}

TEST_F(S9_S12_Release, IncompleteFreeIsNotReleasedBySynchronizingAnotherStream) {
  unique_stream freeing;
  unique_stream other;
  unique_pool pool(0);
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, 4 * MiB, pool, freeing));
  const std::uint64_t reserved = pool_u64(pool, somaMemPoolAttrReservedMemCurrent);
  stream_gate gate;
  SOMA_ASSERT_OK(gate.hold(freeing));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, freeing));
  SOMA_ASSERT_OK(somaStreamSynchronize(other));
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrReservedMemCurrent), reserved)
      << "memory whose free has not run was released";
  gate.open();
  SOMA_ASSERT_OK(somaStreamSynchronize(freeing));
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrReservedMemCurrent), 0u);
}

TEST_F(S9_S12_Release, DefaultPoolReleasesToo) {
  unique_stream stream;
  const somaMemPool_t pool = default_pool(0);
  SOMA_ASSERT_OK(somaDeviceSynchronize());
  const std::size_t committed_at_start = committed_bytes(0);
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocAsync(&pointer, 16 * MiB, stream));
  EXPECT_GE(committed_bytes(0), committed_at_start + 16 * MiB);
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_EQ(committed_bytes(0), committed_at_start);
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrReservedMemCurrent), 0u);
}

// ---- TrimTo ---------------------------------------------------------------------------------

struct cached_pool {
  unique_stream stream;
  unique_pool pool{0};

  /// Leaves `bytes` of completed, cached frees in the pool (threshold at max).
  void cache(std::size_t bytes) {
    SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
    void* pointer = nullptr;
    SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, bytes, pool, stream));
    SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
    SOMA_ASSERT_OK(somaStreamSynchronize(stream));
    ASSERT_GE(reserved(), bytes);
  }

  std::uint64_t reserved() const { return pool_u64(pool, somaMemPoolAttrReservedMemCurrent); }
};

TEST_F(S9_Trim, TrimToZeroReleasesAllCompletedFrees) {
  cached_pool setup;
  ASSERT_NO_FATAL_FAILURE(setup.cache(16 * MiB));
  const std::size_t committed_before = committed_bytes(0);
  SOMA_ASSERT_OK(somaMemPoolTrimTo(setup.pool, 0));
  EXPECT_EQ(setup.reserved(), 0u);
  EXPECT_LE(committed_bytes(0) + 16 * MiB, committed_before);
}

TEST_F(S9_Trim, TrimToKeepsAtLeastTheRequestedBytes) {
  // cudaMemPoolTrimTo: "the pool will be guaranteed to have at least minBytesToKeep bytes
  // reserved after the operation". What goes back goes in whole release units (cpu: granules,
  // so exactly `keep` stays; cuda: whole commits of 32 MiB, so a commit stays whole).
  cached_pool setup;
  ASSERT_NO_FATAL_FAILURE(setup.cache(16 * MiB));
  const std::uint64_t before = setup.reserved();
  const std::uint64_t keep = 6 * MiB;
  SOMA_ASSERT_OK(somaMemPoolTrimTo(setup.pool, keep));
  const std::uint64_t reserved = setup.reserved();
  EXPECT_GE(reserved, keep);
  EXPECT_LE(reserved, before);
  EXPECT_EQ(reserved % granularity_bytes(0), 0u);
  if (on_cpu_backend()) {
    EXPECT_EQ(reserved, keep);
  }
}

TEST_F(S9_Trim, TrimAboveReservedIsANoOp) {
  cached_pool setup;
  ASSERT_NO_FATAL_FAILURE(setup.cache(4 * MiB));
  const std::uint64_t reserved = setup.reserved();
  SOMA_ASSERT_OK(somaMemPoolTrimTo(setup.pool, reserved + 64 * MiB));
  EXPECT_EQ(setup.reserved(), reserved);
}

TEST_F(S9_Trim, TrimKeepsLiveMemoryAndItsContents) {
  cached_pool setup;
  SOMA_ASSERT_OK(set_pool_u64(setup.pool, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
  constexpr std::size_t live_size = 3 * MiB;
  void* live = nullptr;
  void* freed = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&freed, 5 * MiB, setup.pool, setup.stream));
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&live, live_size, setup.pool, setup.stream));
  SOMA_ASSERT_OK(somaMemsetAsync(live, 0x77, live_size, setup.stream));
  SOMA_ASSERT_OK(somaFreeAsync(freed, setup.stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(setup.stream));
  SOMA_ASSERT_OK(somaMemPoolTrimTo(setup.pool, 0));
  const std::uint64_t reserved = setup.reserved();
  EXPECT_GE(reserved, live_size);
  if (on_cpu_backend()) {  // cuda: both blocks share one commit, which goes back whole only
    EXPECT_LT(reserved, live_size + 5 * MiB);
  }
  EXPECT_EQ(pool_u64(setup.pool, somaMemPoolAttrUsedMemCurrent), live_size);
  const host_buffer bytes = read_back(live, live_size, setup.stream);
  EXPECT_EQ(bytes.count_not(0x77), 0u);
  SOMA_ASSERT_OK(somaFreeAsync(live, setup.stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(setup.stream));
  SOMA_ASSERT_OK(somaMemPoolTrimTo(setup.pool, 0));
  EXPECT_EQ(setup.reserved(), 0u);
}

TEST_F(S9_Trim, TrimLeavesFreesNotKnownCompleteAlone) {
  cached_pool setup;
  SOMA_ASSERT_OK(set_pool_u64(setup.pool, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
  constexpr std::size_t size = 4 * MiB;
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, size, setup.pool, setup.stream));
  stream_gate gate;
  SOMA_ASSERT_OK(gate.hold(setup.stream));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, setup.stream));
  SOMA_ASSERT_OK(somaMemPoolTrimTo(setup.pool, 0));
  EXPECT_GE(setup.reserved(), size) << "trim released memory whose free had not run";
  gate.open();
  SOMA_ASSERT_OK(somaStreamSynchronize(setup.stream));
  SOMA_ASSERT_OK(somaMemPoolTrimTo(setup.pool, 0));
  EXPECT_EQ(setup.reserved(), 0u);
}

}  // namespace

// ---- compaction before growth (S9, soma's own attribute) --------------------------------------

namespace {

using namespace soma_test;

class S9_Compaction : public capi_test {};

TEST_F(S9_Compaction, AttributeIsOffByDefaultAndTakesZeroOrOne) {
  unique_pool pool(0);
  EXPECT_EQ(pool_int(pool, somaMemPoolAttrCompactBeforeGrowth), 0);
  SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolAttrCompactBeforeGrowth, 1));
  EXPECT_EQ(pool_int(pool, somaMemPoolAttrCompactBeforeGrowth), 1);
  EXPECT_EQ(set_pool_int(pool, somaMemPoolAttrCompactBeforeGrowth, 2), somaErrorInvalidValue);
  EXPECT_TRUE(contains(last_message(), "0 or 1")) << last_message();
  EXPECT_EQ(pool_int(pool, somaMemPoolAttrCompactBeforeGrowth), 1)
      << "a refused set changes nothing";
}

/// Fragments a pool: eight blocks of four granules with a live pin of pin_bytes after each, then
/// the blocks are freed; finally a block of 24 granules is allocated, which neither a hole nor
/// the slack a growth step leaves at the end (cuda: up to 32 MiB) fits. A pool that remaps before
/// growth places small pins (half a granule or less) apart from the blocks: larger pins fragment
/// it. Returns the pool's reserved bytes after that allocation; the pins keep their bytes.
std::uint64_t fragment_then_allocate_large(somaMemPool_t pool, somaStream_t stream,
                                           std::size_t pin_bytes = 1024) {
  const std::size_t granule = granularity_bytes(0);
  void* blocks[8] = {};
  void* pins[8] = {};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(somaMallocFromPoolAsync(&blocks[i], 4 * granule, pool, stream), somaSuccess);
    EXPECT_EQ(somaMallocFromPoolAsync(&pins[i], pin_bytes, pool, stream), somaSuccess);
    EXPECT_EQ(somaMemsetAsync(pins[i], 0x40 + i, pin_bytes, stream), somaSuccess);
  }
  for (void* b : blocks) EXPECT_EQ(somaFreeAsync(b, stream), somaSuccess);
  const std::size_t large_bytes = 24 * granule;
  void* large = nullptr;
  EXPECT_EQ(somaMallocFromPoolAsync(&large, large_bytes, pool, stream), somaSuccess)
      << last_message();
  EXPECT_EQ(somaMemsetAsync(large, 0x7f, large_bytes, stream), somaSuccess);
  const std::uint64_t reserved = pool_u64(pool, somaMemPoolAttrReservedMemCurrent);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(read_back(pins[i], pin_bytes, stream).count_not(static_cast<unsigned char>(0x40 + i)),
              0u)
        << "pin " << i << " lost its bytes";
    EXPECT_EQ(somaFreeAsync(pins[i], stream), somaSuccess);
  }
  EXPECT_EQ(read_back(large, large_bytes, stream).count_not(0x7f), 0u);
  EXPECT_EQ(somaFreeAsync(large, stream), somaSuccess);
  EXPECT_EQ(somaStreamSynchronize(stream), somaSuccess);
  return reserved;
}

TEST_F(S9_Compaction, FragmentedFreeMemoryGoesBackBeforeThePoolGrows) {
  unique_stream stream;
  unique_pool plain(0);
  unique_pool compacting(0);
  // Remapping before growth would serve the large block from the holes: compaction is measured
  // here on its own (the default, instead of failing, does not act while the pool can grow).
  for (somaMemPool_t p : {plain.get(), compacting.get()}) {
    SOMA_ASSERT_OK(set_pool_u64(p, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
    SOMA_ASSERT_OK(set_pool_int(p, somaMemPoolAttrRemapFreeMemory, 0));
  }
  SOMA_ASSERT_OK(set_pool_int(compacting, somaMemPoolAttrCompactBeforeGrowth, 1));
  const std::uint64_t grown = fragment_then_allocate_large(plain, stream);
  const std::uint64_t compacted = fragment_then_allocate_large(compacting, stream);
  const std::size_t granule = granularity_bytes(0);
  EXPECT_LT(compacted, grown) << "the holes' granules went back before growing";
  // What stays: the pins' granules and the large block, plus at most one growth step of slack
  // (cuda grows in 32 MiB steps).
  EXPECT_LE(compacted, 8 * granule + 24 * granule + std::max<std::size_t>(32 * MiB, 24 * granule));
  EXPECT_EQ(pool_u64(compacting, somaMemPoolAttrUsedMemCurrent), 0u);
}

// S9, soma's own: the holes' whole granules, mapped again as one range, serve the large block
// with no growth and no synchronize; the pins keep their bytes (fragment_then_allocate_large
// checks) and the pool reserves what it held before the large block.
TEST_F(S9_Compaction, RemappingServesTheLargeBlockFromTheHolesWithoutGrowing) {
  unique_stream stream;
  unique_pool plain(0);
  unique_pool remapping(0);
  for (somaMemPool_t p : {plain.get(), remapping.get()})
    SOMA_ASSERT_OK(set_pool_u64(p, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
  SOMA_ASSERT_OK(set_pool_int(plain, somaMemPoolAttrRemapFreeMemory, 0));
  EXPECT_EQ(pool_int(remapping, somaMemPoolAttrRemapFreeMemory), 2) << "instead of failing";
  SOMA_ASSERT_OK(set_pool_int(remapping, somaMemPoolAttrRemapFreeMemory, 1));
  // Pins of more than half a granule: the remapping pool places them among the blocks too.
  const std::size_t granule = granularity_bytes(0);
  const std::size_t pin_bytes = granule / 2 + 1024;
  const std::uint64_t grown = fragment_then_allocate_large(plain, stream, pin_bytes);
  const std::uint64_t remapped = fragment_then_allocate_large(remapping, stream, pin_bytes);
  EXPECT_LT(remapped, grown);
  // The eight blocks and pins, plus at most one growth step of slack (cuda: 32 MiB).
  EXPECT_LE(remapped, 33 * granule + std::max<std::size_t>(32 * MiB, 24 * granule));
  // cpu grows a granule at a time: exactly the large block remaps. cuda grows in 32 MiB steps,
  // so the fragmenting allocations before it take other paths, and one of them remapped too
  // (3 granules, seen on an H200): at least the large block's 24 granules are remapped.
  if (on_cpu_backend()) {
    EXPECT_EQ(pool_u64(remapping, somaMemPoolAttrRemapCount), 1u);
    EXPECT_EQ(pool_u64(remapping, somaMemPoolAttrRemappedBytes), 24 * granule);
  } else {
    EXPECT_GE(pool_u64(remapping, somaMemPoolAttrRemapCount), 1u);
    EXPECT_GE(pool_u64(remapping, somaMemPoolAttrRemappedBytes), 24 * granule);
  }
  EXPECT_EQ(pool_u64(plain, somaMemPoolAttrRemapCount), 0u);
  EXPECT_EQ(pool_u64(remapping, somaMemPoolAttrUsedMemCurrent), 0u);
}

// S9, soma's own: a pool that remaps before growth serves small requests (half a granule or
// less) from granules apart from large ones. The pins then fragment nothing: the freed blocks lie
// end to end, one hole serves the large block, and the pool holds the blocks' granules and one
// granule of pins, with no remap and no synchronize.
TEST_F(S9_Compaction, SmallPinsLieApartSoTheLargeBlockFindsOneHole) {
  unique_stream stream;
  unique_pool remapping(0);
  SOMA_ASSERT_OK(set_pool_u64(remapping, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
  SOMA_ASSERT_OK(set_pool_int(remapping, somaMemPoolAttrRemapFreeMemory, 1));
  const std::uint64_t reserved = fragment_then_allocate_large(remapping, stream);
  const std::size_t granule = granularity_bytes(0);
  EXPECT_EQ(reserved, 32 * granule + granule) << "eight blocks of four granules, and the pins'";
  EXPECT_EQ(pool_u64(remapping, somaMemPoolAttrRemapCount), 0u);
  EXPECT_EQ(pool_u64(remapping, somaMemPoolAttrUsedMemCurrent), 0u);
}

TEST_F(S9_Compaction, TheRemapAttributeTakesZeroOneOrTwoAndItsCountsAreReadOnly) {
  unique_pool pool(0);
  EXPECT_EQ(pool_int(pool, somaMemPoolAttrRemapFreeMemory), 2) << "default: instead of failing";
  for (int bad : {3, -1}) {
    EXPECT_EQ(set_pool_int(pool, somaMemPoolAttrRemapFreeMemory, bad), somaErrorInvalidValue);
    EXPECT_TRUE(contains(last_message(), "0 (never), 1 (before growth) or 2")) << last_message();
    EXPECT_EQ(pool_int(pool, somaMemPoolAttrRemapFreeMemory), 2) << "a refused set changes nothing";
  }
  for (int mode : {0, 1, 2}) {
    SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolAttrRemapFreeMemory, mode));
    EXPECT_EQ(pool_int(pool, somaMemPoolAttrRemapFreeMemory), mode);
  }
  for (somaMemPoolAttr counter :
       {somaMemPoolAttrRemapCount, somaMemPoolAttrRemappedBytes, somaMemPoolAttrRemapKeptBytes}) {
    EXPECT_EQ(set_pool_u64(pool, counter, 0), somaErrorInvalidValue);
    EXPECT_TRUE(contains(last_message(), "read-only")) << last_message();
    EXPECT_EQ(pool_u64(pool, counter), 0u);
  }
}

TEST_F(S9_Compaction, AnIncompleteFreeOfAnotherStreamIsNeverGivenBack) {
  // Compaction synchronizes only the allocating stream: another stream's pending free stays.
  unique_stream allocating;
  unique_stream other;
  unique_pool pool(0);
  SOMA_ASSERT_OK(set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, UINT64_MAX));
  SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolAttrCompactBeforeGrowth, 1));
  SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolReuseAllowOpportunistic, 0));
  SOMA_ASSERT_OK(set_pool_int(pool, somaMemPoolReuseAllowInternalDependencies, 0));
  const std::size_t granule = granularity_bytes(0);
  void* held = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&held, 16 * granule, pool, other));
  stream_gate gate;
  SOMA_ASSERT_OK(gate.hold(other));
  SOMA_ASSERT_OK(somaMemsetAsync(held, 0x21, 16 * granule, other));  // still to run
  SOMA_ASSERT_OK(somaFreeAsync(held, other));
  void* large = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&large, 8 * granule, pool, allocating));
  const auto a = reinterpret_cast<std::uintptr_t>(large);
  const auto b = reinterpret_cast<std::uintptr_t>(held);
  EXPECT_TRUE(a + 8 * granule <= b || b + 16 * granule <= a)
      << "memory whose free has not run was handed out";
  EXPECT_EQ(somaStreamQuery(other), somaErrorNotReady);
  gate.open();
  SOMA_ASSERT_OK(somaStreamSynchronize(other));
  SOMA_ASSERT_OK(somaFreeAsync(large, allocating));
  SOMA_ASSERT_OK(somaStreamSynchronize(allocating));
}

}  // namespace
