// The address space of one pool: its reservations and the unmapped ranges inside them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "core/node_reserve.hpp"

namespace soma::detail {

/// The addresses [address, address + size_bytes).
struct address_range {
  std::uintptr_t address = 0;
  std::size_t size_bytes = 0;
  std::uintptr_t end() const noexcept { return address + size_bytes; }
};

/// The address reservations a pool holds and which of their addresses have no physical memory
/// mapped (S9, S16). An unmapped range always lies inside one reservation: two reservations
/// that happen to be adjacent (an OS or driver may place them so) never merge, because a
/// backend maps memory inside one reservation only (cuMemMap). Not thread-safe: the owning
/// pool's lock guards it.
class address_space {
 public:
  address_space() = default;
  address_space(const address_space&) = delete;
  address_space& operator=(const address_space&) = delete;

  /// Host memory for the next `calls` calls of add_reservation, take and give_back, made ahead
  /// so that they cannot fail (may throw std::bad_alloc; changes nothing then).
  void prepare(std::size_t calls) { nodes_.reserve(2 * calls); }

  /// Records a new reservation, all of it unmapped.
  /// Requires: size_bytes > 0; it overlaps no reservation held.
  void add_reservation(address_range reservation);

  /// The first unmapped range, in address order, for which accepts(range) is true: a whole
  /// range, of which the caller may take less. nullopt when none is accepted.
  template <typename Accepts>
  std::optional<address_range> first_unmapped_where(Accepts&& accepts) const {
    for (const auto& [address, size_bytes] : unmapped_) {
      const address_range range{address, size_bytes};
      if (accepts(range)) return range;
    }
    return std::nullopt;
  }
  /// The first unmapped range, in address order, of at least size_bytes.
  std::optional<address_range> find_unmapped(std::size_t size_bytes) const;

  /// Marks [address, address + size_bytes) mapped.
  /// Requires: it lies inside one unmapped range.
  void take(std::uintptr_t address, std::size_t size_bytes);
  /// Marks [address, address + size_bytes) unmapped again, merged with unmapped neighbours
  /// inside the same reservation.
  /// Requires: it lies inside one reservation and none of it is unmapped.
  void give_back(std::uintptr_t address, std::size_t size_bytes);

  /// The reservation that holds address; nullopt if none does.
  std::optional<address_range> reservation_containing(std::uintptr_t address) const;
  bool contains(std::uintptr_t address) const {
    return reservation_containing(address).has_value();
  }
  /// Every reservation, in address order.
  std::vector<address_range> reservations() const;
  /// Forgets every reservation and unmapped range (teardown, after the caller freed them).
  void clear() noexcept;

 private:
  using range_map = std::map<std::uintptr_t, std::size_t, std::less<>,
                             reserve_allocator<std::pair<const std::uintptr_t, std::size_t>>>;
  node_reserve nodes_;  // before the maps that take nodes from it
  range_map reservations_{std::less<>{}, reserve_allocator<range_map::value_type>(nodes_)};
  // address -> bytes, coalesced per reservation
  range_map unmapped_{std::less<>{}, reserve_allocator<range_map::value_type>(nodes_)};
};

}  // namespace soma::detail
