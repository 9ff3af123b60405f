#include "core/free_index.hpp"

#include <iterator>
#include <new>

#include <vector>

#include "core/check.hpp"

namespace soma::detail {

free_index::~free_index() = default;  // blocks are owned by the pool's block map

bool free_index::is_usable_by(const block* b, const stream_timeline* stream) noexcept {
  return b->stamp.timeline == nullptr || b->stamp.timeline == stream ||
         b->stamp.is_proven_complete();
}

bool free_index::can_merge(const block* a, const block* b) noexcept {
  if (b == nullptr || b->current_state() != block_state::indexed) return false;
  // Pending frees merge only when they are the same point of the same stream: a merged
  // block carries one stamp, and a later stamp would hide an earlier free that another
  // stream may already use (its clock covers it, or it completed). Proven blocks merge
  // freely; pending neighbours merge once a synchronize proves them.
  return a->stamp.timeline == b->stamp.timeline && a->stamp.position == b->stamp.position;
}

void free_index::add(block* b) {
  by_size_.insert(b);
  if (b->stamp.timeline != nullptr) {
    try {
      stamped_.insert(b);
    } catch (...) {
      by_size_.erase(b);
      throw;
    }
  }
  b->set_state(block_state::indexed);  // once filed: a neighbour merges only with filed blocks
  free_bytes_ += b->size_bytes;
}

void free_index::erase(block* indexed) {
  // Detached first: a neighbour inserted meanwhile must not merge with it.
  indexed->set_state(block_state::detached);
  by_size_.erase(indexed);
  stamped_.erase(indexed);
  free_bytes_ -= indexed->size_bytes;
}

block* free_index::merge_into(block* keep, block* absorbed) {
  // Requires: absorbed directly follows keep; neither is in the sets.
  keep->size_bytes += absorbed->size_bytes;
  keep->next_adjacent = absorbed->next_adjacent;
  if (keep->next_adjacent != nullptr) keep->next_adjacent->previous_adjacent = keep;
  if (absorbed->stamp.position > keep->stamp.position) keep->stamp = absorbed->stamp;
  all_blocks_.erase(absorbed->address);
  store_.recycle(absorbed);
  return keep;
}

block* free_index::insert(block* freed) {
  // What add() will need is allocated first: a merge below cannot be undone. (Merged blocks go
  // back to the store, which allocates nothing for them.)
  nodes_.reserve(nodes_needed);
  if (freed->stamp.is_proven_complete()) freed->stamp = {};
  block* result = freed;
  if (can_merge(result, result->previous_adjacent)) {
    block* before = result->previous_adjacent;
    erase(before);
    result = merge_into(before, result);
  }
  if (can_merge(result, result->next_adjacent)) {
    block* after = result->next_adjacent;
    erase(after);
    result = merge_into(result, after);
  }
  add(result);
  try {
    note_unmerged_neighbours(result);
  } catch (const std::bad_alloc&) {
    // Only a hint is lost: that run merges once another free of the stream is indexed beside
    // it, or at a synchronize.
  }
  return result;
}

bool free_index::is_indexed_free_of(const block* b, const stream_timeline* stream) noexcept {
  return b != nullptr && b->current_state() == block_state::indexed && b->stamp.timeline == stream;
}

void free_index::note_unmerged_neighbours(const block* b) {
  const stream_timeline* stream = b->stamp.timeline;
  if (stream == nullptr) return;
  if (is_indexed_free_of(b->previous_adjacent, stream) ||
      is_indexed_free_of(b->next_adjacent, stream))
    note_run_mark(run_mark{stream, b->address});
}

void free_index::note_run_mark(const run_mark& mark) {
  // A stream that frees and never misses (a stream frees are deferred to, say) would leave a
  // mark per free; once marks outnumber the pending blocks, those that no longer mark a run go.
  if (run_marks_.size() >= 2 * stamped_.size() + 64) prune_run_marks();
  run_marks_.insert(mark);
}

block* free_index::run_marked_by(const run_mark& mark) const noexcept {
  auto at = all_blocks_.upper_bound(mark.second);
  if (at == all_blocks_.begin()) return nullptr;
  block* b = std::prev(at)->second;
  if (mark.second >= b->end() || !is_indexed_free_of(b, mark.first)) return nullptr;
  return is_indexed_free_of(b->previous_adjacent, mark.first) ||
                 is_indexed_free_of(b->next_adjacent, mark.first)
             ? b
             : nullptr;
}

void free_index::prune_run_marks() noexcept {
  // Marks are ordered by stream, then address: of several marks in one block, the first stays.
  const block* kept = nullptr;
  for (auto it = run_marks_.begin(); it != run_marks_.end();) {
    const block* b = run_marked_by(*it);
    if (b == nullptr || b == kept) {
      it = run_marks_.erase(it);
    } else {
      kept = b;
      ++it;
    }
  }
}

bool free_index::merge_own_runs(const stream_timeline* stream) {
  const auto first = run_marks_.lower_bound(run_mark{stream, 0});
  auto last = first;
  while (last != run_marks_.end() && last->first == stream) ++last;
  if (first == last) return false;
  std::vector<std::uintptr_t> marked;
  for (auto it = first; it != last; ++it) marked.push_back(it->second);
  run_marks_.erase(first, last);
  auto same_stream = [stream](const block* n) { return is_indexed_free_of(n, stream); };
  bool merged = false;
  for (const std::uintptr_t address : marked) {
    // The block there now: the one marked, or the block that absorbed it since.
    // Nothing there any more: merged already, taken, or proven.
    block* start = run_marked_by(run_mark{stream, address});
    if (start == nullptr) continue;
    while (same_stream(start->previous_adjacent)) start = start->previous_adjacent;
    erase(start);
    while (same_stream(start->next_adjacent)) {
      block* next = start->next_adjacent;
      erase(next);
      merge_into(start, next);
    }
    add(start);
    merged = true;
  }
  return merged;
}

std::vector<const stream_timeline*> free_index::streams_with_marks() const {
  // Marks are ordered by stream first.
  std::vector<const stream_timeline*> streams;
  for (const run_mark& mark : run_marks_)
    if (streams.empty() || streams.back() != mark.first) streams.push_back(mark.first);
  return streams;
}

block* free_index::take_best_fit(std::size_t size_bytes, const stream_timeline* stream) {
  return take_best_fit(size_bytes, [stream](const block* b) { return is_usable_by(b, stream); });
}

block* free_index::take_best_fit(std::size_t size_bytes,
                                 const std::function<bool(const block*)>& usable) {
  // The first usable block in size order is the best fit: the lowest of one candidate.
  return take_lowest_fit(size_bytes, usable, 1);
}

block* free_index::take_lowest_fit(std::size_t size_bytes,
                                   const std::function<bool(const block*)>& usable,
                                   std::size_t candidates) {
  block probe;
  probe.size_bytes = size_bytes;
  probe.address = 0;
  block* lowest = nullptr;
  std::size_t seen = 0;
  for (auto it = by_size_.lower_bound(&probe); it != by_size_.end() && seen < candidates; ++it) {
    block* candidate = *it;
    if (!usable(candidate)) continue;
    ++seen;
    if (lowest == nullptr || candidate->address < lowest->address) lowest = candidate;
  }
  if (lowest != nullptr) erase(lowest);
  return lowest;
}

void free_index::remove(block* indexed) { erase(indexed); }

void free_index::absorb_next(block* indexed) {
  block* fresh = indexed->next_adjacent;
  SOMA_ASSERT(fresh != nullptr && fresh->current_state() == block_state::indexed &&
                  fresh->stamp.timeline == nullptr,
              "absorb_next takes fresh memory only");
  erase(indexed);
  erase(fresh);
  merge_into(indexed, fresh);
  add(indexed);
}

void free_index::merge_pending_runs() {
  // Every stream with such runs was noted as they formed (note_unmerged_neighbours).
  for (const stream_timeline* stream : streams_with_marks()) merge_own_runs(stream);
}

bool free_index::joins_run_of(const block* b, const stream_timeline* stream) {
  return b != nullptr && b->current_state() == block_state::indexed &&
         (b->stamp.timeline == stream || b->stamp.timeline == nullptr ||
          b->stamp.is_proven_complete());
}

void free_index::merge_run(block* start, const stream_timeline* stream) {
  erase(start);
  // Another stream's proven stamp is no stamp: positions of two streams do not compare.
  if (start->stamp.timeline != stream) start->stamp = {};
  while (joins_run_of(start->next_adjacent, stream)) {
    block* next = start->next_adjacent;
    erase(next);
    if (next->stamp.timeline != stream) next->stamp = {};
    merge_into(start, next);
  }
  add(start);
}

template <typename Visit>
void free_index::for_each_run_of(const stream_timeline* stream, Visit&& visit) {
  // Each run is visited once, from its lowest block, whichever of its own blocks leads there
  // first.
  std::set<const block*> measured;
  for (block* own : stamped_) {
    if (own->stamp.timeline != stream || measured.count(own) != 0) continue;
    block* start = own;
    while (joins_run_of(start->previous_adjacent, stream)) start = start->previous_adjacent;
    for (const block* x = start; joins_run_of(x, stream); x = x->next_adjacent) measured.insert(x);
    visit(start);
  }
}

bool free_index::merge_runs_usable_by(const stream_timeline* stream, std::size_t min_bytes) {
  // The smallest run that serves the request: found first, merged alone.
  block* best = nullptr;
  std::size_t best_bytes = 0;
  for_each_run_of(stream, [&](block* start) {
    std::size_t bytes = 0;
    std::size_t pieces = 0;
    for (const block* x = start; joins_run_of(x, stream); x = x->next_adjacent) {
      bytes += x->size_bytes;
      ++pieces;
    }
    // Ties go to the lower address: the order of stamped_ is the blocks' own addresses in host
    // memory, which the history of merges decides.
    if (pieces > 1 && bytes >= min_bytes &&
        (best == nullptr || bytes < best_bytes ||
         (bytes == best_bytes && start->address < best->address))) {
      best = start;
      best_bytes = bytes;
    }
  });
  if (best == nullptr) return false;
  merge_run(best, stream);
  return true;
}

bool free_index::merge_runs_for_granules(const stream_timeline* stream, std::size_t granule_bytes) {
  auto whole_granules = [granule_bytes](std::uintptr_t from, std::uintptr_t to) -> std::size_t {
    const std::uintptr_t low = (from + granule_bytes - 1) / granule_bytes * granule_bytes;
    const std::uintptr_t high = to / granule_bytes * granule_bytes;
    return high > low ? (high - low) / granule_bytes : 0;
  };
  std::vector<block*> gaining;
  for_each_run_of(stream, [&](block* start) {
    std::size_t apart = 0;
    std::uintptr_t end = start->address;
    for (const block* x = start; joins_run_of(x, stream); x = x->next_adjacent) {
      apart += whole_granules(x->address, x->end());
      end = x->end();
    }
    if (whole_granules(start->address, end) > apart) gaining.push_back(start);
  });
  for (block* start : gaining) merge_run(start, stream);
  return !gaining.empty();
}

template <typename Restamp>
void free_index::restamp_if(Restamp&& restamp) {
  std::vector<block*> changed;
  for (block* b : stamped_) {
    if (restamp(b, nullptr)) changed.push_back(b);
  }
  for (block* b : changed) {
    // Merging only absorbs blocks whose stamp equals the inserted one's, and the changed
    // blocks' stamps are equal only among themselves, so an unprocessed candidate is never
    // deleted by an earlier iteration; b itself may be absorbed by its insert.
    erase(b);
    restamp(b, &b->stamp);
    insert(b);
  }
}

void free_index::promote(bool only_proven) {
  restamp_if([only_proven](const block* b, free_stamp* stamp) {
    if (stamp != nullptr) {
      *stamp = {};
      return true;
    }
    return only_proven ? b->stamp.is_proven_complete() : b->stamp.is_complete();
  });
}

void free_index::move_stamps(const stream_timeline* forgotten, free_stamp replacement) {
  restamp_if([forgotten, replacement](const block* b, free_stamp* stamp) {
    if (stamp != nullptr) {
      *stamp = b->stamp.is_proven_complete() ? free_stamp{} : replacement;
      return true;
    }
    return b->stamp.timeline == forgotten;
  });
  // No block names it any more; a stream per request would otherwise leave one entry each.
  run_marks_.erase(run_marks_.lower_bound(run_mark{forgotten, 0}),
                   run_marks_.upper_bound(run_mark{forgotten, UINTPTR_MAX}));
}

}  // namespace soma::detail
