// The pool-wide index of free blocks: best fit by size, coalescing by address.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "core/block.hpp"
#include "core/block_store.hpp"
#include "core/node_reserve.hpp"

namespace soma::detail {

/// A pool's blocks by address, with nodes from the pool's node_reserve.
using block_map = std::map<std::uintptr_t, block*, std::less<>,
                           reserve_allocator<std::pair<const std::uintptr_t, block*>>>;

/// Free blocks of one pool, ordered by (size, address) for best fit. A block enters with
/// its free stamp; neighbours merge only when they are interchangeable (both proven
/// complete, or freed at the same point of the same stream), so merging on insert never makes
/// memory usable earlier or later than its parts were. The two merges on demand below trade
/// that for room, each only where a stream would otherwise wait or grow. Not thread-safe: the
/// owning pool's lock guards it.
class free_index {
 public:
  /// all_blocks: the pool's map of every block by address; merges keep it current and give
  /// the blocks they absorb back to store. The index's sets take their nodes from `nodes`.
  free_index(block_map& all_blocks, block_store& store, node_reserve& nodes)
      : all_blocks_(all_blocks),
        store_(store),
        nodes_(nodes),
        by_size_(by_size_then_address{}, reserve_allocator<block*>(nodes)),
        stamped_(std::less<>{}, reserve_allocator<block*>(nodes)),
        run_marks_(std::less<>{}, reserve_allocator<run_mark>(nodes)) {}
  free_index(const free_index&) = delete;
  free_index& operator=(const free_index&) = delete;
  ~free_index();

  /// Adds a free block, merging it with indexed neighbours; returns the resulting block
  /// (the argument may have been absorbed and deleted). Strong guarantee: if host memory runs
  /// out (std::bad_alloc) nothing has changed, the index nor freed. Allocates nothing where
  /// `nodes_needed` nodes are reserved.
  block* insert(block* freed);
  /// Removes and returns the smallest block of at least size_bytes that `stream` may use
  /// now: freed on `stream` itself or proven complete. nullptr if none.
  block* take_best_fit(std::size_t size_bytes, const stream_timeline* stream);
  /// Same, with the caller deciding which stamped blocks are usable (reuse policies).
  block* take_best_fit(std::size_t size_bytes, const std::function<bool(const block*)>& usable);
  /// Address-ordered first fit, its search bounded: of the `candidates` smallest usable blocks
  /// of at least size_bytes, removes and returns the one at the lowest address (nullptr if none).
  block* take_lowest_fit(std::size_t size_bytes, const std::function<bool(const block*)>& usable,
                         std::size_t candidates);
  /// merge_own_runs for every stream: each run of adjacent pending blocks freed on the same
  /// stream becomes one block that carries the latest of their stamps. Used only when the pool is
  /// out of memory and is about to order a stream after a pending free anyway (internal
  /// dependencies): one wait for the latest free then buys the whole run.
  void merge_pending_runs();
  /// Merges the runs of adjacent blocks that `stream` freed at different points of it, each run
  /// into one block under its latest stamp; true if one merged. Done when that stream misses
  /// in its cache, not at insert: until then another stream may take the earlier pieces on
  /// their own (ordered after them, or once they completed). Visits only the runs insert saw
  /// form since its last call.
  bool merge_own_runs(const stream_timeline* stream);
  /// Of the runs of adjacent free blocks that stream may use at once (S2: its own frees, at
  /// whatever points of it, and frees proven complete) holding at least one of its own and at
  /// least min_bytes in all, merges the smallest into one block stamped with the latest of its
  /// frees there; true if one merged. That block hides its proven and earlier pieces from
  /// other streams until that free is known complete, so only a run that serves the request
  /// merges, and only where stream would otherwise grow the pool or wait.
  bool merge_runs_usable_by(const stream_timeline* stream, std::size_t min_bytes);
  /// Before a remap, which maps whole free granules again: merges each run that stream may use
  /// at once (as merge_runs_usable_by) where the run holds more whole granules than its blocks
  /// do apart. A granule whose bytes lie in two blocks (one proven complete, one freed on
  /// stream later) is free, but only as one block can it be found and mapped again. True if
  /// one merged.
  bool merge_runs_for_granules(const stream_timeline* stream, std::size_t granule_bytes);
  /// Merges the indexed block after `indexed` into it; `indexed` keeps its stamp. Requires:
  /// that block is fresh memory (no stamp), which growth adds for the stream `indexed` is
  /// pending on, to be taken with it at once.
  void absorb_next(block* indexed);
  /// Removes a specific indexed block.
  void remove(block* indexed);
  /// Clears the stamps of frees now proven complete (or, with only_proven false, complete
  /// at all) and merges what became mergeable.
  void promote(bool only_proven);
  /// Moves the stamps of every free made on `forgotten` (a stream whose work has all run and
  /// which is about to go away: no block may name it afterwards) to `replacement`, or clears
  /// those already proven complete, and merges.
  void move_stamps(const stream_timeline* forgotten, free_stamp replacement);

  /// Calls fn for every indexed block, smallest first. fn must not change the index.
  template <typename Fn>
  void for_each_by_size(Fn&& fn) const {
    for (const block* b : by_size_) fn(b);
  }

  std::size_t free_bytes() const noexcept { return free_bytes_; }
  /// The sum over the indexed blocks, counted again (expensive checks).
  std::size_t recount_bytes() const noexcept {
    std::size_t sum = 0;
    for (const block* b : by_size_) sum += b->size_bytes;
    return sum;
  }
  std::size_t block_count() const noexcept { return by_size_.size(); }
  /// Nodes one insert may take: its two sets, and the mark of a stream's unmerged run (which,
  /// where it cannot be had, is dropped; a step that inserts several blocks must not find the
  /// nodes it made ahead taken by it). A remove or a merge takes none.
  static constexpr std::size_t nodes_needed = 3;
  /// How many streams have runs for merge_own_runs (tests: none outlives its stream).
  std::size_t streams_with_unmerged_runs() const { return streams_with_marks().size(); }
  /// Marks of runs kept for merge_own_runs (tests: bounded by the pending blocks).
  std::size_t run_mark_count() const noexcept { return run_marks_.size(); }

 private:
  struct by_size_then_address {
    bool operator()(const block* a, const block* b) const noexcept {
      return a->size_bytes != b->size_bytes ? a->size_bytes < b->size_bytes
                                            : a->address < b->address;
    }
  };

  static bool can_merge(const block* a, const block* b) noexcept;
  static bool is_usable_by(const block* b, const stream_timeline* stream) noexcept;
  void erase(block* indexed);
  void add(block* b);
  void note_unmerged_neighbours(const block* b);
  static bool is_indexed_free_of(const block* b, const stream_timeline* stream) noexcept;
  block* merge_into(block* keep, block* absorbed);
  template <typename Restamp>
  void restamp_if(Restamp&& restamp);

  using size_set = std::set<block*, by_size_then_address, reserve_allocator<block*>>;
  using stamp_set = std::set<block*, std::less<>, reserve_allocator<block*>>;

  block_map& all_blocks_;
  block_store& store_;
  node_reserve& nodes_;
  size_set by_size_;
  stamp_set stamped_;  // blocks whose free is not yet proven complete
  /// A run merge_runs_usable_by and merge_runs_for_granules take: stream's own frees and blocks
  /// proven complete, adjacent. Stream's frees among them are what make it a run.
  static bool joins_run_of(const block* b, const stream_timeline* stream);
  /// Calls visit(start) once for each run of stream (joins_run_of) holding one of its frees,
  /// start being the run's lowest block.
  template <typename Visit>
  void for_each_run_of(const stream_timeline* stream, Visit&& visit);
  /// Merges the run that starts at start into it, under the latest of stream's stamps there.
  void merge_run(block* start, const stream_timeline* stream);
  // Where a stream's free was indexed beside another of its frees made at a different point:
  // merge_own_runs' work, found from these addresses rather than by walking every pending
  // block (on cuda, where every free is a point of its own, that walk was a tenth of a replay).
  using run_mark = std::pair<const stream_timeline*, std::uintptr_t>;
  void note_run_mark(const run_mark& mark);
  /// The block that holds the mark's address, if it is a free of the mark's stream beside
  /// another (a run); nullptr otherwise.
  block* run_marked_by(const run_mark& mark) const noexcept;
  /// The streams that have marks, each once.
  std::vector<const stream_timeline*> streams_with_marks() const;
  /// Drops the marks that no longer mark a run, and all but one in each block.
  void prune_run_marks() noexcept;
  std::set<run_mark, std::less<>, reserve_allocator<run_mark>> run_marks_;
  std::size_t free_bytes_ = 0;
};

}  // namespace soma::detail
