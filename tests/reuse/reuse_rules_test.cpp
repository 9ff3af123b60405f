// S11 reuse policies, one rule at a time (the 8-combination suite is reuse_policies_test.cpp):
// the inserted wait of internal dependencies and "growing beats waiting" in an uncapped pool,
// frees of destroyed streams, clock coverage by events (too early, just before the free, broken
// chains, split remainders), and a covered or completed free next to a later one of the same
// stream (docs/reuse-policies.md, "Known defect").
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

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
  void* p = nullptr;
  SOMA_ASSERT_OK(allocate(&p, a_));
  SOMA_ASSERT_OK(gate_.hold(a_));
  task_flag a_wrote;
  SOMA_ASSERT_OK(launch_writer(a_, p, granule_, 0xA1, a_wrote));
  SOMA_ASSERT_OK(somaFreeAsync(p, a_));

  void* q = nullptr;
  SOMA_ASSERT_OK(allocate(&q, b_));
  ASSERT_EQ(q, p);
  auto saw_a_pattern = std::make_shared<std::atomic<bool>>(false);
  task_flag b_ran;
  SOMA_ASSERT_OK(launch_host(b_, [q, bytes = granule_, saw = saw_a_pattern, ran = b_ran.shared()] {
    const auto* data = static_cast<const unsigned char*>(q);
    bool all = true;
    for (std::size_t i = 0; i < bytes; ++i) all = all && data[i] == 0xA1;
    saw->store(all);
    std::memset(q, 0xB2, bytes);
    ran->store(true);
  }));
  unique_event on_b;
  SOMA_ASSERT_OK(somaEventRecord(on_b, b_));
  expect_held_back(b_, b_ran, "B must wait for A's free");
  EXPECT_EQ(somaEventQuery(on_b), somaErrorNotReady);
  EXPECT_FALSE(a_wrote.is_set());
  gate_.open();
  SOMA_ASSERT_OK(somaEventSynchronize(on_b));
  EXPECT_TRUE(b_ran.is_set());
  EXPECT_TRUE(saw_a_pattern->load()) << "B's task ran before A's writer finished";
  SOMA_ASSERT_OK(somaFreeAsync(q, b_));
  SOMA_ASSERT_OK(somaDeviceSynchronize());
}

// In a pool without a cap (the device's memory), a pending free on a held stream never makes
// another stream wait: the pool grows.
TEST_F(S11_InternalDependencies, UncappedPoolGrowsInsteadOfWaiting) {
  pool_ = std::make_unique<unique_pool>(0);
  ASSERT_NE(pool_->get(), nullptr);
  SOMA_ASSERT_OK(set_pool_u64(pool(), somaMemPoolAttrReleaseThreshold, UINT64_MAX));
  void* p = nullptr;
  SOMA_ASSERT_OK(allocate(&p, a_, 4 * granule_));
  SOMA_ASSERT_OK(gate_.hold(a_));
  SOMA_ASSERT_OK(somaFreeAsync(p, a_));
  const std::uint64_t reserved_before = reserved();
  for (int i = 0; i < 4; ++i) {
    void* q = nullptr;
    SOMA_ASSERT_OK(allocate(&q, b_, granule_));
    EXPECT_TRUE(reinterpret_cast<std::uintptr_t>(q) + granule_ <=
                    reinterpret_cast<std::uintptr_t>(p) ||
                reinterpret_cast<std::uintptr_t>(q) >= reinterpret_cast<std::uintptr_t>(p) +
                                                            4 * granule_)
        << "allocation " << i << " took part of A's pending free";
    SOMA_ASSERT_OK(somaFreeAsync(q, b_));  // back into B's cache: the next one reuses it
  }
  EXPECT_EQ(reserved(), reserved_before + granule_);
  task_flag b_ran;
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
  void* p = nullptr;
  SOMA_ASSERT_OK(allocate(&p, a_));
  SOMA_ASSERT_OK(gate_.hold(a_));
  SOMA_ASSERT_OK(somaFreeAsync(p, a_));
  task_flag a_done;
  SOMA_ASSERT_OK(launch_marker(a_, a_done));
  a_.reset();
  gate_.open();
  ASSERT_TRUE(a_done.wait());
  SOMA_ASSERT_OK(somaDeviceSynchronize());
  void* q = nullptr;
  SOMA_EXPECT_OK(allocate(&q, b_)) << "memory freed on a destroyed stream is stranded";
  EXPECT_EQ(q, p);
  if (q != nullptr) {
    SOMA_ASSERT_OK(somaFreeAsync(q, b_));
  }
  SOMA_ASSERT_OK(somaStreamSynchronize(b_));
}

// somaDeviceSynchronize waits for the queued work of a destroyed stream (S12: it observes all
// work of the device) and so proves its frees, whatever the flags.
TEST_F(S11_DestroyedStreams, DeviceSynchronizeWaitsForTheirWorkAndProvesTheirFrees) {
  ASSERT_NO_FATAL_FAILURE(make_pool(1, policies{false, false, false}));
  void* p = nullptr;
  SOMA_ASSERT_OK(allocate(&p, a_));
  SOMA_ASSERT_OK(gate_.hold(a_));
  SOMA_ASSERT_OK(somaFreeAsync(p, a_));
  task_flag a_done;
  SOMA_ASSERT_OK(launch_marker(a_, a_done));
  a_.reset();
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
  void* q = nullptr;
  SOMA_EXPECT_OK(allocate(&q, b_)) << "the device synchronize did not prove the free";
  EXPECT_EQ(q, p);
  if (q != nullptr) {
    SOMA_ASSERT_OK(somaFreeAsync(q, b_));
  }
  SOMA_ASSERT_OK(somaStreamSynchronize(b_));
}

class S11_EventDependencies : public reuse_fixture {};

// An event recorded before the last use of the block on A does not cover the free.
TEST_F(S11_EventDependencies, EventRecordedBeforeTheLastUseDoesNotCoverTheFree) {
  ASSERT_NO_FATAL_FAILURE(make_pool(2, policies{true, true, true}));
  void* p = nullptr;
  SOMA_ASSERT_OK(allocate(&p, a_));
  SOMA_ASSERT_OK(gate_.hold(a_));
  unique_event too_early;
  SOMA_ASSERT_OK(somaEventRecord(too_early, a_));
  task_flag a_wrote;
  SOMA_ASSERT_OK(launch_writer(a_, p, granule_, 0xA1, a_wrote));  // last use of p on A
  SOMA_ASSERT_OK(somaFreeAsync(p, a_));
  SOMA_ASSERT_OK(somaStreamWaitEvent(b_, too_early, 0));
  void* q = nullptr;
  SOMA_ASSERT_OK(allocate(&q, b_));
  EXPECT_NE(q, p) << "B's clock covers A only up to the event, not up to the free";
  EXPECT_EQ(reserved(), 2 * granule_);
  gate_.open();
  SOMA_ASSERT_OK(somaFreeAsync(q, b_));
  SOMA_ASSERT_OK(somaDeviceSynchronize());
}

// The free is only a stamp (A, k): an event recorded just before it, with no work on A in
// between, captures the same position and covers it.
TEST_F(S11_EventDependencies, EventRecordedRightBeforeTheFreeCoversIt) {
  ASSERT_NO_FATAL_FAILURE(make_pool(2, policies{true, false, false}));
  void* p = nullptr;
  SOMA_ASSERT_OK(allocate(&p, a_));
  SOMA_ASSERT_OK(gate_.hold(a_));
  task_flag a_wrote;
  SOMA_ASSERT_OK(launch_writer(a_, p, granule_, 0xA1, a_wrote));  // last use of p on A
  unique_event before_free;
  SOMA_ASSERT_OK(somaEventRecord(before_free, a_));
  SOMA_ASSERT_OK(somaFreeAsync(p, a_));
  SOMA_ASSERT_OK(somaStreamWaitEvent(b_, before_free, 0));
  void* q = nullptr;
  SOMA_ASSERT_OK(allocate(&q, b_));
  EXPECT_EQ(q, p);
  EXPECT_EQ(reserved(), granule_);
  task_flag b_ran, b_saw_a;
  SOMA_ASSERT_OK(launch_probe(b_, q, granule_, 0xB2, a_wrote, b_ran, b_saw_a));
  gate_.open();
  SOMA_ASSERT_OK(somaStreamSynchronize(b_));
  EXPECT_TRUE(b_saw_a.is_set());
  SOMA_ASSERT_OK(somaFreeAsync(q, b_));
  SOMA_ASSERT_OK(somaDeviceSynchronize());
}

// A wait on an event of B recorded before B waited on A does not carry A's free to C.
TEST_F(S11_EventDependencies, ChainBrokenByAnEarlierEventIsNotFollowed) {
  ASSERT_NO_FATAL_FAILURE(make_pool(2, policies{true, false, false}));
  void* p = nullptr;
  SOMA_ASSERT_OK(allocate(&p, a_));
  SOMA_ASSERT_OK(gate_.hold(a_));
  SOMA_ASSERT_OK(somaFreeAsync(p, a_));
  unique_event on_b_early, on_a;
  SOMA_ASSERT_OK(somaEventRecord(on_b_early, b_));
  SOMA_ASSERT_OK(somaEventRecord(on_a, a_));
  SOMA_ASSERT_OK(somaStreamWaitEvent(b_, on_a, 0));
  SOMA_ASSERT_OK(somaStreamWaitEvent(c_, on_b_early, 0));
  void* q = nullptr;
  SOMA_ASSERT_OK(allocate(&q, c_));
  EXPECT_NE(q, p);
  void* r = nullptr;
  SOMA_ASSERT_OK(allocate(&r, b_, granule_ / 2)) << "B itself is covered";
  EXPECT_EQ(r, p);
  gate_.open();
  SOMA_ASSERT_OK(somaFreeAsync(q, c_));
  SOMA_ASSERT_OK(somaFreeAsync(r, b_));
  SOMA_ASSERT_OK(somaDeviceSynchronize());
}

// X freed on A is covered by B's clock; Y, right next to X, is freed on A later and is not.
// B may still take X (its free is covered); the later free next to it must not hide it.
TEST_F(S11_EventDependencies, CoveredFreeStaysUsableNextToALaterFreeOfTheSameStream) {
  ASSERT_NO_FATAL_FAILURE(make_pool(3, policies{true, false, false}));
  void* x = nullptr;
  void* y = nullptr;
  SOMA_ASSERT_OK(allocate(&x, a_));
  SOMA_ASSERT_OK(allocate(&y, a_));
  ASSERT_EQ(reinterpret_cast<std::uintptr_t>(y), reinterpret_cast<std::uintptr_t>(x) + granule_)
      << "the test needs X and Y adjacent";
  SOMA_ASSERT_OK(gate_.hold(a_));
  SOMA_ASSERT_OK(somaFreeAsync(x, a_));
  unique_event x_freed;
  SOMA_ASSERT_OK(somaEventRecord(x_freed, a_));
  SOMA_ASSERT_OK(somaStreamWaitEvent(b_, x_freed, 0));
  task_flag a_used_y;
  SOMA_ASSERT_OK(launch_writer(a_, y, granule_, 0xA1, a_used_y));  // Y still in use on A
  SOMA_ASSERT_OK(somaFreeAsync(y, a_));

  void* q = nullptr;
  SOMA_ASSERT_OK(allocate(&q, b_));
  EXPECT_EQ(q, x) << "B's clock covers X's free; merging X with the later free of Y (stamp of "
                     "the later one) made X unusable and the pool grew";
  EXPECT_EQ(reserved(), 2 * granule_);
  gate_.open();
  SOMA_ASSERT_OK(somaFreeAsync(q, b_));
  SOMA_ASSERT_OK(somaDeviceSynchronize());
}

class S11_Opportunistic : public reuse_fixture {};

// Same with opportunistic reuse: X's free has run, Y's (next to it, later on A) has not.
TEST_F(S11_Opportunistic, CompletedFreeStaysUsableNextToAPendingFreeOfTheSameStream) {
  ASSERT_NO_FATAL_FAILURE(make_pool(3, policies{false, true, false}));
  void* x = nullptr;
  void* y = nullptr;
  SOMA_ASSERT_OK(allocate(&x, a_));
  SOMA_ASSERT_OK(allocate(&y, a_));
  ASSERT_EQ(reinterpret_cast<std::uintptr_t>(y), reinterpret_cast<std::uintptr_t>(x) + granule_)
      << "the test needs X and Y adjacent";
  task_flag a_used_x, x_free_ran;
  SOMA_ASSERT_OK(launch_writer(a_, x, granule_, 0xA1, a_used_x));
  SOMA_ASSERT_OK(somaFreeAsync(x, a_));
  SOMA_ASSERT_OK(launch_marker(a_, x_free_ran));
  ASSERT_TRUE(x_free_ran.wait());
  SOMA_ASSERT_OK(gate_.hold(a_));
  SOMA_ASSERT_OK(somaFreeAsync(y, a_));  // pending behind the gate

  void* q = nullptr;
  SOMA_ASSERT_OK(allocate(&q, b_));
  EXPECT_EQ(q, x) << "X's free has completed; merging it with Y's pending free hid it";
  EXPECT_EQ(reserved(), 2 * granule_);
  gate_.open();
  SOMA_ASSERT_OK(somaFreeAsync(q, b_));
  SOMA_ASSERT_OK(somaDeviceSynchronize());
}

// Part of a block reused through a dependency: the rest stays pending for others.
TEST_F(S11_EventDependencies, SplitRemainderKeepsTheFreeStamp) {
  ASSERT_NO_FATAL_FAILURE(make_pool(2, policies{true, false, false}));
  void* p = nullptr;
  SOMA_ASSERT_OK(allocate(&p, a_));
  SOMA_ASSERT_OK(gate_.hold(a_));
  SOMA_ASSERT_OK(somaFreeAsync(p, a_));
  unique_event freed;
  SOMA_ASSERT_OK(somaEventRecord(freed, a_));
  SOMA_ASSERT_OK(somaStreamWaitEvent(b_, freed, 0));
  void* half = nullptr;
  SOMA_ASSERT_OK(allocate(&half, b_, granule_ / 2));
  EXPECT_EQ(half, p);
  void* other = nullptr;
  SOMA_ASSERT_OK(allocate(&other, c_, granule_ / 2));
  EXPECT_TRUE(reinterpret_cast<std::uintptr_t>(other) < reinterpret_cast<std::uintptr_t>(p) ||
              reinterpret_cast<std::uintptr_t>(other) >=
                  reinterpret_cast<std::uintptr_t>(p) + granule_)
      << "C is not ordered after A: the remainder of A's block is not C's";
  EXPECT_EQ(reserved(), 2 * granule_);
  gate_.open();
  SOMA_ASSERT_OK(somaFreeAsync(half, b_));
  SOMA_ASSERT_OK(somaFreeAsync(other, c_));
  SOMA_ASSERT_OK(somaDeviceSynchronize());
}

}  // namespace
