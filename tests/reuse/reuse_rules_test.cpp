// S11 reuse policies, one rule at a time, on every backend (the 8-combination suite is
// reuse_policies_test.cpp): the inserted wait of internal dependencies and "growing beats
// waiting" in an uncapped pool, frees of destroyed streams, clock coverage by events (too
// early, just before the free, broken chains, split remainders), and a covered or completed
// free next to a later one of the same stream (docs/reuse-policies.md, "A defect the tests
// found, and its fix").
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "exported_trace.hpp"
#include "reuse_test_fixture.hpp"

namespace {

using namespace soma_test;
using namespace soma_test::reuse;
using namespace std::chrono_literals;

class S11_InternalDependencies : public reuse_fixture {};

// The inserted wait is real: B's later work does not start until A reaches the free, then
// finds A's writes done; an event recorded on B after the allocation is not ready either.
TEST_F(S11_InternalDependencies, InsertedWaitHoldsBackLaterWorkUntilTheFreeCompletes) {
  ASSERT_NO_FATAL_FAILURE(make_pool(1, policies{}));
  ASSERT_NO_FATAL_FAILURE(free_on_a(/*hold=*/true));

  void* q = nullptr;
  SOMA_ASSERT_OK(allocate(&q, b_));
  ASSERT_EQ(q, freed_);
  probe& b_probe = make_probe(q, granule_, 0xB2);
  SOMA_ASSERT_OK(launch_probe(b_, b_probe));
  unique_event on_b;
  SOMA_ASSERT_OK(somaEventRecord(on_b, b_));
  expect_held_back(b_, b_probe.ran, "B must wait for A's free");
  EXPECT_EQ(somaEventQuery(on_b), somaErrorNotReady);
  EXPECT_FALSE(a_wrote().done.is_set());
  gate_.open();
  SOMA_ASSERT_OK(somaEventSynchronize(on_b));
  EXPECT_TRUE(b_probe.ran.is_set());
  EXPECT_TRUE(b_probe.saw(a_wrote())) << "B's work ran before A's writer finished";
  SOMA_ASSERT_OK(somaFreeAsync(q, b_));
  SOMA_ASSERT_OK(somaDeviceSynchronize());
}

// In a pool without a cap (the device's memory), a pending free on a held stream never makes
// another stream wait: the pool grows (once: B's next requests reuse B's own frees).
TEST_F(S11_InternalDependencies, UncappedPoolGrowsInsteadOfWaiting) {
  pool_ = std::make_unique<unique_pool>(0);
  ASSERT_NE(pool_->get(), nullptr);
  SOMA_ASSERT_OK(set_pool_u64(pool(), somaMemPoolAttrReleaseThreshold, UINT64_MAX));
  void* p = nullptr;
  SOMA_ASSERT_OK(allocate(&p, a_, 4 * granule_));
  // cuda committed a 32 MiB step for p: without this B would take that fresh memory and the
  // pool would not need to grow.
  ASSERT_NO_FATAL_FAILURE(take_headroom());
  SOMA_ASSERT_OK(gate_.hold(a_));
  SOMA_ASSERT_OK(somaFreeAsync(p, a_));
  const std::uint64_t reserved_before = reserved();
  std::uint64_t reserved_after_first = 0;
  for (int i = 0; i < 4; ++i) {
    void* q = nullptr;
    SOMA_ASSERT_OK(allocate(&q, b_, granule_));
    EXPECT_TRUE(
        reinterpret_cast<std::uintptr_t>(q) + granule_ <= reinterpret_cast<std::uintptr_t>(p) ||
        reinterpret_cast<std::uintptr_t>(q) >= reinterpret_cast<std::uintptr_t>(p) + 4 * granule_)
        << "allocation " << i << " took part of A's pending free";
    if (i == 0) {
      expect_grew(reserved_before, "A's free is pending and the pool has no cap");
      reserved_after_first = reserved();
    }
    SOMA_ASSERT_OK(somaFreeAsync(q, b_));  // back into B's cache: the next one reuses it
  }
  EXPECT_EQ(reserved(), reserved_after_first) << "the pool grew more than once";
  stream_flag b_ran;
  SOMA_ASSERT_OK(launch_marker(b_, b_ran));
  expect_runs(b_, b_ran, "nothing made B wait on A");
  gate_.open();
  SOMA_ASSERT_OK(somaDeviceSynchronize());
}

class S11_DestroyedStreams : public reuse_fixture {};

// The destroyed stream cannot take a wait any more; once its work has completed and the
// device was synchronized the pool is usable at full size again (no internal dependency on
// a dead stream, no stranded memory).
TEST_F(S11_DestroyedStreams, HeldStreamDestroyedThenDeviceSynchronize) {
  ASSERT_NO_FATAL_FAILURE(make_pool(1, policies{false, false, true}));
  ASSERT_NO_FATAL_FAILURE(free_on_a(/*hold=*/true));
  const stream_flag& a_done = mark_and_destroy_a();
  gate_.open();
  ASSERT_TRUE(a_done.wait());
  SOMA_ASSERT_OK(somaDeviceSynchronize());
  expect_b_reuses_freed("memory freed on a destroyed stream is stranded");
}

// somaDeviceSynchronize waits for the queued work of a destroyed stream (S12: it observes all
// work of the device) and so proves its frees, whatever the flags.
TEST_F(S11_DestroyedStreams, DeviceSynchronizeWaitsForTheirWorkAndProvesTheirFrees) {
  ASSERT_NO_FATAL_FAILURE(make_pool(1, policies{false, false, false}));
  ASSERT_NO_FATAL_FAILURE(free_on_a(/*hold=*/true));
  const stream_flag& a_done = mark_and_destroy_a();
  std::thread opener([this] {
    std::this_thread::sleep_for(kHeldBackWindow);
    gate_.open();
  });
  const somaError_t synchronized = somaDeviceSynchronize();
  const bool done_at_return = a_done.is_set();
  opener.join();
  SOMA_EXPECT_OK(synchronized);
  EXPECT_TRUE(done_at_return) << "somaDeviceSynchronize returned before a destroyed stream's "
                                 "queued work ran";
  expect_b_reuses_freed("the device synchronize did not prove the free");
}

// Destroyed streams are forgotten once their work has run, at whichever synchronize or stream
// creation comes then; their pending frees move to one timeline of the device, complete at each
// position. An internal dependency on one such free orders the stream after that free alone: frees
// forgotten before it stay unordered, so with opportunistic reuse off they take an internal
// dependency of their own, never "follow event dependencies" (S11). Were the wait on one
// forgotten free taken for all earlier ones, reuse would depend on when streams happened to be
// forgotten: the reuse-policy model found it so under load.
TEST_F(S11_DestroyedStreams, InternalDependencyOnOneForgottenFreeCoversNoOther) {
  ASSERT_NO_FATAL_FAILURE(make_pool(4, policies{true, false, true}));
  void* small = nullptr;
  void* between = nullptr;  // live throughout: the two frees never merge
  void* large = nullptr;
  SOMA_ASSERT_OK(allocate(&small, b_));
  SOMA_ASSERT_OK(allocate(&between, a_));
  SOMA_ASSERT_OK(allocate(&large, c_, 2 * granule_));
  const stream_flag& b_done = free_and_destroy(b_, small);  // forgotten first
  const stream_flag& c_done = free_and_destroy(c_, large);
  ASSERT_TRUE(wait_completed(b_done));
  ASSERT_TRUE(wait_completed(c_done));
  // A stream's creation forgets destroyed streams whose work has run: B, then C. On cuda the
  // backend lets go of a destroyed stream's completion tracker at one creation, and the next
  // forgets it. A few creations, a moment apart, leave a busy host time to note the markers'
  // completion. (A device synchronize, or anything that shows the user their work ran, would
  // prove the frees instead.)
  for (int made = 0; made < 5; ++made) {
    unique_stream forgets;
    std::this_thread::sleep_for(2ms);
  }
  SOMA_ASSERT_OK(somaMemRecordHistory(1000));
  const history_recording_stopper stop;

  void* again_large = nullptr;  // the pool is full: only C's free fits
  SOMA_ASSERT_OK(allocate(&again_large, a_, 2 * granule_));
  EXPECT_EQ(again_large, large);
  void* again_small = nullptr;
  SOMA_ASSERT_OK(allocate(&again_small, a_));
  EXPECT_EQ(again_small, small);

  const std::string text = exported_trace("reuse_rules");
  std::vector<std::string> rules;
  const std::string key = "\"reuse\":\"";
  for (std::size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1)) {
    const std::size_t start = at + key.size();
    rules.push_back(text.substr(start, text.find('"', start) - start));
  }
  ASSERT_EQ(rules.size(), 2u) << text;
  EXPECT_EQ(rules[1], "internal dependency")
      << "B's free was served to A by a wait A took on C's free, both forgotten";
  open_gate_and_free({{again_large, a_}, {again_small, a_}, {between, a_}});
}

// Where on A the event B waits on is recorded, around A's last use of the block (a writer)
// and its free. On the cpu backend, where soma enqueues all work, the free is only a stamp
// (A, k): an event recorded just before it, with no work on A in between, captures the same
// position and covers it; one recorded before the last use of the block does not. On a native
// stream (cuda) work soma never saw may come between the event and the free, so the free takes
// a position of its own and only an event recorded after it covers it, as in CUDA.
struct event_position {
  const char* name;
  policies flags;
  bool before_last_use;  ///< else right before the free
};

/// How gtest shows the parameter: where the event is recorded.
void PrintTo(const event_position& at, std::ostream* out) {
  *out << (at.before_last_use ? "before the last use" : "right before the free");
}

class S11_EventRecordedOnA : public reuse_fixture,
                             public ::testing::WithParamInterface<event_position> {};

TEST_P(S11_EventRecordedOnA, CoversTheFreeOnlyAfterTheLastUse) {
  const event_position& at = GetParam();
  ASSERT_NO_FATAL_FAILURE(make_growable_pool(at.flags));
  void* p = nullptr;
  SOMA_ASSERT_OK(allocate(&p, a_));
  ASSERT_NO_FATAL_FAILURE(take_headroom());
  SOMA_ASSERT_OK(gate_.hold(a_));
  if (at.before_last_use) {
    ASSERT_NO_FATAL_FAILURE(wait_for(b_, a_));
  }
  const writer& a_wrote = make_writer(p, granule_, 0xA1);
  SOMA_ASSERT_OK(launch_writer(a_, a_wrote));  // last use of p on A
  if (!at.before_last_use) {
    ASSERT_NO_FATAL_FAILURE(wait_for(b_, a_));
  }
  SOMA_ASSERT_OK(somaFreeAsync(p, a_));

  void* q = nullptr;
  const bool covered = !at.before_last_use && on_cpu_backend();
  ASSERT_NO_FATAL_FAILURE(expect_served(
      &q, b_, p, /*reused=*/covered, "the event captured the free's position",
      "B's clock covers A only up to the event, not up to the free: B is not ordered after it"));
  if (covered) {
    probe& b_probe = make_probe(q, granule_, 0xB2);
    SOMA_ASSERT_OK(launch_probe(b_, b_probe));
    gate_.open();
    SOMA_ASSERT_OK(somaStreamSynchronize(b_));
    EXPECT_TRUE(b_probe.saw(a_wrote));
  }
  open_gate_and_free({{q, b_}});
}

const event_position kEventPositions[] = {
    {"BeforeTheLastUseDoesNotCoverTheFree", policies{true, true, true}, true},
    {"RightBeforeTheFreeCoversIt", policies{true, false, false}, false},
};
INSTANTIATE_TEST_SUITE_P(Positions, S11_EventRecordedOnA, ::testing::ValuesIn(kEventPositions),
                         [](const ::testing::TestParamInfo<event_position>& info) {
                           return std::string(info.param.name);
                         });

class S11_EventDependencies : public reuse_fixture {};

// A wait on an event of B recorded before B waited on A does not carry A's free to C.
TEST_F(S11_EventDependencies, ChainBrokenByAnEarlierEventIsNotFollowed) {
  ASSERT_NO_FATAL_FAILURE(make_growable_pool(policies{true, false, false}));
  ASSERT_NO_FATAL_FAILURE(free_on_a(/*hold=*/true));
  ASSERT_NO_FATAL_FAILURE(wait_for(c_, b_));  // B's event, recorded before B waited on A
  ASSERT_NO_FATAL_FAILURE(wait_for(b_, a_));
  void* q = nullptr;
  ASSERT_NO_FATAL_FAILURE(
      expect_served(&q, c_, freed_, /*reused=*/false, "", "C is not ordered after A's free"));
  void* r = nullptr;
  SOMA_ASSERT_OK(allocate(&r, b_, granule_ / 2)) << "B itself is covered";
  EXPECT_EQ(r, freed_);
  open_gate_and_free({{q, c_}, {r, b_}});
}

// X freed on A is covered by B's clock; Y, right next to X, is freed on A later and is not.
// B may still take X (its free is covered); the later free next to it must not hide it.
TEST_F(S11_EventDependencies, CoveredFreeStaysUsableNextToALaterFreeOfTheSameStream) {
  ASSERT_NO_FATAL_FAILURE(make_growable_pool(policies{true, false, false}));
  void* x = nullptr;
  void* y = nullptr;
  ASSERT_NO_FATAL_FAILURE(allocate_adjacent_on_a(&x, &y));
  SOMA_ASSERT_OK(gate_.hold(a_));
  SOMA_ASSERT_OK(somaFreeAsync(x, a_));
  ASSERT_NO_FATAL_FAILURE(wait_for(b_, a_));                          // covers X's free
  SOMA_ASSERT_OK(launch_writer(a_, make_writer(y, granule_, 0xA1)));  // Y still in use on A
  SOMA_ASSERT_OK(somaFreeAsync(y, a_));

  void* q = nullptr;
  ASSERT_NO_FATAL_FAILURE(expect_served(&q, b_, x, /*reused=*/true,
                                        "B's clock covers X's free; merging X with the later "
                                        "free of Y (stamp of the later one) made X unusable "
                                        "and the pool grew",
                                        ""));
  open_gate_and_free({{q, b_}});
}

class S11_Opportunistic : public reuse_fixture {};

// Same with opportunistic reuse: X's free has run, Y's (next to it, later on A) has not.
TEST_F(S11_Opportunistic, CompletedFreeStaysUsableNextToAPendingFreeOfTheSameStream) {
  ASSERT_NO_FATAL_FAILURE(make_growable_pool(policies{false, true, false}));
  void* x = nullptr;
  void* y = nullptr;
  ASSERT_NO_FATAL_FAILURE(allocate_adjacent_on_a(&x, &y));
  stream_gate x_gate;
  SOMA_ASSERT_OK(x_gate.hold(a_));
  SOMA_ASSERT_OK(launch_writer(a_, make_writer(x, granule_, 0xA1)));
  SOMA_ASSERT_OK(somaFreeAsync(x, a_));
  // C asks for memory while X's free is pending and is the last thing on A: C gets fresh
  // memory, and a backend that learns completion by asking (cuda: a marker event recorded on
  // A now, at X's free) will know once A passes it. Asked only later, while A is held again,
  // cuda could not tell that X's position completed.
  void* fresh = nullptr;
  SOMA_ASSERT_OK(allocate(&fresh, c_));
  EXPECT_NE(fresh, x);
  stream_flag x_free_ran;
  SOMA_ASSERT_OK(launch_marker(a_, x_free_ran));
  SOMA_ASSERT_OK(gate_.hold(a_));
  SOMA_ASSERT_OK(somaFreeAsync(y, a_));  // pending behind the gate
  // Y's free from A's cache into the pool's index, next to X, as the miss of B's request did
  // before C's request took X there first (a release drains every cache; keeping all that is
  // reserved, it releases nothing).
  SOMA_ASSERT_OK(somaMemPoolTrimTo(pool(), reserved()));
  x_gate.open();
  ASSERT_TRUE(x_free_ran.wait());

  void* q = nullptr;
  ASSERT_NO_FATAL_FAILURE(
      expect_served(&q, b_, x, /*reused=*/true,
                    "X's free has completed; merging it with Y's pending free hid it", ""));
  open_gate_and_free({{q, b_}, {fresh, c_}});
}

// Part of a block reused through a dependency: the rest stays pending for others.
TEST_F(S11_EventDependencies, SplitRemainderKeepsTheFreeStamp) {
  ASSERT_NO_FATAL_FAILURE(make_growable_pool(policies{true, false, false}));
  // cuda committed more than the block: free_on_a takes that headroom, without which B's half
  // would come from that fresh memory before the pool looks at A's cached free.
  ASSERT_NO_FATAL_FAILURE(free_on_a(/*hold=*/true));
  void* const p = freed_;
  ASSERT_NO_FATAL_FAILURE(wait_for(b_, a_));
  void* half = nullptr;
  SOMA_ASSERT_OK(allocate(&half, b_, granule_ / 2));
  EXPECT_EQ(half, p);
  const std::uint64_t reserved_before = reserved();
  void* other = nullptr;
  SOMA_ASSERT_OK(allocate(&other, c_, granule_ / 2));
  EXPECT_TRUE(reinterpret_cast<std::uintptr_t>(other) < reinterpret_cast<std::uintptr_t>(p) ||
              reinterpret_cast<std::uintptr_t>(other) >=
                  reinterpret_cast<std::uintptr_t>(p) + granule_)
      << "C is not ordered after A: the remainder of A's block is not C's";
  expect_grew(reserved_before, "the only free memory is the remainder of A's pending free");
  open_gate_and_free({{half, b_}, {other, c_}});
}

}  // namespace
