// pool: the remap path (S9, S11; design §3 "Remapping"): free whole granules that do not lie in
// one piece serve a larger request by being mapped again at fresh addresses, without growth
// and without a synchronize; their old addresses are handed to nothing until the frees that let
// them go have completed. Over fake_memory_provider, which checks every mapping call.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/pool.hpp"
#include "fake_memory_provider.hpp"

namespace {

using soma::detail::address_diagnosis;
using soma::detail::block;
using soma::detail::free_stamp;
using soma::detail::pool;
using soma::detail::pool_config;
using soma::detail::remap_mode;
using soma::detail::served_by;
using soma::detail::stream_timeline;
using soma_test::fake_memory_provider;
using soma_test::fake_memory_state;

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;
constexpr std::size_t kGranule = 64 * KiB;

struct remap_pool {
  explicit remap_pool(std::size_t max_size = 64 * MiB)
      : memory(std::make_shared<fake_memory_state>()) {
    memory->granularity_bytes = kGranule;
    memory->allow_map_again = true;
    memory->allow_partial_decommit = true;
    pool_config config;
    config.name = "remap";
    config.max_size_bytes = max_size;
    config.reservation_bytes = 8 * MiB;
    the_pool = std::make_unique<pool>(config, std::make_unique<fake_memory_provider>(memory));
    the_pool->set_remap_free_memory(remap_mode::before_growth);
  }
  block* allocate(std::size_t bytes, const stream_timeline& stream) {
    auto taken = the_pool->allocate(bytes, stream);
    EXPECT_TRUE(taken.ok()) << taken.error().message();
    return taken.ok() ? taken.value() : nullptr;
  }
  void free_pending(block* b, stream_timeline& stream) {
    stream.note_enqueued();
    the_pool->free(b, stream);
  }
  /// Four live blocks of two granules each, end to end; the first and third freed on stream
  /// (pending), so the pool holds four free granules in two holes of two.
  std::vector<block*> two_holes(stream_timeline& stream) {
    std::vector<block*> blocks;
    for (int i = 0; i < 4; ++i) blocks.push_back(allocate(2 * kGranule, stream));
    free_pending(blocks[0], stream);
    free_pending(blocks[2], stream);
    return blocks;
  }

  std::shared_ptr<fake_memory_state> memory;
  std::unique_ptr<pool> the_pool;
};

bool overlaps(const block* b, std::uintptr_t address, std::size_t bytes) {
  return b->address < address + bytes && address < b->end();
}

TEST(S9_Remap, FreeGranulesInTwoHolesServeALargerRequestWithoutGrowthOrSynchronize) {
  remap_pool p;
  stream_timeline a(0);
  std::vector<block*> blocks = p.two_holes(a);
  const std::uintptr_t hole1 = blocks[0]->address;
  const std::uintptr_t hole2 = blocks[2]->address;
  const auto live_b = p.memory->backing.at(blocks[1]->address);
  const std::size_t commits = p.memory->commit_calls;
  const std::uint64_t reserved = p.the_pool->statistics().reserved_bytes;

  // Nothing is complete on a: only a remap (or growth) can serve 4 granules.
  block* big = p.allocate(4 * kGranule, a);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->how, served_by::remap);
  EXPECT_EQ(p.memory->commit_calls, commits) << "the pool grew";
  EXPECT_EQ(p.memory->map_again_calls, 1u);
  EXPECT_EQ(p.the_pool->statistics().reserved_bytes, reserved) << "physical memory counted twice";
  EXPECT_EQ(p.memory->physical_bytes(), reserved);
  EXPECT_FALSE(overlaps(big, hole1, 2 * kGranule) || overlaps(big, hole2, 2 * kGranule));
  EXPECT_TRUE(p.memory->is_committed(big->address, big->size_bytes));
  EXPECT_EQ(p.memory->backing.at(blocks[1]->address), live_b) << "a live block's memory moved";
  const auto counts = p.the_pool->remap_counts();
  EXPECT_EQ(counts.remaps, 1u);
  EXPECT_EQ(counts.remapped_bytes, 4 * kGranule);
  EXPECT_EQ(counts.retired_bytes, 4 * kGranule);
  // The old addresses are still mapped: work before the frees may use them.
  EXPECT_TRUE(p.memory->is_committed(hole1, 2 * kGranule));
  EXPECT_TRUE(p.memory->is_committed(hole2, 2 * kGranule));

  p.the_pool->free(big, a);
  p.the_pool->free(blocks[1], a);
  p.the_pool->free(blocks[3], a);
}

TEST(S9_Remap, OldAddressesAreUnmappedAndReusedOnlyOnceTheirFreesComplete) {
  remap_pool p;
  stream_timeline a(0);
  std::vector<block*> blocks = p.two_holes(a);
  const std::uintptr_t hole1 = blocks[0]->address;
  const std::uintptr_t hole2 = blocks[2]->address;
  const std::uint64_t free_position = a.enqueued_position();
  block* big = p.allocate(4 * kGranule, a);
  ASSERT_EQ(big->how, served_by::remap);

  // Further allocations grow; none may land on the retired addresses.
  std::vector<block*> more;
  for (int i = 0; i < 8; ++i) {
    more.push_back(p.allocate(kGranule, a));
    EXPECT_FALSE(overlaps(more.back(), hole1, 2 * kGranule) ||
                 overlaps(more.back(), hole2, 2 * kGranule))
        << "a retired address was handed out before its free completed";
  }
  p.the_pool->on_synchronize();  // nothing completed: the old addresses stay
  EXPECT_EQ(p.memory->unmap_alias_calls, 0u);
  EXPECT_EQ(p.the_pool->remap_counts().retired_bytes, 4 * kGranule);

  a.note_completed(free_position);
  p.the_pool->on_synchronize();
  EXPECT_EQ(p.memory->unmap_alias_calls, 2u);
  EXPECT_EQ(p.the_pool->remap_counts().retired_bytes, 0u);
  EXPECT_FALSE(p.memory->is_committed(hole1, kGranule));
  EXPECT_FALSE(p.memory->is_committed(hole2, kGranule));

  for (block* b : more) p.the_pool->free(b, a);
  p.the_pool->free(big, a);
  p.the_pool->free(blocks[1], a);
  p.the_pool->free(blocks[3], a);
}

// Old addresses that lie end to end (a free block over two commits gives a part from each) are
// unmapped in one call once their frees complete: on cuda each call costs tens of microseconds.
TEST(S9_Remap, OldAddressesEndToEndAreUnmappedInOneCall) {
  remap_pool p;
  stream_timeline a(0);
  std::vector<block*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(p.allocate(2 * kGranule, a));
  block* top = p.allocate(kGranule, a);  // live: no free block ends at unmapped space
  ASSERT_EQ(blocks[1]->address, blocks[0]->end());
  ASSERT_NE(p.memory->backing.at(blocks[0]->address).first,
            p.memory->backing.at(blocks[1]->address).first)
      << "the two blocks share a commit";
  const std::uintptr_t low_hole = blocks[0]->address;  // blocks 0 and 1: 4 granules, 2 commits
  const std::uintptr_t high_hole = blocks[3]->address;
  p.free_pending(blocks[0], a);
  p.free_pending(blocks[1], a);
  p.free_pending(blocks[3], a);
  const std::uint64_t free_position = a.enqueued_position();
  const std::size_t commits = p.memory->commit_calls;
  block* big = p.allocate(6 * kGranule, a);
  ASSERT_NE(big, nullptr);
  ASSERT_EQ(big->how, served_by::remap);
  EXPECT_EQ(p.memory->commit_calls, commits) << "the pool grew";
  EXPECT_EQ(p.the_pool->remap_counts().retired_bytes, 6 * kGranule);

  a.note_completed(free_position);
  p.the_pool->on_synchronize();
  // The two commits' old addresses in one call, the third hole (past a live block) in another.
  EXPECT_EQ(p.memory->unmap_alias_calls, 2u);
  const auto counts = p.the_pool->remap_counts();
  EXPECT_EQ(counts.retired_ranges, 3u);
  EXPECT_EQ(counts.unmap_calls, 2u);
  EXPECT_EQ(counts.retired_bytes, 0u);
  EXPECT_FALSE(p.memory->is_committed(low_hole, kGranule));
  EXPECT_FALSE(p.memory->is_committed(low_hole + 3 * kGranule, kGranule));
  EXPECT_FALSE(p.memory->is_committed(high_hole, kGranule));
  EXPECT_TRUE(p.memory->is_committed(big->address, big->size_bytes));

  p.the_pool->free(big, a);
  p.the_pool->free(blocks[2], a);
  p.the_pool->free(top, a);
}

// One remap's worth of retired old addresses: two holes of two granules mapped again as one
// block of four, their frees then completed. The live blocks are kept to be freed at the end.
block* remap_once(remap_pool& p, stream_timeline& a, std::vector<block*>& keep) {
  std::vector<block*> blocks = p.two_holes(a);
  block* big = p.allocate(4 * kGranule, a);
  EXPECT_EQ(big->how, served_by::remap);
  a.note_completed(a.enqueued_position());
  keep.insert(keep.end(), {blocks[1], blocks[3], big});
  return big;
}

// Old addresses whose frees have completed stay mapped at the next remap while few wait: on
// cuda each unmap is a driver call, and gathered they go in fewer. A synchronize that gives
// memory back unmaps them first (as does a trim).
TEST(S9_Remap, CompletedOldAddressesWaitMappedUntilManyGatherOrMemoryGoesBack) {
  remap_pool p;
  stream_timeline a(0);
  std::vector<block*> keep;
  remap_once(p, a, keep);
  remap_once(p, a, keep);
  EXPECT_EQ(p.memory->unmap_alias_calls, 0u) << "the second remap unmapped the first's addresses";
  EXPECT_EQ(p.the_pool->remap_counts().retired_bytes, 8 * kGranule);
  EXPECT_EQ(p.the_pool->statistics().reserved_bytes, p.memory->physical_bytes())
      << "retired addresses counted as memory";

  p.the_pool->on_synchronize();  // release threshold 0: memory goes back
  EXPECT_GT(p.memory->unmap_alias_calls, 0u);
  EXPECT_EQ(p.the_pool->remap_counts().retired_bytes, 0u);
  for (block* b : keep) p.the_pool->free(b, a);
}

// Old addresses whose frees a synchronize proved go at the next remap: a loop that
// synchronizes between passes grows into their space in the next pass (the sync-passes replays
// of PyTorch's conv traces: 1.022 of peak used, 1.024 with them left mapped).
TEST(S9_Remap, OldAddressesASynchronizeProvedGoAtTheNextRemap) {
  remap_pool p;
  p.the_pool->set_release_threshold_bytes(UINT64_MAX);  // the synchronize gives nothing back
  stream_timeline a(0);
  std::vector<block*> keep;
  remap_once(p, a, keep);
  a.prove_completed(a.enqueued_position());
  p.the_pool->on_synchronize();
  EXPECT_EQ(p.memory->unmap_alias_calls, 0u) << "below the threshold a synchronize unmapped";
  remap_once(p, a, keep);
  EXPECT_GT(p.memory->unmap_alias_calls, 0u);
  EXPECT_EQ(p.the_pool->remap_counts().retired_bytes, 4 * kGranule)
      << "only the last remap's old addresses may wait";
  for (block* b : keep) p.the_pool->free(b, a);
}

// Past pool::retired_ranges_kept ranges, a remap unmaps the completed ones: the mappings a
// pool holds stay bounded (the platform limits them: vm.max_map_count on Linux).
TEST(S9_Remap, PastTheBoundARemapUnmapsCompletedOldAddresses) {
  remap_pool p(256 * MiB);
  stream_timeline a(0);
  std::vector<block*> keep;
  const std::size_t rounds = pool::retired_ranges_kept / 2 + 1;  // two ranges a remap
  for (std::size_t i = 0; i < rounds; ++i) remap_once(p, a, keep);
  EXPECT_EQ(p.memory->unmap_alias_calls, 0u);
  EXPECT_EQ(p.the_pool->remap_counts().retired_bytes, rounds * 4 * kGranule);

  remap_once(p, a, keep);  // finds more than retired_ranges_kept waiting
  EXPECT_GT(p.memory->unmap_alias_calls, 0u);
  EXPECT_EQ(p.the_pool->remap_counts().retired_bytes, 4 * kGranule)
      << "only the last remap's old addresses may wait";
  for (block* b : keep) p.the_pool->free(b, a);
}

// Where no address space is left, completed old addresses give theirs back for growth rather
// than the allocation failing.
TEST(S9_Remap, WithNoAddressSpaceLeftCompletedOldAddressesServeGrowth) {
  remap_pool p;  // one reservation of 8 MiB
  stream_timeline a(0);
  std::vector<block*> blocks = p.two_holes(a);
  const std::uintptr_t hole1 = blocks[0]->address;
  const std::uintptr_t hole2 = blocks[2]->address;
  block* big = p.allocate(4 * kGranule, a);
  ASSERT_EQ(big->how, served_by::remap);
  a.note_completed(a.enqueued_position());
  // The rest of the reservation, taken whole.
  block* filler = p.allocate(8 * MiB - 12 * kGranule, a);
  ASSERT_NE(filler, nullptr);
  ASSERT_EQ(p.memory->reserve_calls, 1u) << "the filler took a reservation of its own";
  p.memory->fail_reservations = true;

  auto grown = p.the_pool->allocate(2 * kGranule, a);
  ASSERT_TRUE(grown.ok()) << grown.error().message();
  EXPECT_EQ(grown.value()->how, served_by::growth);
  EXPECT_TRUE(grown.value()->address == hole1 || grown.value()->address == hole2)
      << "growth did not take an old address given back";
  EXPECT_GT(p.memory->unmap_alias_calls, 0u);
  EXPECT_EQ(p.the_pool->remap_counts().retired_bytes, 0u);
  for (block* b : {blocks[1], blocks[3], big, filler, grown.value()}) p.the_pool->free(b, a);
}

// A free block that ends where unmapped address space begins keeps its whole granules where
// they lie, and only the other free granules are mapped again, right after it: on cuda each
// granule mapped is a driver call, and each old address an unmap later.
TEST(S9_Remap, AFreeBlockAtTheTopKeepsItsGranulesAndTheRestIsMappedAfterIt) {
  remap_pool p;
  stream_timeline a(0);
  std::vector<block*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(p.allocate(2 * kGranule, a));
  const std::uintptr_t low_hole = blocks[0]->address;
  const std::uintptr_t top_hole = blocks[3]->address;
  const auto live_b = p.memory->backing.at(blocks[1]->address);
  const auto top_backing = p.memory->backing.at(top_hole);
  p.free_pending(blocks[0], a);
  p.free_pending(blocks[3], a);
  const std::uint64_t free_position = a.enqueued_position();
  const std::size_t commits = p.memory->commit_calls;
  const std::uint64_t reserved = p.the_pool->statistics().reserved_bytes;

  block* big = p.allocate(4 * kGranule, a);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->how, served_by::remap);
  EXPECT_EQ(big->address, top_hole) << "the top free block moved";
  EXPECT_EQ(p.memory->backing.at(top_hole), top_backing);
  EXPECT_EQ(p.memory->commit_calls, commits) << "the pool grew";
  EXPECT_EQ(p.memory->map_again_calls, 1u);
  EXPECT_EQ(p.the_pool->statistics().reserved_bytes, reserved) << "physical memory counted twice";
  EXPECT_EQ(p.memory->physical_bytes(), reserved);
  EXPECT_TRUE(p.memory->is_committed(big->address, big->size_bytes));
  EXPECT_EQ(p.memory->backing.at(blocks[1]->address), live_b) << "a live block's memory moved";
  const auto counts = p.the_pool->remap_counts();
  EXPECT_EQ(counts.remaps, 1u);
  EXPECT_EQ(counts.remapped_bytes, 2 * kGranule) << "only the low hole is mapped again";
  EXPECT_EQ(counts.kept_in_place_bytes, 2 * kGranule);
  EXPECT_EQ(counts.retired_bytes, 2 * kGranule);
  EXPECT_TRUE(p.memory->is_committed(low_hole, 2 * kGranule)) << "unmapped before its free ran";

  a.note_completed(free_position);
  p.the_pool->on_synchronize();
  EXPECT_EQ(p.memory->unmap_alias_calls, 1u);
  EXPECT_FALSE(p.memory->is_committed(low_hole, kGranule));
  EXPECT_TRUE(p.memory->is_committed(big->address, big->size_bytes));
  for (block* x : {big, blocks[1], blocks[2]}) p.the_pool->free(x, a);
}

// S11: a top block that another stream's free still holds stays where it is; the stream's own
// free granules serve, with the shortfall committed after them, elsewhere.
TEST(S9_Remap, ATopBlockPendingOnAnotherStreamIsNotKept) {
  remap_pool p;
  for (int policy = 1; policy <= 3; ++policy) p.the_pool->set_reuse_policy(policy, false);
  stream_timeline a(0), b(1);
  std::vector<block*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(p.allocate(2 * kGranule, a));
  const std::uintptr_t top_hole = blocks[3]->address;
  p.free_pending(blocks[3], a);  // a's work may still use it
  p.free_pending(blocks[0], b);
  block* big = p.allocate(4 * kGranule, b);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->how, served_by::remap);
  EXPECT_FALSE(overlaps(big, top_hole, 2 * kGranule)) << "b took memory a's work may still use";
  EXPECT_EQ(p.the_pool->remap_counts().kept_in_place_bytes, 0u);
  EXPECT_EQ(p.the_pool->remap_counts().remapped_bytes, 2 * kGranule);
  for (block* x : {big, blocks[1], blocks[2]}) p.the_pool->free(x, b);
}

// S11: a granule serves another stream by remapping only where it would serve it as a block.
// For every combination of the three policies: b, unordered with a, never gets a's pending
// granules, and gets them by remapping once a's frees are complete (opportunistic) or proven.
class S9_RemapPolicies : public ::testing::TestWithParam<int> {};

TEST_P(S9_RemapPolicies, AnotherStreamRemapsOnlyGranulesItMayUse) {
  const int mask = GetParam();
  remap_pool p;
  for (int policy = 1; policy <= 3; ++policy)
    p.the_pool->set_reuse_policy(policy, (mask & (1 << (policy - 1))) != 0);
  stream_timeline a(0);
  stream_timeline b(1);
  std::vector<block*> blocks = p.two_holes(a);
  const std::uintptr_t hole1 = blocks[0]->address;
  const std::uintptr_t hole2 = blocks[2]->address;
  const std::uint64_t free_position = a.enqueued_position();

  block* pending = p.allocate(4 * kGranule, b);
  EXPECT_EQ(pending->how, served_by::growth) << "b took granules whose free on a is pending";
  EXPECT_EQ(p.memory->map_again_calls, 0u);

  a.note_completed(free_position);
  const bool opportunistic = (mask & 2) != 0;
  if (!opportunistic) a.prove_completed(free_position);
  block* later = p.allocate(4 * kGranule, b);
  EXPECT_EQ(later->how, served_by::remap);
  EXPECT_FALSE(overlaps(later, hole1, 2 * kGranule) || overlaps(later, hole2, 2 * kGranule));
  for (block* x : {pending, later}) p.the_pool->free(x, b);
  p.the_pool->free(blocks[1], a);
  p.the_pool->free(blocks[3], a);
}

INSTANTIATE_TEST_SUITE_P(EveryPolicyCombination, S9_RemapPolicies, ::testing::Range(0, 8));

// The part of a pending free block left beside the granules a remap took stays pending: it
// serves another stream no earlier than the whole block would have. (Carving once made that
// part look proven, so a thread on another stream remapped it and its old address was
// unmapped under work still running: a crash in soma_torch's thread test.)
TEST(S9_Remap, WhatARemapLeavesOfAPendingBlockStaysPending) {
  remap_pool p;
  for (int policy = 1; policy <= 3; ++policy) p.the_pool->set_reuse_policy(policy, false);
  stream_timeline a(0);
  stream_timeline b(1);
  block* small = p.allocate(kGranule, a);
  block* spacer = p.allocate(kGranule, a);
  block* large = p.allocate(2 * kGranule + 256, a);
  const std::uintptr_t tail = large->address + 2 * kGranule;
  // The rest of large's last granule stays live, so that large merges with nothing: a's own
  // neighbouring frees would otherwise serve it without a remap (merge_runs_usable_by).
  block* filler = p.allocate(kGranule - 256, a);
  ASSERT_EQ(filler->address, tail + 256);
  p.free_pending(small, a);
  p.free_pending(large, a);
  block* big = p.allocate(3 * kGranule, a);  // one granule of small, two of large
  ASSERT_EQ(big->how, served_by::remap);
  block* on_b = p.allocate(256, b);
  EXPECT_NE(on_b->address, tail) << "b got the rest of a block whose free on a is pending";
  for (block* x : {spacer, big, filler}) p.the_pool->free(x, a);
  p.the_pool->free(on_b, b);
}

// Fewer free granules than the request still serve it, with only the shortfall committed
// after them (what compaction reaches with a synchronize).
TEST(S9_Remap, TooFewFreeGranulesServeWithTheShortfallCommittedAfterThem) {
  remap_pool p;
  stream_timeline a(0);
  std::vector<block*> blocks = p.two_holes(a);
  const std::size_t commits = p.memory->commit_calls;
  const std::uint64_t reserved = p.the_pool->statistics().reserved_bytes;
  block* big = p.allocate(5 * kGranule, a);  // four free granules only
  EXPECT_EQ(big->how, served_by::remap);
  EXPECT_EQ(p.memory->commit_calls, commits + 1);
  EXPECT_EQ(p.memory->commits.back().bytes, kGranule) << "more than the shortfall committed";
  EXPECT_EQ(p.memory->commits.back().address, big->address + 4 * kGranule);
  EXPECT_EQ(p.the_pool->statistics().reserved_bytes, reserved + kGranule);
  EXPECT_EQ(p.the_pool->remap_counts().remapped_bytes, 4 * kGranule);
  EXPECT_TRUE(p.memory->is_committed(big->address, big->size_bytes));
  p.the_pool->free(big, a);
  for (int i : {1, 3}) p.the_pool->free(blocks[i], a);
}

// Free granules below a quarter of the request are left where they are: the request grows.
TEST(S9_Remap, ASliverOfTheRequestIsLeftAndThePoolGrows) {
  remap_pool p;
  stream_timeline a(0);
  std::vector<block*> blocks = p.two_holes(a);
  block* big = p.allocate(17 * kGranule, a);  // four free granules: under a quarter
  EXPECT_EQ(big->how, served_by::growth);
  EXPECT_EQ(p.memory->map_again_calls, 0u);
  p.the_pool->free(big, a);
  for (int i : {1, 3}) p.the_pool->free(blocks[i], a);
}

TEST(S9_Remap, OnlyWholeGranulesOfAHoleAreTaken) {
  remap_pool p;
  stream_timeline a(0);
  // [head: half a granule and 256 B, live][middle: to the end of granule 1][tail: granule 2]
  // [other: granule 3]. The head is a large request: a small one lies in a granule apart.
  constexpr std::size_t head_bytes = kGranule / 2 + 256;
  block* head = p.allocate(head_bytes, a);
  block* middle = p.allocate(2 * kGranule - head_bytes, a);
  block* tail = p.allocate(kGranule, a);
  block* other = p.allocate(kGranule, a);
  block* top = p.allocate(kGranule, a);  // live: no free block ends at unmapped space
  ASSERT_EQ(middle->address, head->address + head_bytes);
  const std::uintptr_t base = head->address;
  p.free_pending(middle, a);
  p.free_pending(other, a);
  // Free: 2 granules less the head, and 1 granule; whole granules: granule 1 and granule 3.
  block* two = p.allocate(2 * kGranule, a);
  EXPECT_EQ(two->how, served_by::remap);
  EXPECT_EQ(p.the_pool->remap_counts().remapped_bytes, 2 * kGranule);
  EXPECT_FALSE(overlaps(two, base, 4 * kGranule));
  // Granule 0, shared with the live head, stayed where it was, and so did its free rest.
  EXPECT_TRUE(p.memory->is_committed(base, kGranule));
  const address_diagnosis rest = p.the_pool->diagnose(base + head_bytes);
  EXPECT_EQ(rest.what, address_diagnosis::kind::freed)
      << "the free rest of a shared granule was lost";
  EXPECT_EQ(rest.block_address, base + head_bytes);
  EXPECT_EQ(rest.block_bytes, kGranule - head_bytes);
  for (block* x : {head, tail, two, top}) p.the_pool->free(x, a);
}

// A free granule may lie in two blocks: one whose free a synchronize proved, one freed on the
// stream since (on cuda every free is a point of its own). Neither block holds the granule
// whole, but the stream may use both at once (S2), so the remap finds it. Before, the pool grew
// instead: conv's trace replayed with a synchronize between passes reached 1.049 of peak used
// in three passes (bench/trace_replay --sync-passes).
TEST(S9_Remap, AGranuleFreedInAProvenAndAPendingPartIsMappedAgain) {
  remap_pool p;
  stream_timeline a(0);
  // [low: 1.5 granules, live][proven: 1 granule][pending: 1 granule][high: 1.5 granules, live]
  // [top: live, so no free block lies at the top of mapped memory to keep its granules].
  block* low = p.allocate(kGranule + kGranule / 2, a);
  block* proven = p.allocate(kGranule, a);
  block* pending = p.allocate(kGranule, a);
  block* high = p.allocate(kGranule + kGranule / 2, a);
  block* top = p.allocate(kGranule, a);
  const std::uintptr_t base = low->address;
  ASSERT_EQ(proven->address, base + kGranule + kGranule / 2);
  ASSERT_EQ(pending->address, proven->end());
  ASSERT_EQ(high->address, pending->end());
  p.free_pending(proven, a);
  a.prove_completed(a.enqueued_position());  // a synchronize
  p.free_pending(pending, a);                // a later point, not yet proven
  // Free: granule 2 whole, across the two blocks, and half of granules 1 and 3.
  const std::size_t commits_before = p.memory->commit_calls;
  const std::uint64_t reserved = p.the_pool->statistics().reserved_bytes;
  block* big = p.allocate(3 * kGranule, a);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->how, served_by::remap) << "the granule split between two free blocks was lost";
  EXPECT_EQ(p.the_pool->remap_counts().remapped_bytes, kGranule);
  EXPECT_EQ(p.the_pool->statistics().reserved_bytes, reserved + 2 * kGranule)
      << "more than the shortfall committed";
  EXPECT_EQ(p.memory->commit_calls, commits_before + 1);
  EXPECT_FALSE(overlaps(big, base + 2 * kGranule, kGranule));
  // The halves of granules 1 and 3 stay free where they were.
  EXPECT_EQ(p.the_pool->diagnose(base + kGranule + kGranule / 2).what,
            address_diagnosis::kind::freed);
  EXPECT_EQ(p.the_pool->diagnose(base + 3 * kGranule).what, address_diagnosis::kind::freed);
  for (block* x : {low, high, top, big}) p.the_pool->free(x, a);
}

// The default, instead of failing: while the pool can grow it grows; where growth fails (the
// cap), the free granules serve, with the shortfall committed, before any wait.
TEST(S9_Remap, TheDefaultRemapsOnlyWhereGrowthFails) {
  pool_config config;
  config.max_size_bytes = 64 * MiB;
  pool fresh(config, std::make_unique<fake_memory_provider>(std::make_shared<fake_memory_state>()));
  EXPECT_EQ(fresh.remap_free_memory(), remap_mode::instead_of_failing) << "the default";

  for (const bool at_cap : {false, true}) {
    remap_pool p(at_cap ? 8 * kGranule : 16 * kGranule);  // two_holes commits 8 granules
    p.the_pool->set_remap_free_memory(remap_mode::instead_of_failing);
    stream_timeline a(0);
    std::vector<block*> blocks = p.two_holes(a);
    block* big = p.allocate(4 * kGranule, a);
    ASSERT_NE(big, nullptr);
    EXPECT_EQ(big->how, at_cap ? served_by::remap : served_by::growth);
    EXPECT_EQ(p.the_pool->statistics().reserved_bytes, (at_cap ? 8 : 12) * kGranule);
    p.the_pool->free(big, a);
    for (int i : {1, 3}) p.the_pool->free(blocks[i], a);
  }
  // Where growth fails, even a sliver of the request serves: 4 free granules of 17 asked, the
  // 13 short committed, the cap (21) reached exactly.
  remap_pool p(21 * kGranule);
  p.the_pool->set_remap_free_memory(remap_mode::instead_of_failing);
  stream_timeline a(0);
  std::vector<block*> blocks = p.two_holes(a);
  block* big = p.allocate(17 * kGranule, a);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->how, served_by::remap);
  EXPECT_EQ(p.the_pool->statistics().reserved_bytes, 21 * kGranule);
  p.the_pool->free(big, a);
  for (int i : {1, 3}) p.the_pool->free(blocks[i], a);
}

// Remapping off, or memory the provider cannot map twice: the pool grows as before.
TEST(S9_Remap, OffOrMemoryThatCannotBeMappedTwiceGrows) {
  for (const bool off : {true, false}) {
    remap_pool p;
    if (off) {
      p.the_pool->set_remap_free_memory(remap_mode::never);
    } else {
      p.memory->allow_map_again = false;
    }
    stream_timeline a(0);
    std::vector<block*> blocks = p.two_holes(a);
    block* big = p.allocate(4 * kGranule, a);
    EXPECT_EQ(big->how, served_by::growth) << (off ? "remapping off" : "cannot map twice");
    EXPECT_EQ(p.memory->map_again_calls, 0u);
    p.the_pool->free(big, a);
    for (int i : {1, 3}) p.the_pool->free(blocks[i], a);
  }
}

// S9: release after remapping gives every byte back exactly once, never memory still mapped at
// a retired address (the fake fails the test on that).
TEST(S9_Remap, ReleaseAfterRemapGivesEveryPhysicalByteBackOnce) {
  remap_pool p;
  stream_timeline a(0);
  std::vector<block*> blocks = p.two_holes(a);
  block* big = p.allocate(4 * kGranule, a);
  ASSERT_EQ(big->how, served_by::remap);
  p.free_pending(big, a);
  p.free_pending(blocks[1], a);
  p.free_pending(blocks[3], a);
  a.note_completed(a.enqueued_position());
  a.prove_completed(a.enqueued_position());
  p.the_pool->trim_to(0);
  EXPECT_EQ(p.the_pool->statistics().reserved_bytes, 0u);
  EXPECT_EQ(p.memory->physical_bytes(), 0u);
  EXPECT_TRUE(p.memory->committed.empty());
  EXPECT_TRUE(p.the_pool->try_release_everything());
}

// A destroyed stream's retired addresses take the replacement stamp, as its free blocks do, so
// nothing names its timeline once it is gone.
TEST(S9_Remap, ForgottenStreamsRetiredAddressesGoAtTheNextSynchronize) {
  remap_pool p;
  stream_timeline forgotten_frees(1000);  // outlives the stream, as the device's does
  auto a = std::make_unique<stream_timeline>(0);
  std::vector<block*> blocks = p.two_holes(*a);
  block* big = p.allocate(4 * kGranule, *a);
  ASSERT_EQ(big->how, served_by::remap);
  p.the_pool->free(big, *a);
  p.the_pool->free(blocks[1], *a);
  p.the_pool->free(blocks[3], *a);
  a->note_completed(a->enqueued_position());
  p.the_pool->forget_stream(*a);
  forgotten_frees.note_enqueued();
  p.the_pool->forget_timeline(*a, free_stamp{&forgotten_frees, 1});
  a.reset();
  EXPECT_EQ(p.the_pool->remap_counts().retired_bytes, 4 * kGranule);
  forgotten_frees.note_completed(1);
  p.the_pool->on_synchronize();
  EXPECT_EQ(p.the_pool->remap_counts().retired_bytes, 0u);
}

// ---- holding large holes for large requests (pool_slow_path.cpp) ------------------------------

// A pool whose peak used was 161 MiB and which holds 97 MiB, 96 of them a free hole: room to
// grow below the peak, and a hole that only a large request should take.
struct pool_below_its_peak : remap_pool {
  explicit pool_below_its_peak(std::size_t max_size) : remap_pool(max_size) {
    hole = allocate(96 * MiB, a);
    block* top = allocate(64 * MiB, a);
    kept = allocate(1 * MiB, a);
    hole_address = hole->address;
    free_pending(top, a);
    a.note_completed(a.enqueued_position());
    a.prove_completed(a.enqueued_position());
    the_pool->trim_to(0);  // the proven top goes back; the 96 MiB and the live 1 MiB stay
    free_pending(hole, a);
  }
  stream_timeline a{0};
  block* hole = nullptr;
  block* kept = nullptr;
  std::uintptr_t hole_address = 0;
};

TEST(S9_Remap, BelowThePeakASmallRequestGrowsRatherThanSplitALargeHole) {
  pool_below_its_peak p(1024 * MiB);
  ASSERT_EQ(p.the_pool->statistics().used_high_bytes, 161 * MiB);
  const std::uint64_t reserved = p.the_pool->statistics().reserved_bytes;
  block* small = p.allocate(4 * MiB, p.a);
  ASSERT_NE(small, nullptr);
  EXPECT_TRUE(small->address < p.hole_address || small->address >= p.hole_address + 96 * MiB)
      << "the small request split the large hole";
  EXPECT_EQ(p.the_pool->statistics().reserved_bytes, reserved + 4 * MiB)
      << "growth commits the request's granules only";
  // The large request then finds its hole whole: no remap, no growth.
  const std::size_t commits = p.memory->commit_calls;
  block* large = p.allocate(96 * MiB, p.a);
  ASSERT_NE(large, nullptr);
  EXPECT_EQ(large->address, p.hole_address);
  EXPECT_EQ(p.memory->commit_calls, commits);
  EXPECT_EQ(p.the_pool->remap_counts().remaps, 0u);
  p.the_pool->free(large, p.a);
  p.the_pool->free(small, p.a);
  p.the_pool->free(p.kept, p.a);
}

TEST(S9_Remap, AtItsPeakTheLargeHoleServesSmallRequests) {
  // Growing would take reserved past peak used and its allowance: the hole is split as usual.
  remap_pool p(1024 * MiB);
  stream_timeline a(0);
  block* hole = p.allocate(96 * MiB, a);
  block* kept = p.allocate(1 * MiB, a);
  const std::uintptr_t hole_address = hole->address;
  p.free_pending(hole, a);
  const std::size_t commits = p.memory->commit_calls;
  block* small = p.allocate(4 * MiB, a);
  ASSERT_NE(small, nullptr);
  EXPECT_GE(small->address, hole_address);
  EXPECT_LT(small->address, hole_address + 96 * MiB);
  EXPECT_EQ(p.memory->commit_calls, commits);
  p.the_pool->free(small, a);
  p.the_pool->free(kept, a);
}

TEST(S9_Remap, AHeldHoleServesWhereThePoolCannotGrow) {
  // Below the peak, within the allowance, but at the pool's max size: the small request takes
  // part of the hole rather than fail.
  remap_pool p(512 * MiB);
  stream_timeline a(0);
  block* hole = p.allocate(96 * MiB, a);
  block* kept = p.allocate(1 * MiB, a);
  block* top = p.allocate(415 * MiB, a);  // reserved and peak used: the max size
  const std::uintptr_t hole_address = hole->address;
  p.free_pending(top, a);
  a.note_completed(a.enqueued_position());
  a.prove_completed(a.enqueued_position());
  p.the_pool->trim_to(510 * MiB);  // 2 MiB of the top go back
  ASSERT_EQ(p.the_pool->statistics().reserved_bytes, 510 * MiB);
  p.free_pending(hole, a);
  block* small = p.allocate(3 * MiB, a);  // 513 MiB would pass the max size
  ASSERT_NE(small, nullptr);
  EXPECT_GE(small->address, hole_address);
  EXPECT_LT(small->address, hole_address + 96 * MiB);
  EXPECT_EQ(p.the_pool->statistics().reserved_bytes, 510 * MiB);
  p.the_pool->free(small, a);
  p.the_pool->free(kept, a);
}

}  // namespace

// ---- small requests apart (a pool that remaps before growth) ----------------------------------

// A small request (half a granule or less) takes no part of a large free block: it grows a
// granule of its own, and the large hole stays whole for the next large request.
TEST(S9_SmallApart, ASmallRequestLeavesALargeHoleWhole) {
  remap_pool p;
  stream_timeline a(0);
  block* big = p.allocate(4 * kGranule, a);
  const std::uintptr_t hole = big->address;
  p.free_pending(big, a);
  block* small = p.allocate(kGranule / 2, a);  // half a granule: still small
  ASSERT_NE(small, nullptr);
  EXPECT_TRUE(small->small_region);
  EXPECT_FALSE(overlaps(small, hole, 4 * kGranule)) << "a small block split the large hole";
  block* again = p.allocate(4 * kGranule, a);
  EXPECT_EQ(again->address, hole);
  EXPECT_EQ(p.the_pool->remap_counts().remaps, 0u);
  EXPECT_EQ(p.memory->commit_calls, 2u) << "the large block's granules and the small one's";
  block* large = p.allocate(kGranule / 2 + 256, a);  // just over half: large, new growth
  EXPECT_FALSE(large->small_region);
  for (block* x : {small, again, large}) p.the_pool->free(x, a);
}

// Small blocks share their granules: the second one is cut from the first one's granule.
TEST(S9_SmallApart, SmallBlocksShareAGranule) {
  remap_pool p;
  stream_timeline a(0);
  block* first = p.allocate(1 * KiB, a);
  block* second = p.allocate(8 * KiB, a);
  EXPECT_EQ(second->address, first->address + 1 * KiB);
  EXPECT_EQ(p.memory->commit_calls, 1u);
  for (block* x : {first, second}) p.the_pool->free(x, a);
}

// Where the pool cannot grow, a free granule of the large region moves to the small one where it
// lies, rather than the small block splitting the hole anywhere: the rest of the hole stays whole
// and the moved granule never merges back into it.
TEST(S9_SmallApart, AtTheCapAFreeGranuleMovesToTheSmallRegion) {
  remap_pool p(4 * kGranule);
  stream_timeline a(0);
  block* big = p.allocate(4 * kGranule, a);
  const std::uintptr_t base = big->address;
  p.free_pending(big, a);
  block* small = p.allocate(1 * KiB, a);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(small->address, base);
  EXPECT_TRUE(small->small_region);
  EXPECT_EQ(p.memory->commit_calls, 1u) << "the pool grew past its cap";
  block* rest = p.allocate(3 * kGranule, a);
  ASSERT_NE(rest, nullptr);
  EXPECT_EQ(rest->address, base + kGranule);
  p.free_pending(small, a);
  p.free_pending(rest, a);
  // The two regions' free blocks lie end to end but stay two: the whole block takes a remap.
  block* whole = p.allocate(4 * kGranule, a);
  ASSERT_NE(whole, nullptr);
  EXPECT_EQ(whole->how, served_by::remap) << "the small region's granule merged with the large";
  EXPECT_FALSE(whole->small_region);
  EXPECT_EQ(p.the_pool->statistics().reserved_bytes, 4 * kGranule);
  p.the_pool->free(whole, a);
}

// With no free whole granule and no growth, a small request takes a piece of the large region
// after all rather than fail.
TEST(S9_SmallApart, WithNoGranuleToMoveTheRegionsMixRatherThanFail) {
  remap_pool p(4 * kGranule);
  stream_timeline a(0);
  block* big = p.allocate(4 * kGranule - 1 * KiB, a);
  ASSERT_NE(big, nullptr);
  block* small = p.allocate(512, a);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(small->address, big->end());
  EXPECT_FALSE(small->small_region);
  EXPECT_EQ(p.the_pool->statistics().reserved_bytes, 4 * kGranule);
  for (block* x : {big, small}) p.the_pool->free(x, a);
}

// A moved granule never merges back, so its commit can go back only a part at a time. Where the
// platform gives a commit back whole only (cuda's whole commits), no granule moves: the small
// block takes a piece of the large region, and once everything is free the commit goes back.
// (Before, the granule moved and the commit stayed reserved for good.)
TEST(S9_SmallApart, NoGranuleMovesOutOfACommitGivenBackWholeOnly) {
  remap_pool p(4 * kGranule);
  p.memory->allow_partial_decommit = false;
  stream_timeline a(0);
  block* big = p.allocate(4 * kGranule, a);
  ASSERT_NE(big, nullptr);
  p.free_pending(big, a);
  block* small = p.allocate(1 * KiB, a);
  ASSERT_NE(small, nullptr);
  EXPECT_FALSE(small->small_region) << "a granule of a whole commit moved to the small region";
  p.free_pending(small, a);
  const std::uint64_t position = a.note_enqueued();
  a.note_completed(position);
  a.prove_completed(position);
  EXPECT_TRUE(p.the_pool->try_release_everything()) << "the commit could not go back";
  EXPECT_EQ(p.the_pool->statistics().reserved_bytes, 0u);
}

// A pool that does not remap before growth places small and large requests together, as before.
TEST(S9_SmallApart, OnlyAPoolThatRemapsBeforeGrowthServesThemApart) {
  remap_pool p;
  p.the_pool->set_remap_free_memory(remap_mode::instead_of_failing);
  stream_timeline a(0);
  block* big = p.allocate(4 * kGranule, a);
  const std::uintptr_t hole = big->address;
  p.free_pending(big, a);
  block* small = p.allocate(1 * KiB, a);
  EXPECT_EQ(small->address, hole);
  EXPECT_FALSE(small->small_region);
  p.the_pool->free(small, a);
}

// ---- large requests at the lowest address (a pool that remaps before growth) ------------------

namespace {

// Two free blocks a large request fits, the larger one lower: A (four granules) and B (two), each
// followed by a live granule so that neither merges with anything. Both freed on a.
struct two_fits : remap_pool {
  explicit two_fits(remap_mode mode) {
    the_pool->set_remap_free_memory(mode);
    low = allocate(4 * kGranule, a);
    separators.push_back(allocate(kGranule, a));
    high = allocate(2 * kGranule, a);
    separators.push_back(allocate(kGranule, a));
    low_address = low->address;
    high_address = high->address;
    free_pending(low, a);
    free_pending(high, a);
  }
  ~two_fits() {
    for (block* x : separators) the_pool->free(x, a);
  }
  stream_timeline a{0};
  block* low = nullptr;
  block* high = nullptr;
  std::uintptr_t low_address = 0;
  std::uintptr_t high_address = 0;
  std::vector<block*> separators;
};

}  // namespace

// Best fit would take B, the smallest block that fits; the pool takes A, the lowest. (Long-lived
// blocks then gather low and the free memory above them stays in few large pieces:
// docs/benchmarks.md, "Large requests at the lowest address".)
TEST(S9_LowestFit, ALargeRequestTakesTheLowestFittingBlockNotTheSmallest) {
  two_fits p(remap_mode::before_growth);
  ASSERT_LT(p.low_address, p.high_address);
  const std::size_t commits = p.memory->commit_calls;
  block* taken = p.allocate(kGranule + kGranule / 2, p.a);  // a size no cache bin holds
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(taken->address, p.low_address);
  EXPECT_EQ(p.memory->commit_calls, commits) << "the pool grew where a free block fit";
  p.the_pool->free(taken, p.a);
}

// A pool that does not remap before growth keeps best fit for every request.
TEST(S9_LowestFit, APoolThatDoesNotRemapBeforeGrowthKeepsBestFit) {
  two_fits p(remap_mode::instead_of_failing);
  block* taken = p.allocate(kGranule + kGranule / 2, p.a);
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(taken->address, p.high_address);
  p.the_pool->free(taken, p.a);
}

// Small requests keep best fit in their own region: of two free small blocks the 3 KiB request
// fits, it takes the smaller, higher one.
TEST(S9_LowestFit, ASmallRequestStillTakesTheSmallestFit) {
  remap_pool p;
  stream_timeline a(0);
  block* larger = p.allocate(8 * KiB, a);
  block* first_separator = p.allocate(1 * KiB, a);
  block* smaller = p.allocate(4 * KiB, a);
  block* second_separator = p.allocate(1 * KiB, a);
  ASSERT_TRUE(larger->small_region && smaller->small_region);
  ASSERT_LT(larger->address, smaller->address);
  const std::uintptr_t smaller_address = smaller->address;
  p.free_pending(larger, a);
  p.free_pending(smaller, a);
  block* taken = p.allocate(3 * KiB, a);
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(taken->address, smaller_address);
  for (block* x : {taken, first_separator, second_separator}) p.the_pool->free(x, a);
}

// The search is bounded: it looks at the smallest lowest_fit_candidates blocks that fit, so a
// lower block larger than all of them is not found, and the lowest of them serves.
TEST(S9_LowestFit, TheSearchLooksAtABoundedNumberOfFits) {
  remap_pool p;
  stream_timeline a(0);
  std::vector<block*> live;
  block* lowest = p.allocate(4 * kGranule, a);
  live.push_back(p.allocate(kGranule, a));
  std::vector<block*> fits;
  for (std::size_t i = 0; i < pool::lowest_fit_candidates; ++i) {
    fits.push_back(p.allocate(2 * kGranule, a));
    live.push_back(p.allocate(kGranule, a));
  }
  const std::uintptr_t lowest_address = lowest->address;
  const std::uintptr_t first_fit_address = fits.front()->address;
  ASSERT_LT(lowest_address, first_fit_address);
  p.free_pending(lowest, a);
  for (block* x : fits) p.free_pending(x, a);
  block* taken = p.allocate(kGranule + kGranule / 2, a);
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(taken->address, first_fit_address)
      << "the search went past " << pool::lowest_fit_candidates << " fits";
  p.the_pool->free(taken, a);
  for (block* x : live) p.the_pool->free(x, a);
}
