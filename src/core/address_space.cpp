#include "core/address_space.hpp"

#include "core/check.hpp"

#include <iterator>

namespace soma::detail {

void address_space::add_reservation(address_range reservation) {
  [[maybe_unused]] const auto next = reservations_.lower_bound(reservation.address);
  SOMA_ASSERT(reservation.size_bytes > 0, "an empty reservation");
  SOMA_ASSERT(!contains(reservation.address) &&
                  (next == reservations_.end() || next->first >= reservation.end()),
              "reservation overlaps one held");
  reservations_.emplace(reservation.address, reservation.size_bytes);
  unmapped_.emplace(reservation.address, reservation.size_bytes);
}

std::optional<address_range> address_space::find_unmapped(std::size_t size_bytes) const {
  return first_unmapped_where(
      [size_bytes](const address_range& range) { return range.size_bytes >= size_bytes; });
}

void address_space::take(std::uintptr_t address, std::size_t size_bytes) {
  auto it = unmapped_.upper_bound(address);
  SOMA_ASSERT(it != unmapped_.begin(), "take of a range that is not unmapped");
  --it;
  const address_range range{it->first, it->second};
  SOMA_ASSERT(address + size_bytes <= range.end(), "take of a range that is not unmapped");
  unmapped_.erase(it);
  if (range.address < address) unmapped_.emplace(range.address, address - range.address);
  if (address + size_bytes < range.end())
    unmapped_.emplace(address + size_bytes, range.end() - (address + size_bytes));
}

void address_space::give_back(std::uintptr_t address, std::size_t size_bytes) {
  const std::optional<address_range> home = reservation_containing(address);
  SOMA_ASSERT(home && address + size_bytes <= home->end(), "give_back outside one reservation");
  if (!home) return;
  const std::uintptr_t end = address + size_bytes;
  auto next = unmapped_.lower_bound(address);
  SOMA_ASSERT((next == unmapped_.end() || next->first >= end), "give_back of unmapped addresses");
  // A neighbour across the reservation's edge belongs to another reservation: never merge it,
  // or a later mapping would span both.
  if (next != unmapped_.end() && next->first == end && end < home->end()) {
    size_bytes += next->second;
    next = unmapped_.erase(next);
  }
  if (next != unmapped_.begin() && address > home->address) {
    auto previous = std::prev(next);
    SOMA_ASSERT(previous->first + previous->second <= address, "give_back of unmapped addresses");
    if (previous->first + previous->second == address) {
      previous->second += size_bytes;
      return;
    }
  }
  unmapped_.emplace(address, size_bytes);
}

std::optional<address_range> address_space::reservation_containing(std::uintptr_t address) const {
  auto it = reservations_.upper_bound(address);
  if (it == reservations_.begin()) return std::nullopt;
  --it;
  if (address - it->first >= it->second) return std::nullopt;
  return address_range{it->first, it->second};
}

std::vector<address_range> address_space::reservations() const {
  std::vector<address_range> all;
  all.reserve(reservations_.size());
  for (const auto& [base, size_bytes] : reservations_) all.push_back({base, size_bytes});
  return all;
}

void address_space::clear() noexcept {
  reservations_.clear();
  unmapped_.clear();
}

}  // namespace soma::detail
