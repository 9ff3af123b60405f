// pool: the slow path (a miss in the stream cache): the free index searched under the pool lock,
// the reuse policies that decide whether a free block may serve this stream, splitting, and
// the forgetting of destroyed streams (S11).
#include <algorithm>
#include <functional>
#include <new>

#include "core/check.hpp"
#include "core/pool.hpp"

namespace soma::detail {

// ---- slow path ---------------------------------------------------------------------------

std::optional<served_by> pool::reuse_rule(const block* b, const stream_timeline& stream) const {
  const free_stamp& stamp = b->stamp;
  if (stamp.timeline == &stream) return served_by::same_stream;  // always (S11)
  if (stamp.timeline == nullptr || stamp.is_proven_complete())
    return served_by::proven_free;  // a synchronize proved it: always (S12)
  if (reuse_policy(1) && stream.is_ordered_after(stamp.timeline, stamp.position))
    return served_by::event_dependency;  // the stream already waits on the free
  if (reuse_policy(2) && stamp.timeline->has_completed(stamp.position))
    return served_by::opportunistic;  // the free already ran; adds no ordering
  return std::nullopt;
}

std::size_t pool::compaction_floor(std::size_t size_bytes) const {
  // Worth a synchronize: at least a growth step (or the request, if smaller) lies free but
  // fragmented. On the training-loop traces this keeps peak reserved within 0.2 % of peak
  // used (bench/trace_replay --compact).
  return std::min(size_bytes, std::max(config_.growth_step_bytes, granularity_bytes_));
}

bool pool::growth_within_allowance_locked(std::size_t size_bytes) const {
  const std::uint64_t high = std::max<std::uint64_t>(
      used_high_bytes_.load(std::memory_order_relaxed), used_estimate() + size_bytes);
  const std::uint64_t allowance =
      std::max<std::uint64_t>(high / large_hole_allowance_divisor, granularity_bytes_);
  return reserved_bytes_.load(std::memory_order_relaxed) +
             round_up(size_bytes, granularity_bytes_) <=
         high + allowance;
}

bool pool::is_large_hole_for(const block* b, std::size_t size_bytes) noexcept {
  return b->size_bytes >= large_hole_bytes && b->size_bytes / large_hole_factor >= size_bytes;
}

result<slow_path_outcome> pool::allocate_slow(std::size_t size_bytes, const stream_timeline& stream,
                                              slow_path_options options) {
  std::lock_guard lock(mutex_);
  // Remapping before growth holds large free blocks for large requests. A pool that remaps
  // before it grows runs near its floor, where every request that splits a large hole leaves
  // the next large request free memory in pieces: on PyTorch's fixed-shape training trace the
  // step's 2000 MiB buffer then found its 2 GiB free in 5, then 8, ... 67 pieces, and was
  // mapped again every step (75.8 GiB in 40 steps; on an H200 about 50 us a granule, twice the
  // step time). So while growing by just the request keeps reserved memory within about 0.2 %
  // of peak used, a request does not split a free block of 64 MiB and 8 times its size or more:
  // it grows by its own granules. Replayed (bench/trace_replay), the large buffer then finds its
  // hole whole: 11 remaps (5.5 GiB), all in the first steps, at 1.002 peak reserved over peak
  // used; 4 remaps in 50 steps of the variable-shape trace, also 1.002.
  const bool hold_large_holes = remap_free_memory() == remap_mode::before_growth &&
                                growth_within_allowance_locked(size_bytes);
  // Small requests are served apart from large ones in such a pool (serves_small_apart).
  const bool apart = serves_small_apart();
  result<slow_path_outcome> outcome =
      serve_locked(size_bytes, stream, options, hold_large_holes, apart);
  auto out_of_memory = [&] {
    return !outcome.ok() && outcome.error().code() == error_code::out_of_memory;
  };
  if (hold_large_holes && out_of_memory())  // the holes serve after all
    outcome = serve_locked(size_bytes, stream, options, false, apart);
  if (apart && out_of_memory())  // and then the regions mix
    outcome = serve_locked(size_bytes, stream, options, false, false);
  return outcome;
}

result<slow_path_outcome> pool::serve_locked(std::size_t size_bytes, const stream_timeline& stream,
                                             slow_path_options options, bool hold_large_holes,
                                             bool apart) {
  slow_path_outcome outcome;
  const bool small = apart && is_small_request(size_bytes);
  auto in_region = [&](const block* b) { return !apart || b->small_region == small; };
  auto usable = [&](const block* b) {
    return !(hold_large_holes && is_large_hole_for(b, size_bytes)) && in_region(b) &&
           usable_without_waiting(b, stream);
  };
  // Large requests of a pool that remaps before growth fit at the lowest address, not in the
  // smallest block: long-lived blocks (weights, optimizer state) then gather low and the free
  // memory above them stays in few large pieces, where best fit scattered them through the
  // holes of the step that made them and every later step's pieces formed around them. On
  // PyTorch's convolutional traces, 8 passes each (bench/trace_replay --passes 8), peak reserved
  // over peak used fell from 1.021 to 1.010 and 1.014 (docs/benchmarks.md).
  const bool lowest_fit = apart && !small;
  const std::size_t candidates = lowest_fit ? lowest_fit_candidates : 1;  // 1: best fit
  auto take = [&](const std::function<bool(const block*)>& accept) {
    return index_.take_lowest_fit(size_bytes, accept, candidates);
  };
  // The stream's own cache goes back to the index before the index is searched, so that its
  // blocks merge with their free neighbours. Other streams' caches go back only when the index
  // cannot serve the request: draining them on every miss took blocks that their streams were
  // about to reuse, each of those streams then missed and drained the others, and past about 8
  // threads every allocation ran here under the pool lock (16 threads fell to a third of 4 on an
  // H200 host; docs/benchmarks.md).
  drain_cache_locked(existing_cache(stream));
  // The stream may use all its own frees at once (S2), wherever they stand in it, so they are
  // searched as whole holes. (On cuda every free on a native stream is a point of its own: left
  // in pieces, PyTorch's inference trace held 1.22 times peak used in bench/trace_replay, merged
  // 1.02.) Merging here rather than at insert leaves the pieces to other streams until then.
  index_.merge_own_runs(&stream);
  block* b = take(usable);
  if (b == nullptr) {
    // Before anything costlier (a promotion, a wait, growth): cached frees of every stream, with
    // their free neighbours, may make the block. (Draining before the search took PyTorch's
    // transformer training trace, one stream, from 1.29 to 1.04 peak reserved over peak used in
    // bench/trace_replay; with one stream the first drain above is that drain.)
    drain_caches_locked();
    b = take(usable);
  }
  // The rule that allowed the reuse, read while the stamp is the free's (split copies it).
  std::optional<served_by> how = b != nullptr ? reuse_rule(b, stream) : std::nullopt;
  if (b == nullptr) {
    // Frees proven complete since they were indexed may serve any stream now.
    index_.promote(/*only_proven=*/true);
    b = take(usable);
    if (b != nullptr) how = reuse_rule(b, stream);
  }
  if (b == nullptr && index_.merge_runs_usable_by(&stream, size_bytes)) {
    // This stream's own frees lie side by side with each other or with proven ones, but were
    // made at different points of it (on cuda every free is a point of its own): the stream
    // may use them all at once (S2), so as one block they serve it before growth or a wait.
    b = take(usable);
    if (b != nullptr) how = reuse_rule(b, stream);
  }
  if (b == nullptr && small && !hold_large_holes && move_granule_to_small_region_locked(stream)) {
    // At the limit of growth, a free granule of the large region joins the small one rather
    // than the pool growing. Below it the small region grows instead: a granule taken from a
    // free block splits it, and the next large request that it would have served is mapped
    // again (on PyTorch's fixed-shape trace, 8.5 GiB remapped against 2.7 GiB).
    b = take(usable);
    if (b != nullptr) how = reuse_rule(b, stream);
  }
  if (b == nullptr && remap_free_memory() == remap_mode::before_growth && !hold_large_holes &&
      !small) {
    // Free whole granules, only not in one piece: map them again as one range rather than
    // grow (by more than their shortfall) or synchronize.
    b = remap_locked(size_bytes, stream);
    if (b != nullptr) how = served_by::remap;
  }
  if (b == nullptr && options.may_compact && compact_before_growth() &&
      reserved_bytes_.load(std::memory_order_relaxed) >=
          used_estimate() + compaction_floor(size_bytes)) {
    // Enough memory is free, only not in one piece: rather than grow, synchronize this stream
    // (outside the lock) so its frees can go back, then grow into them.
    outcome.then = slow_path_outcome::next::compact_first;
    return outcome;
  }
  if (b == nullptr) {
    // Growing beats waiting: new memory serializes no stream. Only when the pool cannot grow
    // does it order this stream after another stream's pending free (internal dependencies).
    // A pool that remaps before growth grows by the request's granules, not the growth step:
    // memory committed ahead of need is reserved above used (a 32 MiB step is 1.2 % of a
    // 2.6 GiB pool), and such a pool makes physical memory a granule at a time anyway.
    status grown = grow_locked(size_bytes, stream,
                               /*exact=*/remap_free_memory() == remap_mode::before_growth, small);
    if (grown.ok()) {
      // The new memory may have merged with a free block below it into a large one. Best fit
      // finds it (or that block): the lowest fit would find a held hole below it instead.
      b = index_.take_best_fit(size_bytes, [&](const block* c) {
        return in_region(c) && usable_without_waiting(c, stream);
      });
      how = served_by::growth;
      SOMA_ASSERT(b != nullptr, "growth must provide a usable block");
      if (b == nullptr) {
        return status(error_code::unknown, describe() + ": internal error after growth");
      }
    } else if (grown.code() == error_code::out_of_memory &&
               remap_free_memory() == remap_mode::instead_of_failing &&
               (b = remap_locked(size_bytes, stream)) != nullptr) {
      // Free whole granules, mapped again as one range, serve where growth could not: before
      // any wait, since they need none.
      how = served_by::remap;
    } else if (grown.code() == error_code::out_of_memory && options.may_wait && reuse_policy(3)) {
      index_.merge_pending_runs();
      b = take([&](const block* candidate) {
        return candidate->stamp.timeline != nullptr && candidate->stamp.timeline->accepts_waits();
      });
      if (b == nullptr) return grown;
      how = served_by::internal_dependency;
      outcome.then = slow_path_outcome::next::wait;
      outcome.wait_stream_id = b->stamp.timeline->id();
      outcome.wait_position = b->stamp.position;
    } else {
      return grown;
    }
  }
  try {
    split_locked(b, size_bytes);
  } catch (const std::bad_alloc&) {
    file_locked(b);  // host memory ran out before the split changed anything: b is free again
    throw;
  }
  b->how = how.value_or(served_by::proven_free);
  check_invariants_locked();
  outcome.taken = b;
  return outcome;
}

bool pool::move_granule_to_small_region_locked(const stream_timeline& stream) {
  const block* giver = nullptr;
  index_.for_each_by_size([&](const block* b) {
    if (giver != nullptr || b->small_region || !usable_without_waiting(b, stream)) return;
    const std::uintptr_t from = round_up(b->address, granularity_bytes_);
    if (from + granularity_bytes_ > b->end()) return;
    // The moved granule never merges back, so its commit goes back only a part at a time:
    // where the platform gives a commit back whole only (cuda's whole commits), the commit
    // would stay reserved for good.
    const chunk& c = std::prev(chunks_.upper_bound(from))->second;
    if (memory_->can_decommit_part(c.token)) giver = b;
  });
  if (giver == nullptr) return false;
  const std::uintptr_t from = round_up(giver->address, granularity_bytes_);
  const free_stamp stamp = giver->stamp;
  prepare_locked(2, carve_nodes + 1 + free_index::nodes_needed);
  carve_locked(const_cast<block*>(giver), from, from + granularity_bytes_);
  block* moved = blocks_.make();
  moved->address = from;
  moved->size_bytes = granularity_bytes_;
  moved->stamp = stamp;
  moved->small_region = true;
  all_blocks_.emplace(from, moved);
  index_.insert(moved);
  return true;
}

void pool::split_locked(block* b, std::size_t size_bytes) {
  // Requires: b was taken out of the index; b->size_bytes >= size_bytes.
  if (b->size_bytes - size_bytes < allocation_alignment_bytes) return;
  prepare_locked(1, 1 + free_index::nodes_needed);  // may throw: b is as it was
  block* rest = blocks_.make();
  rest->address = b->address + size_bytes;
  rest->size_bytes = b->size_bytes - size_bytes;
  rest->stamp = b->stamp;
  rest->small_region = b->small_region;
  rest->previous_adjacent = b;
  rest->next_adjacent = b->next_adjacent;
  if (rest->next_adjacent != nullptr) rest->next_adjacent->previous_adjacent = rest;
  b->next_adjacent = rest;
  b->size_bytes = size_bytes;
  all_blocks_.emplace(rest->address, rest);
  index_.insert(rest);
}

void pool::drain_caches_locked() {
  file_unfiled_locked();
  for (const auto& cache : cache_storage_) index_from_cache_locked(cache->drain());
}

void pool::drain_cache_locked(stream_cache* cache) {
  file_unfiled_locked();
  if (cache != nullptr) index_from_cache_locked(cache->drain());
}

void pool::index_from_cache_locked(block* drained) noexcept {
  if (directory_ != nullptr) {
    for (block* b = drained; b != nullptr; b = b->next_in_bin) directory_->forget(b);
  }
  file_locked(drained);
}

void pool::file_locked(block* drained) noexcept {
  while (drained != nullptr) {
    block* b = drained;
    drained = b->next_in_bin;
    b->next_in_bin = nullptr;
    try {
      index_.insert(b);
    } catch (const std::bad_alloc&) {
      // Host memory ran out: this block and the rest wait, free, for the next slow path
      // (free_index::insert changed nothing). Unfiled blocks are not indexed, so none merges
      // with another while it waits.
      b->next_in_bin = drained;
      leave_unfiled_locked(b);
      return;
    }
  }
}

stream_cache* pool::existing_cache(const stream_timeline& stream) const {
  const std::uint32_t slot = stream.cache_slot();
  if (slot >= caches_per_segment * cache_segment_count) return nullptr;
  const cache_segment* segment =
      cache_segments_[slot / caches_per_segment].load(std::memory_order_acquire);
  if (segment == nullptr) return nullptr;
  return segment->caches[slot % caches_per_segment].load(std::memory_order_acquire);
}

void pool::forget_stream(const stream_timeline& stream) {
  stream_cache* cache = existing_cache(stream);
  if (cache == nullptr) return;
  block* drained = cache->drain();
  if (drained == nullptr) return;
  std::lock_guard lock(mutex_);
  index_from_cache_locked(drained);
}

void pool::forget_timeline(const stream_timeline& stream, free_stamp replacement) {
  std::lock_guard lock(mutex_);
  index_.move_stamps(&stream, replacement);
  for (retired_range& r : retired_) {
    if (r.stamp.timeline == &stream) r.stamp = replacement;
  }
}

}  // namespace soma::detail
