// pool: growth across several address reservations (S9, S16), with the fake placing a second
// reservation right above, right below or apart from the first. An OS may hand out adjacent
// ranges (when other mappings next to a pool go away); the pool must still treat each
// reservation on its own, because the cuda backend maps memory inside one reservation only.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

#include "core/pool.hpp"
#include "fake_memory_provider.hpp"

namespace {

using soma::detail::pool;
using soma::detail::pool_config;
using soma::detail::stream_timeline;
using soma_test::fake_memory_provider;
using soma_test::fake_memory_state;

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;
constexpr std::size_t kGranule = 64 * KiB;
constexpr std::size_t kReservation = 8 * MiB;

enum class placement { right_above, right_below, apart_above, apart_below };

std::uintptr_t second_base(placement where, std::uintptr_t first) {
  switch (where) {
    case placement::right_above:
      return first + kReservation;
    case placement::right_below:
      return first - kReservation;
    case placement::apart_above:
      return first + kReservation + 4 * kGranule;
    case placement::apart_below:
      return first - kReservation - 4 * kGranule;
  }
  return 0;
}

// The first reservation keeps an unmapped tail too small for the next request, so the pool
// reserves again, at a base the fake chooses. Later the first reservation is wholly unmapped
// and a request fits neither reservation alone but would fit the two together.
void grow_into_a_second_reservation(placement where) {
  auto memory = std::make_shared<fake_memory_state>();
  memory->granularity_bytes = kGranule;
  pool_config config;
  config.name = "reservations";
  config.max_size_bytes = 64 * MiB;
  config.reservation_bytes = kReservation;
  {
    pool p(config, std::make_unique<fake_memory_provider>(memory));
    stream_timeline stream(0);

    auto big = p.allocate(7 * MiB + 512 * KiB, stream);
    ASSERT_TRUE(big.ok()) << big.error().message();
    ASSERT_EQ(memory->reservations.size(), 1u);
    const std::uintptr_t first = memory->reservations.begin()->first;
    ASSERT_EQ(big.value()->address, first);

    const std::uintptr_t second = second_base(where, first);
    memory->reserve_at.push_back(second);
    auto small = p.allocate(1 * MiB, stream);
    ASSERT_TRUE(small.ok()) << small.error().message();
    EXPECT_EQ(memory->reserve_calls, 2u);
    EXPECT_EQ(small.value()->address, second) << "growth must start at the new reservation";

    // The first reservation's 512 KiB tail is still there for a request that fits it.
    auto tail = p.allocate(512 * KiB, stream);
    ASSERT_TRUE(tail.ok()) << tail.error().message();
    EXPECT_EQ(memory->reserve_calls, 2u) << "the free tail of the first reservation was lost";
    p.free(tail.value(), stream);  // nothing enqueued: proven at once

    p.free(big.value(), stream);
    p.trim_to(0);  // the first reservation is now wholly unmapped; small stays
    ASSERT_EQ(memory->committed_bytes(), 1 * MiB);

    // 12 MiB fits neither reservation alone (8 MiB and 7 MiB free), only both together.
    auto large = p.allocate(12 * MiB, stream);
    ASSERT_TRUE(large.ok()) << large.error().message();
    EXPECT_EQ(memory->reserve_calls, 3u) << "a request was placed across two reservations";
    const std::uintptr_t address = large.value()->address;
    EXPECT_FALSE(address >= first && address < first + kReservation);
    EXPECT_FALSE(address >= second && address < second + kReservation);

    p.free(large.value(), stream);
    p.free(small.value(), stream);
  }
  // The fake checked every commit against the reservations (one reservation per commit) and
  // every free_reservation against its reserve.
  EXPECT_TRUE(memory->reservations.empty());
  EXPECT_TRUE(memory->committed.empty());
}

TEST(S16_PoolReservation, SecondReservationRightAboveTheFirstStaysApart) {
  grow_into_a_second_reservation(placement::right_above);
}

TEST(S16_PoolReservation, SecondReservationRightBelowTheFirstStaysApart) {
  grow_into_a_second_reservation(placement::right_below);
}

TEST(S16_PoolReservation, SecondReservationAboveWithAGap) {
  grow_into_a_second_reservation(placement::apart_above);
}

TEST(S16_PoolReservation, SecondReservationBelowWithAGap) {
  grow_into_a_second_reservation(placement::apart_below);
}

// S9: release gives each reservation's ranges back to that reservation. Two adjacent
// reservations, both wholly unmapped after a trim, serve one request each again, but never a
// request larger than either: the cuda backend could not map it in one call.
TEST(S9_PoolReservation, TrimmedAdjacentReservationsAreReusedOneAtATime) {
  auto memory = std::make_shared<fake_memory_state>();
  memory->granularity_bytes = kGranule;
  pool_config config;
  config.name = "reuse";
  config.max_size_bytes = 64 * MiB;
  config.reservation_bytes = kReservation;
  pool p(config, std::make_unique<fake_memory_provider>(memory));
  stream_timeline stream(0);

  auto a = p.allocate(kReservation, stream);
  ASSERT_TRUE(a.ok());
  const std::uintptr_t first = a.value()->address;
  memory->reserve_at.push_back(first + kReservation);
  auto b = p.allocate(kReservation, stream);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b.value()->address, first + kReservation);
  p.free(a.value(), stream);
  p.free(b.value(), stream);
  p.trim_to(0);
  ASSERT_EQ(memory->committed_bytes(), 0u);

  auto large = p.allocate(12 * MiB, stream);
  ASSERT_TRUE(large.ok()) << large.error().message();
  EXPECT_EQ(memory->reserve_calls, 3u) << "a request was placed across two reservations";
  EXPECT_GE(large.value()->address, first + 2 * kReservation);

  auto again_a = p.allocate(kReservation, stream);
  auto again_b = p.allocate(kReservation, stream);
  ASSERT_TRUE(again_a.ok());
  ASSERT_TRUE(again_b.ok());
  EXPECT_EQ(memory->reserve_calls, 3u) << "the trimmed reservations were not reused";
  EXPECT_EQ(again_a.value()->address, first);
  EXPECT_EQ(again_b.value()->address, first + kReservation);
  p.free(large.value(), stream);
  p.free(again_a.value(), stream);
  p.free(again_b.value(), stream);
}

}  // namespace
