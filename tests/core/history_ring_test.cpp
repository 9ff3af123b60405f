// history_ring and history_clock: memory history's per-thread chunks and its stamps
// (docs/observability.md, "Cost").
#include "core/history_ring.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <thread>
#include <vector>

#include "core/history_clock.hpp"

namespace {

using soma::detail::history_clock;
using soma::detail::history_ring;
using soma::detail::history_words;

// A thread's cursor, as memory_history keeps one. Each test writes from threads of its own, which
// end (and hand their chunks back) while the test's ring is alive.
thread_local history_ring::cursor cursor;

template <class Write>
void in_a_thread(Write write) {
  std::thread(write).join();
}

history_words event(std::uint64_t thread, std::uint64_t n) {
  return {{thread, n, 0, 0, 0, 0, 0, 0}};
}

std::vector<std::pair<std::uint64_t, std::uint64_t>> read_all(const history_ring& ring,
                                                              std::uint64_t* dropped) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
  for (const auto& chunk : ring.read(dropped)) {
    for (std::size_t i = 0; i + 8 <= chunk.words.size(); i += 8)
      out.emplace_back(chunk.words[i], chunk.words[i + 1]);
  }
  return out;
}

TEST(HistoryRing, OneThreadKeepsItsEventsInOrder) {
  history_ring ring(1000);
  in_a_thread([&] {
    for (std::uint64_t n = 0; n < 500; ++n) ring.write(cursor, event(1, n));
  });
  std::uint64_t dropped = 99;
  const auto events = read_all(ring, &dropped);
  ASSERT_EQ(events.size(), 500u);
  for (std::uint64_t n = 0; n < 500; ++n) EXPECT_EQ(events[n].second, n);
  EXPECT_EQ(dropped, 0u);
}

TEST(HistoryRing, AFullRingKeepsAtLeastItsCapacityOfTheNewestAndCountsTheRest) {
  history_ring ring(1000);
  const std::uint64_t written = 20'000;
  in_a_thread([&] {
    for (std::uint64_t n = 0; n < written; ++n) ring.write(cursor, event(1, n));
  });
  std::uint64_t dropped = 0;
  const auto events = read_all(ring, &dropped);
  ASSERT_GE(events.size(), 1000u);
  EXPECT_EQ(events.size() + dropped, written) << "each event kept or counted as dropped";
  for (std::size_t i = 0; i < events.size(); ++i)
    EXPECT_EQ(events[i].second, written - events.size() + i) << "the newest, in order";
}

TEST(HistoryRing, RestartForgetsWhatWasWrittenAndReusesTheRing) {
  history_ring ring(64);
  in_a_thread([&] {
    for (std::uint64_t n = 0; n < 10; ++n) ring.write(cursor, event(1, n));
    ring.restart();
    ring.write(cursor, event(1, 100));
  });
  std::uint64_t dropped = 0;
  const auto events = read_all(ring, &dropped);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].second, 100u);
  EXPECT_EQ(dropped, 0u);
}

TEST(HistoryRing, ThreadsWriteWithoutLosingOrderWhileARingIsRead) {
  history_ring ring(4096);
  constexpr int threads = 4;
  constexpr std::uint64_t per_thread = 1000;  // all fit: nothing is dropped
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    while (!stop.load()) {
      std::uint64_t dropped = 0;
      EXPECT_LE(read_all(ring, &dropped).size(), threads * per_thread);
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < threads; ++t) {
    writers.emplace_back([&ring, t] {
      for (std::uint64_t n = 0; n < per_thread; ++n)
        ring.write(cursor, event(static_cast<std::uint64_t>(t), n));
    });
  }
  for (auto& w : writers) w.join();
  stop = true;
  reader.join();
  std::uint64_t dropped = 0;
  std::map<std::uint64_t, std::uint64_t> next;  // per thread: the event expected next
  for (const auto& [thread, n] : read_all(ring, &dropped)) EXPECT_EQ(n, next[thread]++);
  for (int t = 0; t < threads; ++t) EXPECT_EQ(next[static_cast<std::uint64_t>(t)], per_thread);
  EXPECT_EQ(dropped, 0u);
}

TEST(HistoryRing, AThreadThatEndsHandsItsChunkBack) {
  history_ring ring(16);  // chunks of one event: each thread would otherwise keep one
  for (int t = 0; t < 200; ++t) {
    in_a_thread([&ring, t] { ring.write(cursor, event(static_cast<std::uint64_t>(t), 0)); });
  }
  std::uint64_t dropped = 0;
  const auto events = read_all(ring, &dropped);
  EXPECT_GE(events.size(), 16u);
  EXPECT_EQ(events.size() + dropped, 200u);
  EXPECT_EQ(events.back().first, 199u) << "the newest thread's event is kept";
}

TEST(HistoryClock, StampsNeverGoBackAndPassTheFloor) {
  history_clock clock;
  clock.start();
  history_clock::thread_state thread;
  std::uint64_t last = 0;
  for (int i = 0; i < 1000; ++i) {
    const std::uint64_t stamp = clock.cheap(thread, 0);
    EXPECT_GE(stamp, last);
    last = stamp;
  }
  const std::uint64_t floor = last + 1'000'000'000'000ull;
  EXPECT_GT(clock.cheap(thread, floor), floor) << "after the block's previous event";
  EXPECT_GT(history_clock::exact(thread, 0), floor) << "and the thread's stamps stay ordered";
  clock.stop();
}

TEST(HistoryClock, ACheapStampIsReadAfresh32EventsLaterAtTheLatest) {
  history_clock clock;  // not started: no beat, only the count of events
  history_clock::thread_state thread;
  const std::uint64_t first = clock.cheap(thread, 0);
  std::uint64_t stamp = first;
  int same = 0;
  while (stamp == first && same < 100) {
    stamp = clock.cheap(thread, 0);
    if (stamp == first) ++same;
  }
  EXPECT_LE(same, 32);
  EXPECT_GT(stamp, first);
}

}  // namespace
