// free_index: best fit by size, coalescing of interchangeable neighbours (S3, S9, S11).
#include "core/free_index.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <vector>

namespace {

using soma::detail::block;
using soma::detail::block_state;
using soma::detail::free_index;
using soma::detail::free_stamp;
using soma::detail::stream_timeline;

constexpr std::uintptr_t kBase = 0x200000000000;

class FreeIndex : public ::testing::Test {
 protected:
  ~FreeIndex() override {
    for (auto& [address, b] : all_blocks_) delete b;
  }

  /// Adjacent blocks starting at kBase (or after the previous run), linked in address order,
  /// registered in the block map, all detached (as a pool hands them to the index).
  std::vector<block*> make_run(const std::vector<std::size_t>& sizes, std::uintptr_t base = kBase) {
    std::vector<block*> run;
    std::uintptr_t address = base;
    for (std::size_t size : sizes) {
      auto* b = new block();
      b->address = address;
      b->size_bytes = size;
      if (!run.empty()) {
        b->previous_adjacent = run.back();
        run.back()->next_adjacent = b;
      }
      all_blocks_.emplace(address, b);
      run.push_back(b);
      address += size;
    }
    return run;
  }

  /// Each block freed on a_ at its position (a_ stands at 7), then indexed, in that order.
  void index_pending_on_a(const std::vector<block*>& blocks,
                          const std::vector<std::uint64_t>& positions) {
    while (a_.enqueued_position() < 7) a_.note_enqueued();
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      blocks[i]->stamp = free_stamp{&a_, positions[i]};
      index_.insert(blocks[i]);
    }
  }

  soma::detail::node_reserve nodes_;  // the nodes of the maps and sets below
  soma::detail::block_store store_;   // merged blocks go back here (deleted with the fixture)
  soma::detail::block_map all_blocks_{
      std::less<>{}, soma::detail::reserve_allocator<soma::detail::block_map::value_type>(nodes_)};
  free_index index_{all_blocks_, store_, nodes_};
  stream_timeline a_{0};
  stream_timeline b_{1};
};

TEST_F(FreeIndex, S3_InsertMergesWithIndexedNeighbours) {
  auto run = make_run({256, 512, 1024});
  index_.insert(run[0]);
  index_.insert(run[2]);
  EXPECT_EQ(index_.block_count(), 2u);
  EXPECT_EQ(index_.free_bytes(), 1280u);
  block* merged = index_.insert(run[1]);  // run[1] and run[2] are absorbed
  EXPECT_EQ(merged->address, kBase);
  EXPECT_EQ(merged->size_bytes, 1792u);
  EXPECT_EQ(merged->current_state(), block_state::indexed);
  EXPECT_EQ(merged->next_adjacent, nullptr);
  EXPECT_EQ(index_.block_count(), 1u);
  EXPECT_EQ(index_.free_bytes(), 1792u);
  ASSERT_EQ(all_blocks_.size(), 1u);
  EXPECT_EQ(all_blocks_.begin()->second, merged);
}

TEST_F(FreeIndex, S3_NoMergeWithLiveOrDetachedNeighbours) {
  auto run = make_run({256, 256, 256});
  run[0]->set_state(block_state::live);
  // run[2] stays detached (being carved): not mergeable.
  block* b = index_.insert(run[1]);
  EXPECT_EQ(b, run[1]);
  EXPECT_EQ(b->size_bytes, 256u);
  EXPECT_EQ(index_.block_count(), 1u);
  EXPECT_EQ(all_blocks_.size(), 3u);
}

TEST_F(FreeIndex, S11_PendingFreesOfDifferentStreamsDoNotMerge) {
  a_.note_enqueued();
  b_.note_enqueued();
  auto run = make_run({256, 256, 256});
  run[0]->stamp = free_stamp{&a_, 1};
  run[1]->stamp = free_stamp{&b_, 1};
  run[2]->stamp = {};  // proven free memory
  index_.insert(run[0]);
  index_.insert(run[1]);
  index_.insert(run[2]);
  EXPECT_EQ(index_.block_count(), 3u);
  EXPECT_EQ(index_.free_bytes(), 768u);
}

// Pending frees of one stream at different positions stay apart: one stamp for both would
// hide the earlier free from a stream that may already use it (its clock covers 3, say).
TEST_F(FreeIndex, S11_PendingFreesOfOneStreamAtDifferentPositionsStayApart) {
  for (int i = 0; i < 7; ++i) a_.note_enqueued();
  auto run = make_run({256, 256});
  run[0]->stamp = free_stamp{&a_, 7};
  run[1]->stamp = free_stamp{&a_, 3};
  index_.insert(run[0]);
  index_.insert(run[1]);
  EXPECT_EQ(index_.block_count(), 2u);
  // Proving 3 makes the earlier free usable by another stream at once, and only it.
  a_.prove_completed(3);
  index_.promote(/*only_proven=*/true);
  EXPECT_EQ(index_.take_best_fit(256, &b_), run[1]);
  EXPECT_EQ(index_.take_best_fit(256, &b_), nullptr);
  a_.prove_completed(7);
  EXPECT_EQ(index_.take_best_fit(256, &b_), run[0]);
}

// S2: a stream that would otherwise grow merges the runs it may use at once: its own frees at
// different points and proven ones beside them, under its latest stamp; another stream's
// pending free stays apart.
TEST_F(FreeIndex, S2_RunsAStreamMayUseMergeUnderItsLatestFree) {
  for (int i = 0; i < 7; ++i) a_.note_enqueued();
  for (int i = 0; i < 9; ++i) b_.note_enqueued();
  b_.prove_completed(4);
  auto run = make_run({256, 256, 256, 256, 256});
  run[0]->stamp = free_stamp{&b_, 4};  // proven
  run[1]->stamp = free_stamp{&a_, 7};
  run[2]->stamp = free_stamp{&a_, 3};
  run[4]->stamp = free_stamp{&b_, 9};  // pending on another stream
  for (block* b : run) index_.insert(b);
  EXPECT_EQ(index_.block_count(), 5u) << "different stamps: nothing merged at insert";
  EXPECT_FALSE(index_.merge_runs_usable_by(&a_, 2048)) << "no run of a's serves 2048 bytes";
  EXPECT_EQ(index_.block_count(), 5u) << "a run that cannot serve the request stays apart";
  ASSERT_TRUE(index_.merge_runs_usable_by(&a_, 1024));
  EXPECT_EQ(index_.block_count(), 2u) << "run[0] to run[3] as one; b's pending run[4] apart";
  EXPECT_FALSE(index_.merge_runs_usable_by(&b_, 256)) << "b may not use a's pending block";
  EXPECT_EQ(index_.take_best_fit(1024, &b_), nullptr) << "hidden from b until a's free is known";
  block* merged = index_.take_best_fit(1024, &a_);
  ASSERT_NE(merged, nullptr);
  EXPECT_EQ(merged->address, kBase);
  EXPECT_EQ(merged->size_bytes, 1024u);
  EXPECT_EQ(merged->stamp.timeline, &a_);
  EXPECT_EQ(merged->stamp.position, 7u);
  EXPECT_FALSE(index_.merge_runs_usable_by(&a_, 256));
}

// Only the smallest run that serves the request merges: every other run keeps its pieces
// usable by other streams as they were.
TEST_F(FreeIndex, S2_OnlyTheSmallestRunThatServesMerges) {
  auto big = make_run({512, 512});
  auto small = make_run({256, 256}, kBase + 4096);
  index_pending_on_a({big[0], big[1], small[0], small[1]}, {2, 5, 3, 7});
  ASSERT_TRUE(index_.merge_runs_usable_by(&a_, 512));
  EXPECT_EQ(index_.block_count(), 3u);
  block* merged = all_blocks_.at(kBase + 4096);
  EXPECT_EQ(merged->size_bytes, 512u) << "the 512-byte run merged";
  EXPECT_EQ(merged->stamp.position, 7u);
  EXPECT_EQ(all_blocks_.at(kBase)->size_bytes, 512u) << "the 1024-byte run stays in pieces";
  EXPECT_EQ(all_blocks_.at(kBase + 512)->stamp.position, 5u);
}

// Two runs of the same size: the lower one merges, whatever order the blocks' own memory has
// (the pending set is ordered by it, which the history of merges decides).
TEST_F(FreeIndex, S2_OfTwoRunsOfOneSizeTheLowerMerges) {
  auto high = make_run({256, 256}, kBase + 4096);
  auto low = make_run({256, 256});
  index_pending_on_a({high[0], high[1], low[0], low[1]}, {2, 5, 3, 7});
  ASSERT_TRUE(index_.merge_runs_usable_by(&a_, 512));
  EXPECT_EQ(all_blocks_.at(kBase)->size_bytes, 512u) << "the lower run merged";
  EXPECT_EQ(all_blocks_.at(kBase + 4096)->size_bytes, 256u) << "the higher run stays in pieces";
}

// A run is found from where a free joined it, also after that free merged into a neighbour at
// the same point of the stream: merge_own_runs visits the block that holds the address now.
TEST_F(FreeIndex, S2_ARunIsFoundAfterItsMarkedFreeMergedIntoANeighbour) {
  auto run = make_run({256, 256, 256});
  // run[1] joins a's free at 3: marked there; run[2], at the same point, merges into it.
  index_pending_on_a(run, {3, 7, 7});
  EXPECT_EQ(index_.block_count(), 2u);
  ASSERT_TRUE(index_.merge_own_runs(&a_));
  EXPECT_EQ(index_.block_count(), 1u);
  EXPECT_EQ(all_blocks_.at(kBase)->size_bytes, 768u);
  EXPECT_EQ(all_blocks_.at(kBase)->stamp.position, 7u);
}

// A stream whose frees a synchronize proves before it ever misses (one that frees are deferred
// to) leaves no mark behind for each of them: marks stay bounded by the pending blocks.
TEST_F(FreeIndex, S2_MarksOfRunsAStreamNeverMergedStayBounded) {
  for (int round = 0; round < 1000; ++round) {
    auto run = make_run({256, 256}, kBase + static_cast<std::uintptr_t>(round) * 4096);
    const std::uint64_t first = a_.note_enqueued();
    const std::uint64_t second = a_.note_enqueued();
    run[0]->stamp = free_stamp{&a_, first};
    run[1]->stamp = free_stamp{&a_, second};
    index_.insert(run[0]);
    index_.insert(run[1]);  // a run of a's: marked
    a_.prove_completed(second);
    index_.promote(/*only_proven=*/true);  // no longer pending: the mark marks nothing
  }
  EXPECT_EQ(index_.block_count(), 1000u);
  EXPECT_LE(index_.run_mark_count(), 65u);
  EXPECT_FALSE(index_.merge_own_runs(&a_)) << "no run is left to merge";
  EXPECT_EQ(index_.run_mark_count(), 0u);
}

// S2: when a stream misses, its own frees at different points merge into whole holes under
// their latest stamp; proven neighbours and other streams' frees stay apart, and with nothing
// new to merge the call does nothing.
TEST_F(FreeIndex, S2_AStreamsOwnRunsMergeWhenItMisses) {
  for (int i = 0; i < 7; ++i) a_.note_enqueued();
  for (int i = 0; i < 5; ++i) b_.note_enqueued();
  auto run = make_run({256, 256, 256, 256, 256});
  run[0]->stamp = free_stamp{&b_, 5};
  run[1]->stamp = free_stamp{&a_, 3};
  run[2]->stamp = free_stamp{&a_, 7};
  run[3]->stamp = free_stamp{&a_, 5};
  run[4]->stamp = free_stamp{};  // proven
  for (block* b : run) index_.insert(b);
  EXPECT_EQ(index_.block_count(), 5u) << "insert keeps different points apart";
  EXPECT_FALSE(index_.merge_own_runs(&b_)) << "b has no run of its own";
  ASSERT_TRUE(index_.merge_own_runs(&a_));
  EXPECT_EQ(index_.block_count(), 3u) << "b's free, a's three as one, the proven block";
  block* merged = all_blocks_.at(kBase + 256);
  EXPECT_EQ(merged->size_bytes, 768u);
  EXPECT_EQ(merged->stamp.timeline, &a_);
  EXPECT_EQ(merged->stamp.position, 7u) << "the latest of a's frees";
  EXPECT_FALSE(index_.merge_own_runs(&a_)) << "nothing new since";
  EXPECT_EQ(index_.take_best_fit(768, &a_), merged);
}

// A forgotten stream (destroyed, its work all run) leaves nothing for merge_own_runs behind: with
// a stream per request the index would otherwise keep an entry for each.
TEST_F(FreeIndex, S2_AForgottenStreamLeavesNoRunsToMerge) {
  for (int i = 0; i < 7; ++i) a_.note_enqueued();
  auto run = make_run({256, 256});
  run[0]->stamp = free_stamp{&a_, 3};
  run[1]->stamp = free_stamp{&a_, 7};
  for (block* b : run) index_.insert(b);
  EXPECT_EQ(index_.streams_with_unmerged_runs(), 1u);
  for (int i = 0; i < 9; ++i) b_.note_enqueued();
  index_.move_stamps(&a_, free_stamp{&b_, 9});
  EXPECT_EQ(index_.streams_with_unmerged_runs(), 0u);
  EXPECT_EQ(index_.block_count(), 1u) << "one stamp now: merged at insert";
}

// Frees made at the same point of a stream (no work between them) merge.
TEST_F(FreeIndex, S11_PendingFreesAtTheSamePositionMerge) {
  for (int i = 0; i < 3; ++i) a_.note_enqueued();
  auto run = make_run({256, 256});
  run[0]->stamp = free_stamp{&a_, 3};
  run[1]->stamp = free_stamp{&a_, 3};
  index_.insert(run[0]);
  block* merged = index_.insert(run[1]);
  EXPECT_EQ(index_.block_count(), 1u);
  EXPECT_EQ(merged->size_bytes, 512u);
  EXPECT_EQ(merged->stamp.position, 3u);
  EXPECT_EQ(index_.take_best_fit(256, &b_), nullptr);  // still pending for b
  a_.prove_completed(3);
  EXPECT_EQ(index_.take_best_fit(512, &b_), merged);
}

TEST_F(FreeIndex, S11_ProvenStampIsClearedOnInsertAndMerges) {
  a_.note_enqueued();
  a_.prove_completed(1);
  auto run = make_run({256, 256});
  run[0]->stamp = free_stamp{&a_, 1};  // already proven
  index_.insert(run[1]);
  block* merged = index_.insert(run[0]);
  EXPECT_EQ(merged->stamp.timeline, nullptr);
  EXPECT_EQ(merged->size_bytes, 512u);
  EXPECT_EQ(index_.block_count(), 1u);
}

TEST_F(FreeIndex, S3_BestFitTakesSmallestFittingThenLowestAddress) {
  // Separate runs so nothing merges.
  block* big = make_run({4096}, kBase)[0];
  block* mid_high = make_run({1024}, kBase + 0x100000)[0];
  block* mid_low = make_run({1024}, kBase + 0x80000)[0];
  block* small = make_run({256}, kBase + 0x200000)[0];
  for (block* b : {big, mid_high, mid_low, small}) index_.insert(b);
  EXPECT_EQ(index_.take_best_fit(512, &a_), mid_low);
  EXPECT_EQ(mid_low->current_state(), block_state::detached);
  EXPECT_EQ(index_.take_best_fit(512, &a_), mid_high);
  EXPECT_EQ(index_.take_best_fit(512, &a_), big);
  EXPECT_EQ(index_.take_best_fit(512, &a_), nullptr);
  EXPECT_EQ(index_.take_best_fit(256, &a_), small);
  EXPECT_EQ(index_.block_count(), 0u);
  EXPECT_EQ(index_.free_bytes(), 0u);
}

TEST_F(FreeIndex, S11_PendingFreeServesItsOwnStreamOnly) {
  a_.note_enqueued();
  block* freed = make_run({1024})[0];
  freed->stamp = free_stamp{&a_, 1};
  index_.insert(freed);
  EXPECT_EQ(index_.take_best_fit(1024, &b_), nullptr);
  a_.note_completed(1);  // completed but not proven to the user: still not for b
  EXPECT_EQ(index_.take_best_fit(1024, &b_), nullptr);
  EXPECT_EQ(index_.take_best_fit(1024, &a_), freed);
}

TEST_F(FreeIndex, S9_PromoteMergesWhatBecameProven) {
  a_.note_enqueued();
  auto run = make_run({256, 256, 256});
  run[1]->stamp = free_stamp{&a_, 1};
  index_.insert(run[0]);
  index_.insert(run[1]);
  index_.insert(run[2]);
  EXPECT_EQ(index_.block_count(), 3u);
  index_.promote(/*only_proven=*/true);
  EXPECT_EQ(index_.block_count(), 3u);  // nothing proven yet
  a_.note_completed(1);
  index_.promote(/*only_proven=*/true);
  EXPECT_EQ(index_.block_count(), 3u);  // completed is not proven
  a_.prove_completed(1);
  index_.promote(/*only_proven=*/true);
  EXPECT_EQ(index_.block_count(), 1u);
  EXPECT_EQ(index_.free_bytes(), 768u);
  ASSERT_EQ(all_blocks_.size(), 1u);
  EXPECT_EQ(all_blocks_.begin()->second->stamp.timeline, nullptr);
  EXPECT_EQ(index_.take_best_fit(768, &b_), all_blocks_.begin()->second);
}

TEST_F(FreeIndex, S9_PromoteWithCompletedMergesAtTeardown) {
  a_.note_enqueued();
  b_.note_enqueued();
  auto run = make_run({256, 256});
  run[0]->stamp = free_stamp{&a_, 1};
  run[1]->stamp = free_stamp{&b_, 1};
  index_.insert(run[0]);
  index_.insert(run[1]);
  a_.note_completed(1);
  index_.promote(/*only_proven=*/false);
  EXPECT_EQ(index_.block_count(), 2u);  // b's free has not completed
  b_.note_completed(1);
  index_.promote(/*only_proven=*/false);
  EXPECT_EQ(index_.block_count(), 1u);
  EXPECT_EQ(index_.free_bytes(), 512u);
}

TEST_F(FreeIndex, S3_RemoveTakesASpecificBlock) {
  block* one = make_run({256}, kBase)[0];
  block* two = make_run({256}, kBase + 0x10000)[0];
  index_.insert(one);
  index_.insert(two);
  index_.remove(one);
  EXPECT_EQ(one->current_state(), block_state::detached);
  EXPECT_EQ(index_.block_count(), 1u);
  EXPECT_EQ(index_.free_bytes(), 256u);
  EXPECT_EQ(index_.take_best_fit(256, &a_), two);
  EXPECT_EQ(index_.take_best_fit(256, &a_), nullptr);
}

}  // namespace
