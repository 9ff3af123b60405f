// pool: growth: unmapped address space found or reserved (address_space), physical memory
// committed in granules and merged with the free block below it (S3, S16).
#include <algorithm>

#include "core/pool.hpp"

namespace soma::detail {

// ---- growth --------------------------------------------------------------------------------

result<address_range> pool::find_unmapped_locked(std::size_t bytes, std::size_t* need_bytes,
                                                 std::size_t size_bytes,
                                                 const stream_timeline& stream, block** extended,
                                                 bool small) {
  // Prefer extending a usable free block that ends where unmapped space begins: the new
  // memory merges with it and the pool commits only the shortfall (expandable segment).
  std::size_t shortfall_bytes = 0;
  *extended = nullptr;
  const std::optional<address_range> extendable =
      address_space_.first_unmapped_where([&](const address_range& range) {
        block* before = free_block_ending_at_locked(range.address);
        if (before == nullptr || before->small_region != small ||
            in_small_reservation_locked(range.address) != small)
          return false;
        // A block with no pending free, or one pending on this stream alone: the stream takes
        // it with the new memory at once (S2), so the whole may carry its stamp.
        if ((before->stamp.timeline != nullptr && before->stamp.timeline != &stream) ||
            before->size_bytes >= size_bytes)
          return false;
        shortfall_bytes = round_up(size_bytes - before->size_bytes, granularity_bytes_);
        if (shortfall_bytes > range.size_bytes) return false;
        *extended = before;
        return true;
      });
  if (extendable) {
    *need_bytes = shortfall_bytes;
    return *extendable;
  }
  *need_bytes = bytes;
  return unmapped_range_locked(bytes, small);
}

bool pool::in_small_reservation_locked(std::uintptr_t address) const {
  if (small_reservations_.empty()) return false;
  const std::optional<address_range> reservation = address_space_.reservation_containing(address);
  return reservation && small_reservations_.count(reservation->address) != 0;
}

result<address_range> pool::unmapped_range_locked(std::size_t bytes, bool small) {
  auto find = [&] {
    return address_space_.first_unmapped_where([&](const address_range& range) {
      return range.size_bytes >= bytes && in_small_reservation_locked(range.address) == small;
    });
  };
  if (const std::optional<address_range> unmapped = find()) return *unmapped;
  // Every reservation is full (or fragmented): reserve another range.
  const std::size_t reserve_bytes =
      std::max(round_up(bytes, granularity_bytes_), config_.reservation_bytes);
  // Host memory first: a reservation made must be recorded, or nothing would free it.
  address_space_.prepare(1);
  nodes_.reserve(1);
  std::size_t reserved_bytes = reserve_bytes;
  result<std::uintptr_t> base = memory_->reserve(reserve_bytes);
  if (!base.ok() && base.error().code() == error_code::address_space_exhausted &&
      reserve_bytes > round_up(bytes, granularity_bytes_)) {
    // Under a tight address-space limit, a range for this request alone may still fit.
    reserved_bytes = round_up(bytes, granularity_bytes_);
    base = memory_->reserve(reserved_bytes);
  }
  if (!base.ok() && base.error().code() == error_code::address_space_exhausted &&
      !retired_.empty()) {
    // Old addresses of remapped memory wait mapped until many gather (pool_remap.cpp): those
    // whose frees have completed give their space back now.
    unmap_retired_locked(/*all=*/false);
    address_space_.prepare(1);
    if (const std::optional<address_range> unmapped = find()) return *unmapped;
  }
  if (!base.ok()) {
    return status(base.error().code(), describe() + ": cannot reserve address space for " +
                                           format_bytes(bytes) + ": " + base.error().message());
  }
  // A new reservation may begin where another one ends; it stays a range of its own.
  const address_range reservation{base.value(), reserved_bytes};
  address_space_.add_reservation(reservation);
  if (small) small_reservations_.insert(reservation.address);
  return reservation;
}

status pool::grow_locked(std::size_t size_bytes, const stream_timeline& stream, bool exact,
                         bool small) {
  const std::size_t bytes = round_up(size_bytes, granularity_bytes_);
  std::size_t need_bytes = bytes;
  const std::uint64_t reserved = reserved_bytes_.load(std::memory_order_relaxed);
  // Check the cap on the whole request first: a request the pool can never hold fails
  // before any address space is touched.
  if (bytes > config_.max_size_bytes) {
    return status(error_code::out_of_memory,
                  describe() + ": out of memory allocating " + format_bytes(size_bytes) +
                      ": larger than the pool's max size " + format_bytes(config_.max_size_bytes));
  }
  block* extended = nullptr;
  result<address_range> where =
      find_unmapped_locked(bytes, &need_bytes, size_bytes, stream, &extended, small);
  if (!where.ok()) return where.take_error();
  if (reserved + need_bytes > config_.max_size_bytes) {
    return status(error_code::out_of_memory,
                  describe() + ": out of memory allocating " + format_bytes(size_bytes) +
                      " (reserved " + format_bytes(reserved) + " of max size " +
                      format_bytes(config_.max_size_bytes) + ", " +
                      format_bytes(index_.free_bytes()) + " free in the pool but not usable)");
  }
  const std::uintptr_t address = where.value().address;
  // Grow by at least the growth step where the free range and the cap allow: fewer, larger
  // backend calls. If the larger commit fails, the exact need may still fit.
  const std::size_t exact_bytes = need_bytes;
  const std::size_t room_bytes = std::min<std::uint64_t>(
      where.value().size_bytes,
      (config_.max_size_bytes - reserved) / granularity_bytes_ * granularity_bytes_);
  if (!exact) need_bytes = std::max(exact_bytes, std::min(config_.growth_step_bytes, room_bytes));
  // Host memory first: committed memory must be recorded, or nothing would give it back.
  prepare_locked(1, 2 + free_index::nodes_needed);
  address_space_.prepare(1);
  result<std::uint64_t> token = memory_->commit(address, need_bytes);
  if (!token.ok() && need_bytes > exact_bytes) {
    need_bytes = exact_bytes;
    token = memory_->commit(address, need_bytes);
  }
  if (!token.ok()) {
    // Only a lack of memory is called one: the platform may also refuse for its own reasons.
    const error_code code = token.error().code();
    const bool no_memory =
        code == error_code::out_of_memory || code == error_code::address_space_exhausted;
    const char* what =
        no_memory ? ": out of memory allocating " : ": could not grow for an allocation of ";
    return status(code, describe() + what + format_bytes(size_bytes) + " (pool reserved " +
                            format_bytes(reserved) + "): " + token.error().message());
  }
  address_space_.take(address, need_bytes);
  chunks_.emplace(address, chunk{need_bytes, token.value()});
  raise_reserved(need_bytes);

  block* fresh = blocks_.make();
  fresh->address = address;
  fresh->size_bytes = need_bytes;
  fresh->small_region = small;
  link_new_block_locked(fresh);
  index_.insert(fresh);  // merges with a proven block below it
  // Pending on this stream, the block below keeps its stamp and takes the new memory in.
  if (extended != nullptr && extended->stamp.timeline == &stream) index_.absorb_next(extended);
  check_invariants_locked();
  note_history(history_kind::grow, address, need_bytes);
  return status::success();
}

void pool::link_new_block_locked(block* fresh) {
  const std::uintptr_t address = fresh->address;
  // Blocks of the two regions touch only where their reservations happen to: they stay apart.
  if (block* before = block_containing_locked(address - 1);
      before && before->end() == address && before->small_region == fresh->small_region) {
    fresh->previous_adjacent = before;
    before->next_adjacent = fresh;
  }
  if (auto after = all_blocks_.find(fresh->end());
      after != all_blocks_.end() && after->second->small_region == fresh->small_region) {
    fresh->next_adjacent = after->second;
    after->second->previous_adjacent = fresh;
  }
  all_blocks_.emplace(address, fresh);
}

void pool::raise_reserved(std::uint64_t bytes) noexcept {
  const std::uint64_t now = reserved_bytes_.fetch_add(bytes, std::memory_order_acq_rel) + bytes;
  std::uint64_t high = reserved_high_bytes_.load(std::memory_order_relaxed);
  while (now > high &&
         !reserved_high_bytes_.compare_exchange_weak(high, now, std::memory_order_relaxed)) {
  }
}

block* pool::block_containing_locked(std::uintptr_t address) const {
  auto it = all_blocks_.upper_bound(address);
  if (it == all_blocks_.begin()) return nullptr;
  block* b = std::prev(it)->second;
  return address < b->end() ? b : nullptr;
}

block* pool::free_block_ending_at_locked(std::uintptr_t address) const {
  block* before = block_containing_locked(address - 1);
  if (before == nullptr || before->end() != address ||
      before->current_state() != block_state::indexed)
    return nullptr;
  return before;
}

}  // namespace soma::detail
