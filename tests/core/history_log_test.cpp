// history_log: memory history of the pools' fast path, written into a log per stream cache
// (docs/observability.md, "Cost"). The events read back name their pool, stream and scope, and
// keep the order each thread made them in and each block went through them in, across the
// caches' chunks and the threads' own.
#include "core/history_log.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "core/pool.hpp"
#include "fake_memory_provider.hpp"

namespace {

using soma::detail::block;
using soma::detail::history_event;
using soma::detail::history_kind;
using soma::detail::memory_history;
using soma::detail::pool;
using soma::detail::pool_config;
using soma::detail::served_by;
using soma::detail::stream_timeline;
using soma_test::fake_memory_provider;
using soma_test::fake_memory_state;

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;

class HistoryLog : public ::testing::Test {
 protected:
  void SetUp() override {
    auto memory = std::make_shared<fake_memory_state>();
    memory->granularity_bytes = 64 * KiB;
    pool_config config;
    config.device = 0;
    config.name = "test";
    config.max_size_bytes = 64 * MiB;
    config.reservation_bytes = 8 * MiB;
    pool_ = std::make_unique<pool>(config, std::make_unique<fake_memory_provider>(memory));
    a_.set_history_name(0xa);
    b_.set_history_name(0xb);
    history().start(10000);
  }
  void TearDown() override {
    history().stop();
    while (memory_history::pop_scope()) {
    }
  }
  static memory_history& history() { return memory_history::process(); }

  block* allocate(std::size_t bytes, const stream_timeline& stream) {
    auto taken = pool_->allocate(bytes, stream);
    EXPECT_TRUE(taken.ok()) << taken.error().message();
    return taken.ok() ? taken.value() : nullptr;
  }
  /// The allocations and frees recorded (pool events left out), oldest first.
  static std::vector<history_event> allocations_and_frees() {
    std::vector<history_event> out;
    for (const history_event& e : history().events()) {
      if (e.kind == history_kind::allocate || e.kind == history_kind::free) out.push_back(e);
    }
    return out;
  }

  std::unique_ptr<pool> pool_;
  stream_timeline a_{0};
  stream_timeline b_{1};
};

TEST_F(HistoryLog, S11_ACacheHitAndAFreeIntoTheCacheNameTheirPoolStreamAndScope) {
  block* grown = allocate(4 * KiB, a_);  // the slow path: the thread's own chunk
  pool_->free(grown, a_);                // into the stream's cache: its log
  memory_history::push_scope(history().label("forward"));
  block* hit = allocate(4 * KiB, a_);  // S11: the stream's own free, from its cache
  ASSERT_EQ(hit, grown);
  EXPECT_EQ(hit->how, served_by::stream_cache);
  EXPECT_EQ(hit->scope.load(), history().label("forward")) << "the block carries its scope";
  pool_->free(hit, a_);
  EXPECT_EQ(hit->scope.load(), 0u) << "a free takes the scope off";

  const std::vector<history_event> events = allocations_and_frees();
  ASSERT_EQ(events.size(), 4u);
  const history_kind kinds[] = {history_kind::allocate, history_kind::free, history_kind::allocate,
                                history_kind::free};
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(events[i].kind, kinds[i]) << i;
    EXPECT_EQ(events[i].address, grown->address) << i;
    EXPECT_EQ(events[i].bytes, 4 * KiB) << i;
    EXPECT_EQ(events[i].stream, 0xau) << i;
    EXPECT_EQ(events[i].pool, pool_->serial()) << i;
    EXPECT_EQ(events[i].device, 0) << i;
  }
  EXPECT_EQ(events[0].how, static_cast<std::uint8_t>(served_by::growth));
  EXPECT_EQ(events[2].how, static_cast<std::uint8_t>(served_by::stream_cache));
  EXPECT_EQ(events[0].label, 0u);
  EXPECT_EQ(events[2].label, history().label("forward")) << "the hit's scope";
  EXPECT_EQ(events[3].label, history().label("forward")) << "its free's";
  for (std::size_t i = 1; i < 4; ++i) EXPECT_LE(events[i - 1].time_ns, events[i].time_ns);
}

TEST_F(HistoryLog, S11_OneThreadsEventsOnTwoStreamsKeepTheOrderItMadeThem) {
  // Each stream's cache logs into a chunk of its own; the stamps must interleave them again.
  block* on_a = allocate(4 * KiB, a_);
  block* on_b = allocate(4 * KiB, b_);
  pool_->free(on_a, a_);
  pool_->free(on_b, b_);
  std::vector<std::pair<history_kind, std::uint64_t>> made = {{history_kind::allocate, 0xa},
                                                              {history_kind::allocate, 0xb},
                                                              {history_kind::free, 0xa},
                                                              {history_kind::free, 0xb}};
  for (int i = 0; i < 200; ++i) {
    const stream_timeline& stream = i % 3 == 0 ? b_ : a_;
    block* hit = allocate(4 * KiB, stream);
    pool_->free(hit, stream);
    made.emplace_back(history_kind::allocate, stream.history_name());
    made.emplace_back(history_kind::free, stream.history_name());
  }
  const std::vector<history_event> events = allocations_and_frees();
  ASSERT_EQ(events.size(), made.size());
  for (std::size_t i = 0; i < made.size(); ++i) {
    EXPECT_EQ(events[i].kind, made[i].first) << "event " << i;
    EXPECT_EQ(events[i].stream, made[i].second) << "event " << i;
  }
}

TEST_F(HistoryLog, S11_ABlockFreedOnAnotherStreamByAnotherThreadComesAfterItsAllocation) {
  // A small ring: a cache's log takes a new chunk (and a fresh clock reading) every few events.
  history().start(64);
  block* x = allocate(4 * KiB, a_);
  pool_->free(x, a_);
  std::thread other([&] {
    // This thread's events on b: its log's mark, from now.
    block* mine = allocate(8 * KiB, b_);
    pool_->free(mine, b_);
    for (int i = 0; i < 2; ++i) pool_->free(allocate(8 * KiB, b_), b_);
  });
  other.join();
  // Many events on a: its log moves to fresh chunks, stamped later than b's mark.
  for (int i = 0; i < 40; ++i) pool_->free(allocate(4 * KiB, a_), a_);
  block* taken = allocate(4 * KiB, a_);
  ASSERT_EQ(taken, x);
  std::thread([&] { pool_->free(taken, b_); }).join();  // into b's log, at b's older mark

  const std::vector<history_event> events = allocations_and_frees();
  std::size_t allocation = events.size();
  std::size_t free = events.size();
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (events[i].address != x->address) continue;
    if (events[i].kind == history_kind::allocate && events[i].stream == 0xa) allocation = i;
    if (events[i].kind == history_kind::free && events[i].stream == 0xb) free = i;
  }
  ASSERT_LT(allocation, events.size()) << "the last allocation of x was kept";
  ASSERT_LT(free, events.size()) << "its free on b was kept";
  EXPECT_LT(allocation, free) << "x's free on b comes after its allocation on a";
}

TEST_F(HistoryLog, S11_AStreamThatTakesOverACacheSlotIsNamedInItsEvents) {
  pool_->free(allocate(4 * KiB, a_), a_);
  pool_->forget_stream(a_);  // a's slot goes to the next stream that takes it
  stream_timeline c(0);
  c.set_history_name(0xc);
  block* first = allocate(4 * KiB, c);
  pool_->free(first, c);
  pool_->free(allocate(4 * KiB, c), c);  // a hit of the slot's cache, now c's
  const std::vector<history_event> events = allocations_and_frees();
  ASSERT_EQ(events.size(), 6u);
  EXPECT_EQ(events[1].stream, 0xau);
  for (std::size_t i = 2; i < 6; ++i) EXPECT_EQ(events[i].stream, 0xcu) << i;
  EXPECT_EQ(events[4].how, static_cast<std::uint8_t>(served_by::stream_cache));
}

TEST_F(HistoryLog, S11_RecordingStartedAgainFindsTheCachesLogsInTheNewRing) {
  block* x = allocate(4 * KiB, a_);
  pool_->free(x, a_);
  pool_->free(allocate(4 * KiB, a_), a_);
  history().start(500);  // another ring: what was recorded is dropped
  EXPECT_TRUE(allocations_and_frees().empty());
  pool_->free(allocate(4 * KiB, a_), a_);
  std::vector<history_event> events = allocations_and_frees();
  ASSERT_EQ(events.size(), 2u) << "the cache's log writes into the ring in use";
  EXPECT_EQ(events[0].address, x->address);
  history().start(500);  // the same capacity: the ring restarts
  pool_->free(allocate(4 * KiB, a_), a_);
  events = allocations_and_frees();
  EXPECT_EQ(events.size(), 2u);
}

TEST_F(HistoryLog, S11_NothingIsLoggedWhileRecordingIsOff) {
  pool_->free(allocate(4 * KiB, a_), a_);
  history().stop();
  memory_history::push_scope(history().label("off"));
  block* hit = allocate(4 * KiB, a_);
  EXPECT_EQ(hit->scope.load(), 0u) << "no scope is given while nothing records";
  pool_->free(hit, a_);
  EXPECT_EQ(allocations_and_frees().size(), 2u);
}

}  // namespace
