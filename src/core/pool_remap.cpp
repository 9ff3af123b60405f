// pool: the remap path. When no free block fits a request, the pool's free whole granules are
// mapped again, one after another, at fresh addresses (or right after a free block at the top of
// mapped memory, whose granules stay where they lie), with new memory committed after them for
// whatever they lack, and that range serves the request: no synchronize, and growth by the
// shortfall only (design §3 "Remapping"). The old addresses stay mapped, and are handed to
// nothing, until the frees that let them go have completed.
#include <algorithm>
#include <optional>
#include <span>
#include <vector>

#include "core/pool.hpp"

namespace soma::detail {

remap_statistics pool::remap_counts() const noexcept {
  return {remaps_.load(std::memory_order_relaxed),
          remapped_bytes_.load(std::memory_order_relaxed),
          retired_bytes_.load(std::memory_order_relaxed),
          retired_ranges_.load(std::memory_order_relaxed),
          unmap_calls_.load(std::memory_order_relaxed),
          kept_in_place_bytes_.load(std::memory_order_relaxed)};
}

block* pool::remap_anchor_locked(std::size_t need_bytes, const stream_timeline& stream) const {
  block* anchor = nullptr;
  std::size_t anchor_bytes = 0;
  address_space_.first_unmapped_where([&](const address_range& room) {
    block* before = free_block_ending_at_locked(room.address);
    if (before == nullptr || before->small_region || !usable_without_waiting(before, stream))
      return false;
    const std::uintptr_t low = round_up(before->address, granularity_bytes_);
    if (low >= room.address || room.address - low <= anchor_bytes) return false;
    // The new block must lie in one reservation: a backend maps inside one only.
    const std::optional<address_range> reservation = address_space_.reservation_containing(low);
    if (!reservation || reservation->end() < room.end()) return false;
    if (room.address - low + room.size_bytes < need_bytes) return false;
    anchor = before;
    anchor_bytes = room.address - low;
    return false;  // keep looking for a larger one
  });
  return anchor;
}

block* pool::remap_locked(std::size_t size_bytes, const stream_timeline& stream) {
  if (remap_free_memory() == remap_mode::never) return nullptr;
  // Old addresses go here only once many wait (retired_ranges_kept ranges, or more bytes than
  // the pool holds) or once a synchronize has proved their frees; a release, a trim or a failed
  // reservation unmaps them too. Mapped, they cost address space only, and gathered they go in
  // fewer driver calls (tens of microseconds each on cuda); unmapped at every remap, the holes
  // they left also moved later blocks (PyTorch's fixed-shape trace with frees completing 200
  // events late: 64 GiB mapped again, against 7.1; docs/benchmarks.md). After a synchronize,
  // a loop's next pass grows into their space.
  if (retired_.size() > retired_ranges_kept ||
      retired_bytes_.load(std::memory_order_relaxed) >
          reserved_bytes_.load(std::memory_order_relaxed) ||
      std::any_of(retired_.begin(), retired_.end(),
                  [](const retired_range& r) { return r.stamp.is_proven_complete(); }))
    unmap_retired_locked(/*all=*/false);
  const std::size_t need_bytes = round_up(size_bytes, granularity_bytes_);
  if (index_.free_bytes() < granularity_bytes_ || need_bytes > config_.max_size_bytes)
    return nullptr;
  // A granule freed in two parts, one proven complete and one freed on this stream since (on
  // cuda every free is a point of its own), lies in two blocks; as one block it can be mapped
  // again. Without this, conv's trace, replayed with a synchronize after each pass, grew its
  // peak from 1.012 to 1.049 of peak used in three passes (bench/trace_replay --sync-passes).
  index_.merge_runs_for_granules(&stream, granularity_bytes_);

  // A free block at the top of mapped memory keeps its whole granules where they lie, and the
  // rest is mapped right after it. Each granule mapped again costs a driver call on cuda, and its
  // old address an unmap later: on PyTorch's traces this mapped 77 % fewer bytes on the inference
  // loop and 51 % fewer on the fixed-shape one, at the same peak (docs/benchmarks.md).
  block* anchor = remap_anchor_locked(need_bytes, stream);
  const std::uintptr_t anchor_low =
      anchor != nullptr ? round_up(anchor->address, granularity_bytes_) : 0;
  const std::size_t anchor_bytes = anchor != nullptr ? anchor->end() - anchor_low : 0;

  // Granule-aligned parts of other free blocks this stream may use now, from the smallest
  // blocks up, so that large free blocks stay whole for requests they fit. One part lies in
  // one block and one chunk; the last one taken gives only what is still needed, from its top.
  struct part {
    std::uintptr_t from = 0, to = 0;
    free_stamp stamp;
  };
  std::vector<part> parts;
  std::size_t found_bytes = anchor_bytes;
  index_.for_each_by_size([&](const block* b) {
    if (found_bytes >= need_bytes || b == anchor || !usable_without_waiting(b, stream)) return;
    const std::uintptr_t low = round_up(b->address, granularity_bytes_);
    const std::uintptr_t high = b->end() / granularity_bytes_ * granularity_bytes_;
    if (high <= low) return;
    for (auto it = std::prev(chunks_.upper_bound(low));
         it != chunks_.end() && it->first < high && found_bytes < need_bytes; ++it) {
      std::uintptr_t from = std::max(low, it->first);
      const std::uintptr_t to = std::min(high, it->first + it->second.size_bytes);
      if (to <= from || !memory_->can_map_again(it->second.token)) continue;
      from = std::max(from, to - (need_bytes - found_bytes));
      parts.push_back({from, to, b->stamp});
      found_bytes += to - from;
    }
  });
  // Before growth, free granules that are only a sliver of the request save little and move
  // memory that the next small requests would have reused where it lies. From a quarter of the
  // request up, they serve: on PyTorch's traces of four workloads (docs/benchmarks.md) peak
  // reserved over peak used was 1.001-1.002 on three and 1.010 on the fourth (a convolutional
  // network), against 1.012-1.021 on that one when any granule served or when half the request had
  // to be there. Where growth failed (instead of failing), any share serves.
  // An anchor alone is growth's extension of a free block (find_unmapped_locked).
  if (parts.empty()) return nullptr;
  if (remap_free_memory() == remap_mode::before_growth && found_bytes * 4 < need_bytes)
    return nullptr;
  // Fewer free granules than the request: they still serve, and only the shortfall is new
  // physical memory, committed right after them (what compaction before growth reaches by a
  // synchronize, giving memory back and committing it again).
  const std::size_t shortfall_bytes = need_bytes - found_bytes;
  if (reserved_bytes_.load(std::memory_order_relaxed) + shortfall_bytes > config_.max_size_bytes)
    return nullptr;  // growth reports it, or an internal dependency serves

  // Host memory first: once memory is mapped again, the blocks, chunks and retired ranges must
  // all be changed. A carve per part and for the anchor; a part cuts its chunk in up to two and
  // becomes a chunk at its new address; the new block and the shortfall's chunk.
  const std::size_t carves = parts.size() + 1;
  prepare_locked(carves + 1, carves * (carve_nodes + 3) + 2 + free_index::nodes_needed);
  address_space_.prepare(1);
  if (retired_.capacity() - retired_.size() < parts.size())
    retired_.reserve(std::max(retired_.size() + parts.size(), 2 * retired_.capacity()));

  // Mapped anew: everything past the anchor, at the unmapped space after it or at fresh space.
  const std::size_t mapped_bytes = need_bytes - anchor_bytes;
  std::uintptr_t address = 0;
  if (anchor != nullptr) {
    address = anchor->end();
  } else {
    result<address_range> where = unmapped_range_locked(need_bytes);
    if (!where.ok()) return nullptr;  // growth reports the address-space failure, if it has one
    address = where.value().address;
  }
  const std::size_t moved_bytes = found_bytes - anchor_bytes;
  std::uint64_t shortfall_token = 0;
  if (shortfall_bytes != 0) {
    result<std::uint64_t> committed = memory_->commit(address + moved_bytes, shortfall_bytes);
    if (!committed.ok()) return nullptr;  // growth tries again and reports the failure
    shortfall_token = committed.value();
  }
  std::vector<physical_piece> pieces;
  std::uintptr_t at = address;
  for (const part& p : parts) {
    auto it = std::prev(chunks_.upper_bound(p.from));
    pieces.push_back(
        {at, p.to - p.from, it->second.token, it->second.offset_bytes + (p.from - it->first)});
    at += p.to - p.from;
  }
  if (!memory_->map_again(pieces).ok()) {
    if (shortfall_bytes != 0)
      memory_->decommit(address + moved_bytes, shortfall_bytes, shortfall_token, 0);
    return nullptr;  // growth may still serve
  }

  // The old addresses leave the blocks and the chunks; the physical memory is counted once,
  // at its new address. The anchor's granules leave its block and join the new one in place.
  const free_stamp first_stamp = anchor != nullptr ? anchor->stamp : parts.front().stamp;
  bool one_stamp = true;
  if (anchor != nullptr) carve_locked(anchor, anchor_low, anchor->end());
  for (const part& p : parts) {
    carve_locked(block_containing_locked(p.from), p.from, p.to);
    retired_.push_back({cut_chunk_locked(p.from, p.to), p.stamp});
    one_stamp = one_stamp && p.stamp == first_stamp;
  }
  address_space_.take(address, mapped_bytes);
  for (const physical_piece& p : pieces)
    chunks_.emplace(p.address, chunk{p.size_bytes, p.token, p.offset_bytes});
  if (shortfall_bytes != 0) {
    chunks_.emplace(address + moved_bytes, chunk{shortfall_bytes, shortfall_token});
    raise_reserved(shortfall_bytes);
    note_history(history_kind::grow, address + moved_bytes, shortfall_bytes);
  }
  retired_bytes_.fetch_add(moved_bytes, std::memory_order_relaxed);
  retired_ranges_.fetch_add(parts.size(), std::memory_order_relaxed);
  remaps_.fetch_add(1, std::memory_order_relaxed);
  remapped_bytes_.fetch_add(moved_bytes, std::memory_order_relaxed);
  kept_in_place_bytes_.fetch_add(anchor_bytes, std::memory_order_relaxed);
  const std::uintptr_t start = anchor != nullptr ? anchor_low : address;

  block* fresh = blocks_.make();
  fresh->address = start;
  fresh->size_bytes = need_bytes;
  // What split leaves over serves other streams only after every granule's free. Frees of
  // several points are all ordered before this stream's next operation (each was usable by
  // it), so that point stands for them.
  fresh->stamp = one_stamp ? first_stamp : free_stamp{&stream, stream.enqueued_position()};
  link_new_block_locked(fresh);
  block* b = index_.insert(fresh);
  index_.remove(b);
  note_history(history_kind::remap, start, need_bytes, stream.id());
  return b;
}

void pool::unmap_retired_locked(bool all) {
  // Host memory first: the ranges leave retired_ as they are collected.
  std::vector<physical_piece> done;
  done.reserve(retired_.size());
  address_space_.prepare(retired_.size());
  auto kept = std::remove_if(retired_.begin(), retired_.end(), [&](const retired_range& r) {
    if (!all && !r.stamp.is_complete()) return false;
    done.push_back(r.piece);
    return true;
  });
  retired_.erase(kept, retired_.end());
  // Old addresses that lie end to end in one reservation (the parts of one free block that
  // spanned several commits) go in one unmap: on cuda a call costs tens of microseconds
  // whatever it covers.
  std::sort(done.begin(), done.end(),
            [](const physical_piece& a, const physical_piece& b) { return a.address < b.address; });
  for (std::size_t first = 0; first < done.size();) {
    const std::optional<address_range> reservation =
        address_space_.reservation_containing(done[first].address);
    std::size_t last = first + 1;
    while (last < done.size() &&
           done[last].address == done[last - 1].address + done[last - 1].size_bytes &&
           reservation && done[last].address < reservation->end())
      ++last;
    memory_->unmap_alias(std::span(done).subspan(first, last - first));
    unmap_calls_.fetch_add(1, std::memory_order_relaxed);
    first = last;
  }
  for (const physical_piece& p : done) {
    address_space_.give_back(p.address, p.size_bytes);
    retired_bytes_.fetch_sub(p.size_bytes, std::memory_order_relaxed);
  }
}

bool pool::is_aliased_locked(std::uint64_t token, std::size_t offset_bytes,
                             std::size_t bytes) const {
  return std::any_of(retired_.begin(), retired_.end(), [&](const retired_range& r) {
    return r.piece.token == token && r.piece.offset_bytes < offset_bytes + bytes &&
           offset_bytes < r.piece.offset_bytes + r.piece.size_bytes;
  });
}

}  // namespace soma::detail
