// block and block_store: claiming a live block for its free, and blocks that stay blocks while
// their pool lives (S2: a double free is an error, never a corrupted pool).
#include "core/block_store.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace {

using soma::detail::block;
using soma::detail::block_state;
using soma::detail::block_store;

TEST(S2_Block, OnlyALiveBlockCanBeClaimedForItsFree) {
  block b;
  for (block_state s : {block_state::cached, block_state::indexed, block_state::detached}) {
    b.set_state(s);
    EXPECT_FALSE(b.claim_for_free()) << "state " << static_cast<int>(s);
    EXPECT_EQ(b.current_state(), s);
    EXPECT_FALSE(b.is_live());
  }
  b.set_state(block_state::live);
  EXPECT_TRUE(b.claim_for_free());
  EXPECT_EQ(b.current_state(), block_state::freeing);
  EXPECT_TRUE(b.is_live());  // a free in progress still counts as live
}

TEST(S2_Block, OfTwoThreadsFreeingOneBlockExactlyOneClaimsIt) {
  for (int round = 0; round < 2000; ++round) {
    block b;
    b.set_state(block_state::live);
    std::atomic<int> claimed{0};
    std::atomic<bool> go{false};
    auto free_it = [&] {
      while (!go.load()) {
      }
      if (b.claim_for_free()) {
        claimed.fetch_add(1);
        b.set_state(block_state::cached);  // as pool::free leaves it
      }
    };
    std::thread first(free_it);
    std::thread second(free_it);
    go.store(true);
    first.join();
    second.join();
    ASSERT_EQ(claimed.load(), 1) << "round " << round;
  }
}

TEST(S2_Block, AClaimWaitsForAFreeInProgressAndFailsIfItEndsFreed) {
  block b;
  b.set_state(block_state::freeing);
  std::atomic<bool> result{true};
  std::thread second([&] { result.store(b.claim_for_free()); });
  b.set_state(block_state::cached);  // the first free finishes
  second.join();
  EXPECT_FALSE(result.load());
}

TEST(S2_Block, AClaimThatFindsTheFreeUndoneSucceeds) {
  // A free that claimed a block it found stale gives it back (live); another free then claims.
  block b;
  b.set_state(block_state::freeing);
  std::atomic<bool> result{false};
  std::thread second([&] { result.store(b.claim_for_free()); });
  b.set_state(block_state::live);
  second.join();
  EXPECT_TRUE(result.load());
}

TEST(S2_BlockStore, RecycledBlocksComeBackReset) {
  block_store store;
  block* b = store.make();
  b->address = 0x1000;
  b->size_bytes = 512;
  b->requested_bytes = 100;
  b->set_state(block_state::live);
  b->scope.store(7);
  b->history_stamp.store(42);
  store.recycle(b);
  EXPECT_EQ(store.kept(), 1u);
  EXPECT_EQ(b->current_state(), block_state::detached);  // a stale claim now fails
  EXPECT_FALSE(b->claim_for_free());
  block* again = store.make();
  EXPECT_EQ(again, b);  // the same memory: still a block
  EXPECT_EQ(store.kept(), 0u);
  EXPECT_EQ(again->address, 0u);
  EXPECT_EQ(again->size_bytes, 0u);
  EXPECT_EQ(again->requested_bytes, 0u);
  EXPECT_EQ(again->scope.load(), 0u);
  EXPECT_EQ(again->history_stamp.load(), 42u);  // a block's stamps only rise
  EXPECT_EQ(again->next_adjacent, nullptr);
  delete again;  // made by the store, handed out: its owner deletes it
}

}  // namespace
