// history_log: memory history of the pools' fast path, written into a log per stream cache
// (docs/observability.md, "Cost"). The events read back name their pool, stream and scope, and
// keep the order each thread made them in and each block went through them in, across the
// caches' chunks and the threads' own.
#include "core/history_log.hpp"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <chrono>
#include <cstdint>
#include <future>
#include <iterator>
#include <memory>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#include "core/pool.hpp"
#include "fake_memory_provider.hpp"
#include "process_barrier_for_tests.hpp"

namespace {

using soma::detail::block;
using soma::detail::decode_log;
using soma::detail::history_clock;
using soma::detail::history_event;
using soma::detail::history_kind;
using soma::detail::history_ring;
using soma::detail::log_entry;
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
    return allocations_and_frees_dropped(nullptr);
  }
  static std::vector<history_event> allocations_and_frees_dropped(std::uint64_t* dropped) {
    std::vector<history_event> out;
    for (const history_event& e : history().events(dropped)) {
      if (e.kind == history_kind::allocate || e.kind == history_kind::free) out.push_back(e);
    }
    return out;
  }

  /// Entries the stream caches' logs wrote into the ring in use.
  static std::size_t log_entries_written() {
    std::uint64_t lost = 0;
    std::size_t entries = 0;
    for (const history_ring::chunk_events& chunk : history().ring_in_use()->read(&lost)) {
      if (chunk.entry_words == 2) entries += chunk.words.size() / 2;
    }
    return entries;
  }
  /// Allocates and frees on a_, then starts recording into a ring of `capacity`: a block of
  /// 4 KiB that a_'s cache holds, whose next allocation is a hit.
  block* cached_block(std::size_t capacity) {
    block* x = allocate(4 * KiB, a_);
    pool_->free(x, a_);
    history().start(capacity);
    return x;
  }
  /// Allocates and frees on a_ `pairs` times; each must be a hit of the cache, block x.
  void reuse(block* x, int pairs, std::size_t bytes = 4 * KiB) {
    for (int i = 0; i < pairs; ++i) {
      block* hit = allocate(bytes, a_);
      ASSERT_EQ(hit, x);
      pool_->free(hit, a_);
    }
  }

  // Streams first: the pool, destroyed before them, files their cached frees as it goes.
  stream_timeline a_{0};
  stream_timeline b_{1};
  std::vector<std::unique_ptr<stream_timeline>> more_streams_;
  std::unique_ptr<pool> pool_;
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
}

/// One thread alternates two streams, each stream's cache logging into a chunk of its own
/// (warm: the slow path's first allocations); the stamps must interleave them again.
void expect_two_streams_keep_the_threads_order(pool& p, const stream_timeline& a,
                                               const stream_timeline& b) {
  std::vector<std::pair<history_kind, std::uint64_t>> made;
  for (int i = 0; i < 200; ++i) {
    const stream_timeline& stream = i % 3 == 0 ? b : a;
    auto hit = p.allocate(4 * KiB, stream);
    ASSERT_TRUE(hit.ok());
    EXPECT_EQ(hit.value()->how, served_by::stream_cache);
    p.free(hit.value(), stream);
    made.emplace_back(history_kind::allocate, stream.history_name());
    made.emplace_back(history_kind::free, stream.history_name());
  }
  std::vector<history_event> events;
  for (const history_event& e : memory_history::process().events()) {
    if (e.kind == history_kind::allocate || e.kind == history_kind::free) events.push_back(e);
  }
  ASSERT_EQ(events.size(), made.size());
  for (std::size_t i = 0; i < made.size(); ++i) {
    EXPECT_EQ(events[i].kind, made[i].first) << "event " << i;
    EXPECT_EQ(events[i].stream, made[i].second) << "event " << i;
  }
}

TEST_F(HistoryLog, S11_OneThreadsEventsOnTwoStreamsKeepTheOrderItMadeThem) {
  pool_->free(allocate(4 * KiB, a_), a_);
  pool_->free(allocate(4 * KiB, b_), b_);
  history().start(10000);  // from the caches' hits on
  expect_two_streams_keep_the_threads_order(*pool_, a_, b_);
}

TEST_F(HistoryLog, S11_WithTheCacheLocksBiasedTheThreadsOrderHoldsToo) {
  // Biased, a cache's lock hands the log the thread's slot, through which it reaches the
  // thread's state without a thread_local.
  if (const char* why = soma_test::register_process_barrier()) GTEST_SKIP() << why;
  soma::detail::biased_lock::use_process_barrier(&soma_test::real_barrier);
  history().stop();
  for (std::uint32_t i = 0; i < soma::detail::biased_lock::bias_after_entries; ++i) {
    pool_->free(allocate(4 * KiB, a_), a_);
    pool_->free(allocate(4 * KiB, b_), b_);
  }
  history().start(10000);
  expect_two_streams_keep_the_threads_order(*pool_, a_, b_);
  soma::detail::biased_lock::use_process_barrier(nullptr);
}

TEST_F(HistoryLog, S11_ABlockFreedOnAnotherStreamByAnotherThreadComesAfterItsAllocation) {
  // A small ring: a cache's log takes a new chunk (and a fresh clock reading) every few events.
  history().start(64);
  block* x = allocate(4 * KiB, a_);
  pool_->free(x, a_);
  std::promise<void> b_logged;
  std::promise<block*> x_taken;
  std::thread other([&] {
    // This thread's events on b: b's log marks them now, and the thread's last event is there.
    for (int i = 0; i < 3; ++i) pool_->free(allocate(8 * KiB, b_), b_);
    b_logged.set_value();
    block* taken = x_taken.get_future().get();
    pool_->free(taken, b_);  // into b's log, whose mark is older than x's allocation
  });
  b_logged.get_future().wait();
  // Many events on a: its log moves to fresh chunks, stamped later than b's mark.
  for (int i = 0; i < 40; ++i) pool_->free(allocate(4 * KiB, a_), a_);
  block* taken = allocate(4 * KiB, a_);
  ASSERT_EQ(taken, x);
  x_taken.set_value(taken);
  other.join();

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

TEST_F(HistoryLog, S11_LogsThatFindNoFreeChunkDropTheirEventsAndSpoilNoOthers) {
  // More stream caches log at once than a small ring has chunks: claims fail while other
  // writers take the chunks given back. Every event read back must still be one that was made:
  // each stream allocates a size of its own, so an entry written into another writer's chunk
  // shows up as a stream with a size not its own, or as an event that is no event at all.
  history().start(16);  // 4 + 64 chunks of 4 log entries (or 1 event of the thread's)
  constexpr std::size_t threads = 4;
  constexpr std::size_t streams_each = 24;
  std::vector<std::unique_ptr<stream_timeline>>& streams = more_streams_;
  streams.reserve(threads * streams_each);
  for (std::size_t s = 0; s < threads * streams_each; ++s) {
    streams.push_back(std::make_unique<stream_timeline>(static_cast<std::uint32_t>(2 + s)));
    streams.back()->set_history_name(0x100 + s);
  }
  auto bytes_of = [](std::uint64_t name) { return 256 * (name - 0x100 + 1); };
  std::vector<std::thread> workers;
  workers.reserve(threads);
  for (std::size_t w = 0; w < threads; ++w) {
    workers.emplace_back([&, w] {
      for (int round = 0; round < 300; ++round) {
        for (std::size_t s = 0; s < streams_each; ++s) {
          const stream_timeline& stream = *streams[w * streams_each + s];
          auto taken = pool_->allocate(bytes_of(stream.history_name()), stream);
          if (taken.ok()) pool_->free(taken.value(), stream);
        }
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  std::uint64_t dropped = 0;
  const std::vector<history_event> events = history().events(&dropped);
  EXPECT_GT(dropped, 0u) << "the ring was too small for every writer";
  for (const history_event& e : events) {
    ASSERT_TRUE(e.kind == history_kind::allocate || e.kind == history_kind::free)
        << static_cast<int>(e.kind);
    ASSERT_EQ(e.pool, pool_->serial());
    ASSERT_GE(e.stream, 0x100u);
    ASSERT_LT(e.stream, 0x100u + threads * streams_each);
    ASSERT_EQ(e.bytes, bytes_of(e.stream)) << "stream " << e.stream;
  }
}

TEST_F(HistoryLog, S11_AStreamThatTakesOverACacheSlotIsNamedInItsEvents) {
  pool_->free(allocate(4 * KiB, a_), a_);
  pool_->forget_stream(a_);  // a's slot goes to the next stream that takes it
  stream_timeline& c = *more_streams_.emplace_back(std::make_unique<stream_timeline>(0));
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

TEST_F(HistoryLog, S11_ABlockReusedOverAndOverTakesARunEntryAndReadsBackEventByEvent) {
  block* x = cached_block(100000);
  const std::uint64_t beat = history_clock::beat();
  reuse(x, 1000);
  const std::uint64_t beats = history_clock::beat() - beat;

  const std::vector<history_event> events = allocations_and_frees();
  ASSERT_EQ(events.size(), 2000u);
  for (std::size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].kind, i % 2 == 0 ? history_kind::allocate : history_kind::free) << i;
    EXPECT_EQ(events[i].address, x->address) << i;
    EXPECT_EQ(events[i].bytes, 4 * KiB) << i;
    EXPECT_EQ(events[i].stream, 0xau) << i;
    EXPECT_EQ(events[i].how, static_cast<std::uint8_t>(served_by::stream_cache)) << i;
    EXPECT_EQ(events[i].label, 0u) << i;
    if (i > 0) {
      EXPECT_GE(events[i].time_ns, events[i - 1].time_ns) << i;
    }
  }
  // A chunk: a source, a mark, the first event and a repeat that counts the rest, until the
  // events fill the chunk's room (the next event still has an entry there). Each beat of the clock
  // during the loop ends the run (a mark, an event, a repeat).
  const std::size_t chunks = events.size() / history().ring_in_use()->log_entries() + 1;
  EXPECT_LE(log_entries_written(), 5 * chunks + 3 * beats) << beats << " beats";
}

TEST_F(HistoryLog, S11_ARunEndsWhereTheBytesTheBeatOrTheThreadsScopeChangeOrAnotherBlockComes) {
  block* x = allocate(4 * KiB, a_);
  block* y = allocate(8 * KiB, a_);
  pool_->free(x, a_);
  pool_->free(y, a_);
  history().start(100000);
  struct pair_made {
    const block* b;
    std::size_t bytes;
    std::uint32_t label;
  };
  std::vector<pair_made> made;
  auto pairs = [&](block* b, int count, std::size_t bytes, std::uint32_t label = 0) {
    reuse(b, count, bytes);
    for (int i = 0; i < count; ++i) made.push_back({b, bytes, label});
  };
  pairs(x, 3, 4 * KiB);
  pairs(x, 2, 4000);  // the same block for fewer bytes
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  history_clock::advance();
  const std::size_t after_beat = made.size() * 2;
  pairs(x, 2, 4000);
  const std::uint32_t label = history().label("inner");
  memory_history::push_scope(label);
  pairs(x, 2, 4000, label);
  memory_history::pop_scope();
  pairs(y, 2, 8 * KiB);
  pairs(x, 2, 4 * KiB);

  const std::vector<history_event> events = allocations_and_frees();
  ASSERT_EQ(events.size(), made.size() * 2);
  for (std::size_t i = 0; i < events.size(); ++i) {
    const pair_made& m = made[i / 2];
    EXPECT_EQ(events[i].kind, i % 2 == 0 ? history_kind::allocate : history_kind::free) << i;
    EXPECT_EQ(events[i].address, m.b->address) << i;
    EXPECT_EQ(events[i].bytes, m.bytes) << i;
    EXPECT_EQ(events[i].label, m.label) << i;
  }
  EXPECT_GT(events[after_beat].time_ns, events[after_beat - 1].time_ns)
      << "a beat of the clock ends the run: the events after it are stamped later";
}

TEST_F(HistoryLog, S11_ARunsEventsTakeTheRingsRoomAndCountWhenDropped) {
  block* x = cached_block(64);
  reuse(x, 20000);
  std::uint64_t dropped = 0;
  const std::vector<history_event> events = allocations_and_frees_dropped(&dropped);
  ASSERT_EQ(events.size(), 64u);
  // Every event made is read back or counted as dropped (a run's repeats too; the chunks' marks
  // and sources count among them).
  EXPECT_GE(dropped + events.size(), 40000u);
  for (std::size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].kind, i % 2 == 0 ? history_kind::allocate : history_kind::free) << i;
    EXPECT_EQ(events[i].address, x->address) << i;
  }
}

TEST_F(HistoryLog, S11_AnAllocationInAScopeOpenedBeforeTheRunStartedCarriesItsLabel) {
  block* x = allocate(4 * KiB, a_);  // outside any scope
  const std::uint32_t label = history().label("inner");
  memory_history::push_scope(label);
  pool_->free(x, a_);  // x has no label: the free's event may start a run
  block* hit = allocate(4 * KiB, a_);
  ASSERT_EQ(hit, x);
  EXPECT_EQ(hit->scope.load(), label) << "the thread's scope, not the run's";
  pool_->free(hit, a_);
  memory_history::pop_scope();
  const std::vector<history_event> events = allocations_and_frees();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[1].label, 0u);
  EXPECT_EQ(events[2].kind, history_kind::allocate);
  EXPECT_EQ(events[2].label, label);
  EXPECT_EQ(events[3].label, label);
}

TEST_F(HistoryLog, S11_AFreeOnAStreamThatTookAnotherStreamsPlaceIsNamedForIt) {
  // A stream, forgotten and destroyed, and a new one made where it was (same slot, same
  // address): a block allocated on the first and freed on the second looks freed on the stream
  // it came from, and must still be named for the second.
  alignas(stream_timeline) std::array<std::byte, sizeof(stream_timeline)> place{};
  auto* stream = new (place.data()) stream_timeline(2);
  stream->set_history_name(0xd);
  pool_->free(allocate(4 * KiB, *stream), *stream);
  block* x = allocate(4 * KiB, *stream);  // a hit: the run's first event
  pool_->forget_stream(*stream);
  stream->~stream_timeline();
  stream = new (place.data()) stream_timeline(2);
  stream->set_history_name(0xe);
  pool_->free(x, *stream);
  const std::vector<history_event> events = allocations_and_frees();
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[events.size() - 2].stream, 0xdu);
  EXPECT_EQ(events.back().kind, history_kind::free);
  EXPECT_EQ(events.back().stream, 0xeu) << "the stream that freed it";
  pool_->forget_stream(*stream);
  pool_.reset();  // before the stream it may still name goes
  stream->~stream_timeline();
}

TEST_F(HistoryLog, S11_AReaderWhileARunGrowsReadsEachOfItsEventsInOrder) {
  block* x = cached_block(100000);
  std::atomic<bool> done{false};
  std::thread writer([&] {
    reuse(x, 20000);
    done.store(true);
  });
  int reads = 0;
  while (!done.load() || reads == 0) {
    const std::vector<history_event> events = allocations_and_frees();
    for (std::size_t i = 0; i < events.size(); ++i) {
      ASSERT_EQ(events[i].kind, i % 2 == 0 ? history_kind::allocate : history_kind::free) << i;
      ASSERT_EQ(events[i].address, x->address) << i;
    }
    ++reads;
  }
  writer.join();
  EXPECT_EQ(allocations_and_frees().size(), 40000u);
}

/// Each event read back is on `address`, their kinds turn about from `first`, and their times
/// never go back.
void expect_turns_about(const std::vector<history_event>& events, std::uint64_t address,
                        history_kind first = history_kind::allocate) {
  const history_kind second =
      first == history_kind::allocate ? history_kind::free : history_kind::allocate;
  for (std::size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].kind, i % 2 == 0 ? first : second) << i;
    EXPECT_EQ(events[i].address, address) << i;
    if (i > 0) {
      EXPECT_GE(events[i].time_ns, events[i - 1].time_ns) << i;
    }
  }
}

TEST_F(HistoryLog, S11_ARunWhoseBlockADrainTookGoesOnEventByEvent) {
  // A run begun by a free (x in the cache); a drain takes x to the index without a pop; the slow
  // path serves x again, on another thread (its own chunk), and this thread, whose last event is
  // still the run's, frees it into the cache: an event of its own after that allocation, not a
  // repeat of the run (which would read back as an allocation).
  block* x = allocate(4 * KiB, a_);
  history().start(100000);
  pool_->free(x, a_);
  reuse(x, 3);
  pool_->forget_stream(a_);  // drains a_'s cache; a_ goes on with an empty one
  block* again = std::async(std::launch::async, [&] { return allocate(4 * KiB, a_); }).get();
  ASSERT_EQ(again, x) << "the slow path finds x in the index";
  EXPECT_NE(again->how, served_by::stream_cache);
  pool_->free(again, a_);
  reuse(x, 4);
  const std::vector<history_event> events = allocations_and_frees();
  ASSERT_EQ(events.size(), 1u + 2 * 3 + 2 + 2 * 4);
  expect_turns_about(events, x->address, history_kind::free);
  EXPECT_NE(events[7].how, static_cast<std::uint8_t>(served_by::stream_cache))
      << "the slow path's allocation, between the drain and the free";
}

TEST_F(HistoryLog, S11_RecordingStoppedAndStartedInsideARunKeepsOnlyTheNewRingsEvents) {
  block* x = cached_block(100000);
  reuse(x, 50);
  history().start(100000);  // a new ring, mid-run
  reuse(x, 7);
  std::vector<history_event> events = allocations_and_frees();
  ASSERT_EQ(events.size(), 14u);
  expect_turns_about(events, x->address);
  history().stop();
  reuse(x, 5);  // not recorded
  history().start(100000);
  reuse(x, 9);
  events = allocations_and_frees();
  ASSERT_EQ(events.size(), 18u);
  expect_turns_about(events, x->address);
}

TEST_F(HistoryLog, S11_APoolDestroyedInsideARunLeavesItsEventsToRead) {
  block* x = cached_block(100000);
  reuse(x, 300);
  const std::uint64_t address = x->address;
  pool_.reset();  // its caches and their logs go, the run open
  std::uint64_t dropped = 0;
  const std::vector<history_event> events = allocations_and_frees_dropped(&dropped);
  ASSERT_EQ(events.size(), 600u);
  expect_turns_about(events, address);
  EXPECT_EQ(dropped, 0u);
}

TEST_F(HistoryLog, S11_RunsOfEveryLengthAcrossAChunksEndReadBackWhole) {
  // Every count of pairs up to two chunks and a little over, each in a ring of its own: a run
  // that fills its chunk exactly, by one less or one more, loses and invents no event.
  block* x = cached_block(100000);
  const std::uint32_t entries = history().ring_in_use()->log_entries();
  for (std::uint32_t pairs = 1; pairs <= entries + 3; ++pairs) {
    history().start(100000);
    reuse(x, static_cast<int>(pairs));
    std::uint64_t dropped = 0;
    const std::vector<history_event> events = allocations_and_frees_dropped(&dropped);
    ASSERT_EQ(events.size(), 2u * pairs) << pairs << " pairs";
    ASSERT_EQ(dropped, 0u) << pairs << " pairs";
    for (std::size_t i = 0; i < events.size(); ++i) {
      ASSERT_EQ(events[i].kind, i % 2 == 0 ? history_kind::allocate : history_kind::free)
          << pairs << " pairs, event " << i;
    }
    // No chunk holds more events than it would without runs (a source and a mark, then events):
    // a run's events count against its room.
    std::uint64_t lost = 0;
    for (const history_ring::chunk_events& chunk : history().ring_in_use()->read(&lost)) {
      if (chunk.entry_words != 2) continue;
      std::vector<history_event> held;
      decode_log(chunk.words.data(), chunk.words.size() / 2, entries, held);
      ASSERT_LE(held.size(), entries - 2) << pairs << " pairs";
    }
  }
}

TEST_F(HistoryLog, S11_OneThreadAllocatingAndAnotherFreeingTheSameBlockKeepEveryEvent) {
  // x taken from a_'s cache by one thread and given back on a_ by another, in turns: the two
  // threads' events on one block, each after the other's, none lost to a run.
  block* x = cached_block(100000);
  constexpr int turns = 500;
  std::atomic<int> step{0};  // even: the allocator's turn; odd: the freer's
  std::atomic<block*> handed{nullptr};
  std::thread allocator([&] {
    for (int i = 0; i < turns; ++i) {
      while (step.load() != 2 * i) std::this_thread::yield();
      handed.store(allocate(4 * KiB, a_));
      step.store(2 * i + 1);
    }
  });
  std::thread freer([&] {
    for (int i = 0; i < turns; ++i) {
      while (step.load() != 2 * i + 1) std::this_thread::yield();
      pool_->free(handed.load(), a_);
      step.store(2 * i + 2);
    }
  });
  allocator.join();
  freer.join();
  const std::vector<history_event> events = allocations_and_frees();
  ASSERT_EQ(events.size(), 2u * turns);
  expect_turns_about(events, x->address);
}

TEST(HistoryLogDecode, ARepeatEntryStandsForItsCountOfEventsOnTheLastEventsBlockKindsTurnAbout) {
  auto tag = [](log_entry what, std::uint64_t low = 0) {
    return low | std::uint64_t{static_cast<std::uint8_t>(what)} << 56;
  };
  auto event = [&](history_kind kind, std::uint64_t bytes) {
    return tag(log_entry::event, bytes | std::uint64_t{static_cast<std::uint8_t>(kind)} << 48);
  };
  const std::uint64_t words[] = {
      tag(log_entry::repeat),    5,    // no event before it: nothing
      tag(log_entry::source, 7), 0xa,  // pool 7, device 0, stream 0xa
      tag(log_entry::mark),      1000, event(history_kind::free, 4096),    0x1000,
      tag(log_entry::repeat),    3,    event(history_kind::allocate, 512), 0x2000,
      tag(log_entry::repeat),    1000,  // beyond the chunk's room: never written so
  };
  std::vector<history_event> out;
  decode_log(words, std::size(words) / 2, 8, out);
  const history_kind free = history_kind::free;
  const history_kind alloc = history_kind::allocate;
  const std::vector<std::pair<history_kind, std::uint64_t>> expected = {
      {free, 0x1000},  {alloc, 0x1000}, {free, 0x1000}, {alloc, 0x1000}, {alloc, 0x2000},
      {free, 0x2000},  {alloc, 0x2000}, {free, 0x2000}, {alloc, 0x2000}, {free, 0x2000},
      {alloc, 0x2000}, {free, 0x2000},  {alloc, 0x2000}};
  ASSERT_EQ(out.size(), expected.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i].kind, expected[i].first) << i;
    EXPECT_EQ(out[i].address, expected[i].second) << i;
    EXPECT_EQ(out[i].bytes, expected[i].second == 0x1000 ? 4096u : 512u) << i;
    EXPECT_EQ(out[i].stream, 0xau) << i;
    EXPECT_EQ(out[i].pool, 7u) << i;
    EXPECT_EQ(out[i].time_ns, 1000u) << i;
  }
}

}  // namespace
