// memory_history: the rings recording goes into. A program may start recording again and again
// with other capacities (a tool that tunes it, or somaMemRecordHistory in a loop); the rings it
// keeps for writers still holding one stay bounded, and the history keeps the capacity asked for.
#include "core/memory_history.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>

namespace {

using soma::detail::history_event;
using soma::detail::history_kind;
using soma::detail::memory_history;

TEST(MemoryHistory, S11_StartingWithEveryCapacityFrom1To2000KeepsARingPerPowerOfTwo) {
  memory_history& history = memory_history::process();
  for (std::size_t capacity = 1; capacity <= 2000; ++capacity) {
    history.start(capacity);
    ASSERT_EQ(history.capacity(), capacity);
  }
  history.stop();
  // 1, 2, 4, ... 2048 (and whatever other tests of this process made): a fuzz input that did
  // this thousands of times held 2 GiB of rings.
  EXPECT_LE(history.rings_kept(), 16u);
}

TEST(MemoryHistory, S11_ARingOfAnotherSizeKeepsTheNewestOfTheCapacityAskedFor) {
  memory_history& history = memory_history::process();
  history.start(1000);  // a ring of 1024 holds it
  for (std::uint64_t i = 0; i < 1500; ++i) {
    history_event e;
    e.kind = history_kind::allocate;
    e.address = 0x1000 + i;
    history.record(e);
  }
  std::uint64_t dropped = 0;
  const auto events = history.events(&dropped);
  history.stop();
  ASSERT_EQ(events.size(), 1000u);
  EXPECT_EQ(dropped, 500u);
  EXPECT_EQ(events.front().address, 0x1000u + 500) << "the newest, oldest first";
  EXPECT_EQ(events.back().address, 0x1000u + 1499);
  history.start(1000);  // again: the same ring, its events forgotten
  EXPECT_TRUE(history.events().empty());
  history.stop();
}

}  // namespace
