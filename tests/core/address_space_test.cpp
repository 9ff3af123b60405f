// address_space: reservations and the unmapped ranges inside them (S9, S16). Ranges never
// span two reservations, even adjacent ones, because a backend maps inside one reservation.
#include "core/address_space.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

namespace {

using soma::detail::address_range;
using soma::detail::address_space;

constexpr std::uintptr_t kBase = std::uintptr_t{0x100000000000};
constexpr std::size_t kUnit = std::size_t{64} * 1024;  // one granule
constexpr std::size_t kReservation = 16 * kUnit;

std::uintptr_t at(std::size_t units) { return kBase + units * kUnit; }

// Every unmapped range, in address order.
std::vector<address_range> unmapped_ranges(const address_space& space) {
  std::vector<address_range> all;
  space.first_unmapped_where([&](const address_range& range) {
    all.push_back(range);
    return false;
  });
  return all;
}

void expect_ranges(const address_space& space, const std::vector<address_range>& expected) {
  const std::vector<address_range> actual = unmapped_ranges(space);
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    EXPECT_EQ(actual[i].address, expected[i].address) << "range " << i;
    EXPECT_EQ(actual[i].size_bytes, expected[i].size_bytes) << "range " << i;
  }
}

TEST(S16_AddressSpace, NewReservationIsOneUnmappedRange) {
  address_space space;
  EXPECT_FALSE(space.find_unmapped(1).has_value());
  space.add_reservation({at(0), kReservation});
  expect_ranges(space, {{at(0), kReservation}});
  EXPECT_TRUE(space.contains(at(0)));
  EXPECT_TRUE(space.contains(at(16) - 1));
  EXPECT_FALSE(space.contains(at(16)));
  EXPECT_FALSE(space.contains(at(0) - 1));
}

TEST(S16_AddressSpace, AdjacentReservationsNeverMergeAcross) {
  address_space space;
  space.add_reservation({at(16), kReservation});
  space.add_reservation({at(32), kReservation});  // right above
  space.add_reservation({at(0), kReservation});   // right below
  expect_ranges(space, {{at(0), kReservation}, {at(16), kReservation}, {at(32), kReservation}});
  EXPECT_FALSE(space.find_unmapped(kReservation + kUnit).has_value())
      << "a range spanning two reservations was offered";
  const std::optional<address_range> whole = space.find_unmapped(kReservation);
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(whole->address, at(0));
}

TEST(S16_AddressSpace, GivingBackBothSidesOfAReservationEdgeKeepsTwoRanges) {
  address_space space;
  space.add_reservation({at(0), kReservation});
  space.add_reservation({at(16), kReservation});
  space.take(at(0), kReservation);
  space.take(at(16), kReservation);
  space.give_back(at(12), 4 * kUnit);  // the top of the lower reservation
  space.give_back(at(16), 4 * kUnit);  // the bottom of the upper one
  expect_ranges(space, {{at(12), 4 * kUnit}, {at(16), 4 * kUnit}});
  EXPECT_FALSE(space.find_unmapped(5 * kUnit).has_value());
  // Filling in the rest of each reservation merges only inside it.
  space.give_back(at(0), 12 * kUnit);
  space.give_back(at(20), 12 * kUnit);
  expect_ranges(space, {{at(0), kReservation}, {at(16), kReservation}});
}

TEST(S16_AddressSpace, NonAdjacentReservationsAreSeparateRanges) {
  address_space space;
  space.add_reservation({at(0), kReservation});
  space.add_reservation({at(20), 2 * kReservation});
  expect_ranges(space, {{at(0), kReservation}, {at(20), 2 * kReservation}});
  const std::optional<address_range> large = space.find_unmapped(kReservation + 1);
  ASSERT_TRUE(large.has_value());
  EXPECT_EQ(large->address, at(20));
  EXPECT_FALSE(space.contains(at(17)));
  EXPECT_EQ(space.reservation_containing(at(30))->address, at(20));
  EXPECT_FALSE(space.reservation_containing(at(18)).has_value());
}

TEST(S9_AddressSpace, ExactFitTakesTheWholeRange) {
  address_space space;
  space.add_reservation({at(0), 4 * kUnit});
  const std::optional<address_range> found = space.find_unmapped(4 * kUnit);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->address, at(0));
  EXPECT_EQ(found->size_bytes, 4 * kUnit);
  space.take(found->address, found->size_bytes);
  EXPECT_TRUE(unmapped_ranges(space).empty());
  EXPECT_FALSE(space.find_unmapped(1).has_value());
  EXPECT_TRUE(space.contains(at(0))) << "a fully mapped reservation is still held";
}

TEST(S9_AddressSpace, FindReturnsTheFirstRangeThatFitsWhole) {
  address_space space;
  space.add_reservation({at(0), kReservation});
  space.take(at(2), 2 * kUnit);
  // [0, 2) and [4, 16) are unmapped: 2 units fit the first, 3 only the second.
  EXPECT_EQ(space.find_unmapped(2 * kUnit)->address, at(0));
  const std::optional<address_range> found = space.find_unmapped(3 * kUnit);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->address, at(4));
  EXPECT_EQ(found->size_bytes, 12 * kUnit) << "the whole range, not just the request";
}

TEST(S9_AddressSpace, TakeSplitsARange) {
  address_space space;
  space.add_reservation({at(0), kReservation});
  space.take(at(0), 3 * kUnit);  // from the start, as growth does
  expect_ranges(space, {{at(3), 13 * kUnit}});
  space.take(at(6), 2 * kUnit);  // from the middle
  expect_ranges(space, {{at(3), 3 * kUnit}, {at(8), 8 * kUnit}});
  space.take(at(14), 2 * kUnit);  // from the end
  expect_ranges(space, {{at(3), 3 * kUnit}, {at(8), 6 * kUnit}});
}

TEST(S9_AddressSpace, GiveBackCoalescesWithinOneReservation) {
  address_space space;
  space.add_reservation({at(0), kReservation});
  space.take(at(0), kReservation);
  space.give_back(at(4), 4 * kUnit);
  expect_ranges(space, {{at(4), 4 * kUnit}});
  space.give_back(at(8), 2 * kUnit);  // merges with the range below
  expect_ranges(space, {{at(4), 6 * kUnit}});
  space.give_back(at(2), 2 * kUnit);  // merges with the range above
  expect_ranges(space, {{at(2), 8 * kUnit}});
  space.give_back(at(12), 2 * kUnit);  // a gap stays
  expect_ranges(space, {{at(2), 8 * kUnit}, {at(12), 2 * kUnit}});
  space.give_back(at(10), 2 * kUnit);  // fills the gap: merges both sides
  expect_ranges(space, {{at(2), 12 * kUnit}});
}

TEST(S9_AddressSpace, ReleaseOrderDoesNotChangeTheResult) {
  // Release goes highest addresses first today; any order must end in the same ranges.
  std::array<std::size_t, 4> order{0, 1, 2, 3};
  do {
    address_space space;
    space.add_reservation({at(0), 8 * kUnit});
    space.add_reservation({at(8), 8 * kUnit});  // adjacent
    space.take(at(0), 8 * kUnit);
    space.take(at(8), 8 * kUnit);
    for (std::size_t piece : order) space.give_back(at(piece * 4), 4 * kUnit);
    expect_ranges(space, {{at(0), 8 * kUnit}, {at(8), 8 * kUnit}});
  } while (std::next_permutation(order.begin(), order.end()));
}

TEST(S5_AddressSpace, ReservationsAreListedInAddressOrderAndCleared) {
  address_space space;
  space.add_reservation({at(32), kReservation});
  space.add_reservation({at(0), kReservation});
  space.take(at(0), kUnit);
  const std::vector<address_range> all = space.reservations();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].address, at(0));
  EXPECT_EQ(all[1].address, at(32));
  EXPECT_EQ(all[1].size_bytes, kReservation);
  space.clear();
  EXPECT_TRUE(space.reservations().empty());
  EXPECT_TRUE(unmapped_ranges(space).empty());
  EXPECT_FALSE(space.contains(at(0)));
}

// ---- model test -----------------------------------------------------------------------------

// The reference: one entry per granule of a small window, naming the reservation that holds it
// (or none) and whether it is mapped. Unmapped ranges are the maximal runs of unmapped granules
// of one reservation.
class reference_space {
 public:
  static constexpr std::size_t units = 128;
  static constexpr int none = -1;

  bool is_free(std::size_t first, std::size_t count) const {
    if (first + count > units) return false;
    return std::all_of(owner_.begin() + first, owner_.begin() + first + count,
                       [](int o) { return o == none; });
  }
  void reserve(std::size_t first, std::size_t count) {
    std::fill(owner_.begin() + first, owner_.begin() + first + count, next_id_++);
    std::fill(mapped_.begin() + first, mapped_.begin() + first + count, false);
  }
  void set_mapped(std::size_t first, std::size_t count, bool mapped) {
    std::fill(mapped_.begin() + first, mapped_.begin() + first + count, mapped);
  }
  int owner(std::size_t unit) const { return owner_[unit]; }
  bool mapped(std::size_t unit) const { return mapped_[unit]; }
  std::vector<address_range> unmapped() const {
    std::vector<address_range> all;
    for (std::size_t u = 0; u < units;) {
      if (owner_[u] == none || mapped_[u]) {
        ++u;
        continue;
      }
      std::size_t end = u + 1;
      while (end < units && owner_[end] == owner_[u] && !mapped_[end]) ++end;
      all.push_back({at(u), (end - u) * kUnit});
      u = end;
    }
    return all;
  }

 private:
  std::array<int, units> owner_ = filled(none);
  std::array<bool, units> mapped_{};
  int next_id_ = 0;

  static std::array<int, units> filled(int value) {
    std::array<int, units> a{};
    a.fill(value);
    return a;
  }
};

void run_model(std::uint32_t seed, int steps) {
  std::mt19937 rng(seed);
  auto below = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  address_space space;
  reference_space model;
  std::vector<address_range> reservations;  // in units: address = first unit

  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " step " + std::to_string(step));
    const std::size_t action = below(10);
    if (action == 0 || reservations.empty()) {
      // Reserve, often right above or right below a reservation held.
      const std::size_t count = 1 + below(12);
      std::size_t first = below(reference_space::units);
      if (!reservations.empty() && below(3) != 0) {
        const address_range& other = reservations[below(reservations.size())];
        first = below(2) == 0 ? other.address + other.size_bytes : other.address - count;
      }
      if (first < reference_space::units && model.is_free(first, count)) {
        space.add_reservation({at(first), count * kUnit});
        model.reserve(first, count);
        reservations.push_back({first, count});
      }
    } else if (action <= 5) {
      // Grow: find a range for n granules, take n (or more, as a growth step may) from its start.
      const std::size_t count = 1 + below(8);
      const std::optional<address_range> found = space.find_unmapped(count * kUnit);
      const std::vector<address_range> expected = model.unmapped();
      const auto fits = std::find_if(expected.begin(), expected.end(), [&](const address_range& r) {
        return r.size_bytes >= count * kUnit;
      });
      ASSERT_EQ(found.has_value(), fits != expected.end());
      if (!found) continue;
      ASSERT_EQ(found->address, fits->address);
      ASSERT_EQ(found->size_bytes, fits->size_bytes);
      const std::size_t take_units = count + below(found->size_bytes / kUnit - count + 1);
      space.take(found->address, take_units * kUnit);
      model.set_mapped((found->address - kBase) / kUnit, take_units, true);
    } else {
      // Release: a run of mapped granules inside one reservation, as trim gives back.
      const std::size_t first = below(reference_space::units);
      if (model.owner(first) == reference_space::none || !model.mapped(first)) continue;
      std::size_t count = 1;
      const std::size_t most = 1 + below(6);
      while (count < most && first + count < reference_space::units &&
             model.owner(first + count) == model.owner(first) && model.mapped(first + count))
        ++count;
      space.give_back(at(first), count * kUnit);
      model.set_mapped(first, count, false);
    }
    // Invariants after every step: the same ranges as the model, each inside one reservation.
    const std::vector<address_range> actual = unmapped_ranges(space);
    const std::vector<address_range> expected = model.unmapped();
    ASSERT_EQ(actual.size(), expected.size());
    for (std::size_t i = 0; i < actual.size(); ++i) {
      ASSERT_EQ(actual[i].address, expected[i].address) << "range " << i;
      ASSERT_EQ(actual[i].size_bytes, expected[i].size_bytes) << "range " << i;
      const std::optional<address_range> home = space.reservation_containing(actual[i].address);
      ASSERT_TRUE(home.has_value());
      ASSERT_LE(actual[i].end(), home->end()) << "range " << i << " leaves its reservation";
    }
  }
}

TEST(S16_AddressSpaceModel, RandomReserveTakeGiveBackSeed1) { run_model(1, 4000); }
TEST(S16_AddressSpaceModel, RandomReserveTakeGiveBackSeed2) { run_model(2, 4000); }
TEST(S16_AddressSpaceModel, RandomReserveTakeGiveBackSeed3) { run_model(0xC0FFEE, 4000); }

}  // namespace
