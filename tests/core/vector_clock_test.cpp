// vector_clock (S11 "follow event dependencies"): what an event's record copies and a wait merges.
// Merge and the record's copy take one walk in the common case; both must agree with the
// element-wise maximum of every stream's position, whatever the streams.
#include "core/vector_clock.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <vector>

namespace {

using soma::detail::vector_clock;

vector_clock clock_of(const std::map<std::uint64_t, std::uint64_t>& positions) {
  vector_clock c;
  for (const auto& [stream, position] : positions) c.raise(stream, position);
  return c;
}

std::map<std::uint64_t, std::uint64_t> positions_of(const vector_clock& c) {
  std::map<std::uint64_t, std::uint64_t> out;
  std::uint64_t previous = 0;
  for (const vector_clock::entry& e : c.entries()) {
    EXPECT_GT(e.stream_id, previous) << "entries out of order or repeated";
    previous = e.stream_id;
    out[e.stream_id] = e.position;
  }
  return out;
}

TEST(S11_VectorClock, MergeRaisesStreamsItKnows) {
  vector_clock c = clock_of({{1, 5}, {3, 2}});
  c.merge(clock_of({{1, 7}, {3, 1}}));
  EXPECT_EQ(positions_of(c), (std::map<std::uint64_t, std::uint64_t>{{1, 7}, {3, 2}}));
}

TEST(S11_VectorClock, MergeAddsStreamsItDidNotKnow) {
  vector_clock c = clock_of({{2, 1}});
  c.merge(clock_of({{1, 4}, {2, 0}, {3, 9}}));
  EXPECT_EQ(positions_of(c), (std::map<std::uint64_t, std::uint64_t>{{1, 4}, {2, 1}, {3, 9}}));
}

TEST(S11_VectorClock, MergeOfKnownThenUnknownStreamsKeepsEveryMaximum) {
  // The walk raises stream 1, then meets stream 2, unknown: the rest is inserted, and stream 1
  // is not raised twice past its maximum.
  vector_clock c = clock_of({{1, 1}, {3, 3}});
  c.merge(clock_of({{1, 2}, {2, 2}, {3, 1}}));
  EXPECT_EQ(positions_of(c), (std::map<std::uint64_t, std::uint64_t>{{1, 2}, {2, 2}, {3, 3}}));
}

TEST(S11_VectorClock, ARecordCopiesTheClockWithItsOwnStreamRaised) {
  const vector_clock from = clock_of({{1, 1}, {3, 3}});
  vector_clock captured;
  captured.assign_raised(from, 2, 7);
  EXPECT_EQ(positions_of(captured),
            (std::map<std::uint64_t, std::uint64_t>{{1, 1}, {2, 7}, {3, 3}}));
  captured.assign_raised(from, 3, 1);  // known already, and further on: kept
  EXPECT_EQ(positions_of(captured), (std::map<std::uint64_t, std::uint64_t>{{1, 1}, {3, 3}}));
  captured.assign_raised(from, 3, 9);
  EXPECT_EQ(positions_of(captured), (std::map<std::uint64_t, std::uint64_t>{{1, 1}, {3, 9}}));
  captured.assign_raised(from, 4, 1);
  EXPECT_EQ(positions_of(captured),
            (std::map<std::uint64_t, std::uint64_t>{{1, 1}, {3, 3}, {4, 1}}));
  captured.assign_raised(vector_clock(), 5, 2);
  EXPECT_EQ(positions_of(captured), (std::map<std::uint64_t, std::uint64_t>{{5, 2}}));
  captured.assign_raised(captured, 1, 4);  // from itself: a raise
  EXPECT_EQ(positions_of(captured), (std::map<std::uint64_t, std::uint64_t>{{1, 4}, {5, 2}}));
}

TEST(S11_VectorClock, MergeAndRecordAgreeWithTheMaximumOfEveryStream) {
  std::mt19937_64 random(11);
  auto random_positions = [&] {
    std::map<std::uint64_t, std::uint64_t> positions;
    const int count = static_cast<int>(random() % 6);
    for (int i = 0; i < count; ++i) positions[1 + random() % 8] = random() % 20;
    return positions;
  };
  for (int round = 0; round < 2000; ++round) {
    std::map<std::uint64_t, std::uint64_t> expected = random_positions();
    const std::map<std::uint64_t, std::uint64_t> other = random_positions();
    vector_clock c = clock_of(expected);
    c.merge(clock_of(other));
    for (const auto& [stream, position] : other)
      expected[stream] = std::max(expected[stream], position);
    ASSERT_EQ(positions_of(c), expected) << "round " << round;

    const std::uint64_t stream = 1 + random() % 8;
    const std::uint64_t position = random() % 20;
    vector_clock captured = clock_of(random_positions());  // storage to reuse
    captured.assign_raised(c, stream, position);
    expected[stream] = std::max(expected[stream], position);
    ASSERT_EQ(positions_of(captured), expected) << "round " << round;
  }
}

}  // namespace
