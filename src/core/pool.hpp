// A memory pool: address space, committed physical memory, free blocks, statistics (S3).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/address_space.hpp"
#include "core/block.hpp"
#include "core/block_directory.hpp"
#include "core/block_store.hpp"
#include "core/call_census.hpp"
#include "core/free_index.hpp"
#include "core/memory_history.hpp"
#include "core/memory_provider.hpp"
#include "core/node_reserve.hpp"
#include "core/pool_snapshot.hpp"
#include "core/stream_hooks.hpp"
#include "core/status.hpp"
#include "core/stream_cache.hpp"
#include "core/stream_timeline.hpp"

namespace soma::detail {

struct pool_config {
  int device = 0;                     ///< -1 for host memory (no device owns it)
  std::string name;                   ///< for messages: "pool 'tenant-a' on device 0"
  std::string location;               ///< where its memory is, for messages; "" = the device
  std::size_t max_size_bytes = 0;     ///< cap on committed memory (never 0 here)
  std::size_t reservation_bytes = 0;  ///< address space reserved at a time
  std::size_t growth_step_bytes = 0;  ///< smallest growth when the cap allows; 0 = granularity
};

/// Statistics of S10, read without the pool lock.
struct pool_statistics {
  std::uint64_t reserved_bytes = 0;
  std::uint64_t reserved_high_bytes = 0;
  std::uint64_t used_bytes = 0;
  std::uint64_t used_high_bytes = 0;
};

/// When a pool maps free granules again rather than grow (values of
/// somaMemPoolAttrRemapFreeMemory).
enum class remap_mode : int {
  never = 0,
  before_growth = 1,       ///< memory first: rather than grow, wherever free granules serve
  instead_of_failing = 2,  ///< only where growth fails (the cap, or the device refuses)
};

/// What the remap path did (design §3 "Remapping"), read without the pool lock.
struct remap_statistics {
  std::uint64_t remaps = 0;          ///< allocations served by mapping free granules again
  std::uint64_t remapped_bytes = 0;  ///< physical bytes those mappings covered
  std::uint64_t retired_bytes = 0;   ///< old addresses still mapped, waiting for their frees
  std::uint64_t retired_ranges = 0;  ///< old address ranges retired so far (a part each)
  std::uint64_t unmap_calls = 0;     ///< calls that unmapped them (ranges end to end: one)
  /// Bytes of remapped blocks that a free block ending at unmapped address space gave where it
  /// lies: the rest was mapped after it, so these needed no mapping call (and no unmap later).
  std::uint64_t kept_in_place_bytes = 0;
};

/// What the pool knows about an address it does not have as a live allocation start.
struct address_diagnosis {
  enum class kind { outside_pool, unallocated, freed, interior_of_live } what = kind::outside_pool;
  std::uintptr_t block_address = 0;
  std::size_t block_bytes = 0;  ///< requested bytes for live blocks
};

/// What the slow path decided under the pool lock, for pool::allocate to finish outside it.
struct slow_path_outcome {
  enum class next : std::uint8_t {
    done,           ///< `taken` serves the request as it is
    wait,           ///< `taken` serves once the stream is ordered after wait_stream_id's
                    ///< wait_position (S11 internal dependencies)
    compact_first,  ///< enough memory is free, only fragmented: synchronize the stream, give
                    ///< free memory back and search again before growing (S9 compaction)
  };
  next then = next::done;
  block* taken = nullptr;  ///< done and wait: the block, split to size, out of the index
  /// wait: the stream that freed `taken` and its position there. By id: once the pool lock is
  /// released the freeing stream may be destroyed and forgotten.
  std::uint64_t wait_stream_id = 0;
  std::uint64_t wait_position = 0;
};

/// What pool::allocate may ask of the slow path.
struct slow_path_options {
  bool may_wait = false;     ///< may order the stream after another's free (needs hooks)
  bool may_compact = false;  ///< may answer compact_first (needs hooks)
};

/// The allocation logic of design §2 "The flow of one allocation".
/// Thread-safe. The fast path (allocate/free on a stream whose cache holds a block of the
/// size) takes only that stream's cache lock; everything else takes the pool lock.
class pool {
 public:
  pool(pool_config config, std::unique_ptr<memory_provider> memory);
  pool(const pool&) = delete;
  pool& operator=(const pool&) = delete;
  /// Requires: no live allocations; every free complete. Returns all memory.
  ~pool();

  /// A large request of a pool that serves small ones apart (serves_small_apart) takes, of the
  /// free blocks that fit, the one at the lowest address among this many, the smallest first
  /// (free_index::take_lowest_fit): address-ordered first fit at a bounded cost.
  static constexpr std::size_t lowest_fit_candidates = 64;
  /// Retired ranges (old addresses of remapped memory) a remap leaves mapped before it unmaps
  /// those whose frees have completed (pool_remap.cpp).
  static constexpr std::size_t retired_ranges_kept = 256;

  /// Allocates requested_bytes (> 0) for use on stream (S1). The block is not yet in any
  /// pointer table: the caller publishes it.
  /// With hooks given, the pool may, when it cannot grow, hand out a block whose free is still
  /// pending on another stream, ordering the stream after it (internal dependencies, S11), and
  /// with compaction on it synchronizes the stream and gives free memory back before growing
  /// (S9); without hooks it does neither.
  /// Inline, the fast path (a hit in the stream's cache, S11); the rest out of line.
  result<block*> allocate(std::size_t requested_bytes, const stream_timeline& stream,
                          stream_hooks* hooks = nullptr) {
    if (block* hit = allocate_cached(requested_bytes, stream)) [[likely]]
      return hit;
    result<block*> missed = allocate_missed(requested_bytes, stream, hooks);
    // The slow path's allocation is recorded here (a hit of the stream's cache went into the
    // cache's log with the pop).
    if (memory_history::recording() && missed.ok()) [[unlikely]]
      record_allocated(*missed.value(), stream);
    return missed;
  }
  /// allocate()'s fast path alone: a block of the stream's cache, or nullptr (a miss, or a
  /// request above the max size) where allocate() would go on to the slow path.
  [[gnu::always_inline]] block* allocate_cached(std::size_t requested_bytes,
                                                const stream_timeline& stream) {
    if (requested_bytes > config_.max_size_bytes) [[unlikely]]
      return nullptr;
    const call_census::scope in_call(calls_);
    stream_cache* cache = cache_for(stream);
    if (cache == nullptr) [[unlikely]]
      return nullptr;
    std::int64_t publish = 0;
    block* hit = cache->pop(round_up(requested_bytes, allocation_alignment_bytes),
                            static_cast<std::int64_t>(requested_bytes), &publish, &stream);
    if (hit == nullptr) return nullptr;
    hit->how = served_by::stream_cache;
    make_live(hit, requested_bytes);
    if (publish != 0) publish_used(publish);
    return hit;
  }
  /// Frees a live block on stream (S2): reusable at once by stream, by other streams once
  /// the free is proven complete. Requires: the block is live and was removed from the
  /// pointer table by the caller. Inline, the fast path (into the stream's cache).
  /// Never fails: where host memory runs out, the block waits on a list of its own for the next
  /// slow path to file it (free_to_index).
  [[gnu::always_inline]] void free(block* live, const stream_timeline& stream) noexcept {
    SOMA_ASSERT(live->is_live(), "the caller frees a live block");
    const call_census::scope in_call(calls_);
    // Memory history, or a scope label to take off (it belongs to one allocation: a block
    // reused once recording stopped shows none): the same free, noted.
    if (memory_history::recording() || live->scope.load(std::memory_order_relaxed) != 0)
        [[unlikely]] {
      free_noted(live, stream);
      return;
    }
    const auto bytes = static_cast<std::int64_t>(live->requested_bytes);
    live->stamp = free_stamp{&stream, stream.enqueued_position()};
    live->set_state(block_state::cached);
    stream_cache* cache = cache_for_free(stream);
    if (cache != nullptr && cache->push(live, bytes)) [[likely]]
      return;
    free_to_index(live, cache == nullptr ? bytes : 0);
  }
  /// free() where memory history records or the block has a scope label: the free and its
  /// record (into the stream cache's log, or the thread's chunk on the way to the index).
  /// Inline as free() is: a call would cost recording what its whole log entry does.
  [[gnu::always_inline]] void free_noted(block* live, const stream_timeline& stream) noexcept {
    const auto bytes = static_cast<std::int64_t>(live->requested_bytes);
    free_note note;
    const free_note* noted = note_free(*live, stream, note);
    live->stamp = free_stamp{&stream, stream.enqueued_position()};
    live->set_state(block_state::cached);
    stream_cache* cache = cache_for_free(stream);
    if (cache != nullptr && cache->push(live, bytes, noted)) [[likely]]
      return;
    free_to_index(live, cache == nullptr ? bytes : 0, noted);
  }

  /// Moves every cached block of stream into the index; called when a stream is destroyed
  /// so its cache slot can serve another stream.
  void forget_stream(const stream_timeline& stream);
  /// Called once a destroyed stream's work has all run, before its timeline goes away: its
  /// frees not yet proven take `replacement` as their stamp (a timeline that outlives every
  /// stream, whose positions a device synchronize proves), so no block names the timeline.
  void forget_timeline(const stream_timeline& stream, free_stamp replacement);
  /// Called at synchronize points (S9, S12): promotes proven frees and releases memory
  /// beyond the release threshold.
  void on_synchronize();
  /// Releases proven-free memory until at most keep_bytes stay reserved, as far as live
  /// memory and granularity allow (S9).
  void trim_to(std::size_t keep_bytes);
  /// Tears down if nothing is live and every free has completed; true if done (S5).
  bool try_release_everything();

  pool_statistics statistics() const noexcept;
  void reset_reserved_high() noexcept;
  void reset_used_high() noexcept;
  std::uint64_t release_threshold_bytes() const noexcept {
    return release_threshold_bytes_.load(std::memory_order_relaxed);
  }
  void set_release_threshold_bytes(std::uint64_t bytes) noexcept {
    release_threshold_bytes_.store(bytes, std::memory_order_relaxed);
  }
  /// True while any allocation is live (requested sizes are never 0, so used > 0).
  bool has_live_allocations() const noexcept { return used_now() != 0; }

  /// S11 policy flags (1 follow event dependencies, 2 opportunistic, 3 internal
  /// dependencies); all on by default. Same-stream reuse and frees proven by a synchronize
  /// are always allowed, whatever the flags say.
  bool reuse_policy(int policy) const noexcept {
    return reuse_policies_[static_cast<std::size_t>(policy - 1) % 3].load(
        std::memory_order_relaxed);
  }
  void set_reuse_policy(int policy, bool enabled) noexcept {
    reuse_policies_[static_cast<std::size_t>(policy - 1) % 3].store(enabled,
                                                                    std::memory_order_relaxed);
  }
  void set_name(std::string name);

  /// S9, soma's own: before growing, give fragmented free memory back first (the caller
  /// synchronizes the stream so its frees can go), so peak memory stays near live memory.
  bool compact_before_growth() const noexcept { return compact_.load(std::memory_order_relaxed); }
  void set_compact_before_growth(bool enabled) noexcept {
    compact_.store(enabled, std::memory_order_relaxed);
  }

  /// soma's own (S9): when no free block fits, map the physical memory of free whole granules
  /// again at fresh addresses, committing only the shortfall, rather than grow (before_growth)
  /// or only where growth fails (instead_of_failing, the default).
  remap_mode remap_free_memory() const noexcept { return remap_.load(std::memory_order_relaxed); }
  void set_remap_free_memory(remap_mode mode) noexcept {
    remap_.store(mode, std::memory_order_relaxed);
  }
  remap_statistics remap_counts() const noexcept;
  /// Tests: every step that must not stop halfway keeps only the blocks and nodes it prepared
  /// (prepare_locked), none spare from earlier steps, so that a count too low shows up as an
  /// allocation in the middle of the step, where a host-memory sweep makes it fail.
  void prepare_exactly(bool on) {
    std::lock_guard lock(mutex_);
    exact_preparation_ = on;
  }

  /// Calls visit for each physical piece backing [address, address + bytes), in address
  /// order, under the pool lock (so none is released meanwhile); stops at the first failure
  /// and returns it. invalid_value if part of the range is not mapped. Used to export an
  /// allocation's memory to another process (S7).
  status visit_physical_pieces(std::uintptr_t address, std::size_t bytes,
                               const std::function<status(const physical_piece&)>& visit) const;

  address_diagnosis diagnose(std::uintptr_t address) const;
  /// Reservations, commits and every block with its state, and the statistics (see
  /// pool_snapshot for how exact it is while other threads use the pool).
  pool_snapshot snapshot() const;
  bool owns_address(std::uintptr_t address) const;
  const pool_config& config() const noexcept { return config_; }
  std::string describe() const;  ///< "pool 'name' on device 0"
  std::string name() const;      ///< set_name's, or the config's; "" for none
  std::size_t granularity_bytes() const noexcept { return granularity_bytes_; }
  /// 1, 2, ... in the order pools are made in the process: names the pool in memory history.
  std::uint32_t serial() const noexcept { return serial_; }
  /// Records an event of this pool in memory history (if recording is on), with the pool's
  /// reserved and used bytes now.
  void note_history(history_kind kind, std::uintptr_t address, std::size_t bytes,
                    std::uint64_t stream = 0) const noexcept;

 protected:
  /// Where the layer above finds this pool's blocks by address (nullptr: nowhere). Set once,
  /// before the first allocation.
  void set_directory(block_directory* directory) noexcept { directory_ = directory; }
  /// Drains the caches into the index (their blocks leave the directory) and tells the
  /// directory nothing more: a derived pool that owns its directory calls it when it goes.
  void detach_directory();
  /// Runs fn under the pool lock: for a derived pool that changes how its memory is committed.
  template <typename Fn>
  void with_lock(Fn&& fn) const {
    std::lock_guard lock(mutex_);
    fn();
  }

 private:
  static constexpr std::size_t caches_per_segment = 1024;
  static constexpr std::size_t cache_segment_count = 64;
  struct cache_segment {
    std::array<std::atomic<stream_cache*>, caches_per_segment> caches{};
  };
  struct chunk {  // one commit, or what is left of it after partial releases
    std::size_t size_bytes = 0;
    std::uint64_t token = 0;
    std::size_t offset_bytes = 0;  // where this piece starts inside the commit
  };
  // Addresses whose physical memory was mapped again elsewhere (remap). They stay mapped, and
  // out of the address space's unmapped ranges, until the free that let them go has completed:
  // work before it may still use them.
  struct retired_range {
    physical_piece piece;
    free_stamp stamp;
  };
  using chunk_map = std::map<std::uintptr_t, chunk, std::less<>,
                             reserve_allocator<std::pair<const std::uintptr_t, chunk>>>;
  /// Tree nodes a carve needs: the piece after the hole in the block map, and two index inserts.
  static constexpr std::size_t carve_nodes = 1 + 2 * free_index::nodes_needed;

  /// The stream's cache, made on first use; nullptr for a stream past the slots. Inline: it runs
  /// twice a pair, and out of line its frame (saving registers for create_cache) cost more than
  /// its loads.
  stream_cache* cache_for(const stream_timeline& stream) {
    const std::uint32_t slot = stream.cache_slot();
    if (slot >= caches_per_segment * cache_segment_count) [[unlikely]]
      return nullptr;
    if (const cache_segment* segment =
            cache_segments_[slot / caches_per_segment].load(std::memory_order_acquire);
        segment != nullptr) [[likely]] {
      stream_cache* cache =
          segment->caches[slot % caches_per_segment].load(std::memory_order_acquire);
      if (cache != nullptr) [[likely]]
        return cache;
    }
    return create_cache(slot);
  }
  /// cache_for, or nullptr where making the cache finds host memory exhausted (a free goes to
  /// the index instead).
  stream_cache* cache_for_free(const stream_timeline& stream) noexcept {
    try {
      return cache_for(stream);
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
  }
  /// The stream's cache in this pool if it has one (cache_for makes one).
  stream_cache* existing_cache(const stream_timeline& stream) const;
  [[gnu::noinline]] stream_cache* create_cache(std::uint32_t slot);
  result<slow_path_outcome> allocate_slow(std::size_t size_bytes, const stream_timeline& stream,
                                          slow_path_options options);
  /// The slow path's search, remapping, growth and waits, under the pool lock; with
  /// hold_large_holes, large free blocks (is_large_hole_for) serve no request. A pool that
  /// remaps before growth grows by the request's granules only.
  /// With apart, a request is served from its own region only (serves_small_apart).
  result<slow_path_outcome> serve_locked(std::size_t size_bytes, const stream_timeline& stream,
                                         slow_path_options options, bool hold_large_holes,
                                         bool apart);
  /// Small requests (half a granule or less) are served from granules of their own, apart from
  /// large ones, in a pool that remaps before growth: mixed in, a small block outlives the large
  /// ones around it and pins a granule that is otherwise free, which no remap can take. On
  /// PyTorch's convolutional trace 26 granules were held so at the peak, 24 MiB free in them.
  bool serves_small_apart() const noexcept {
    return remap_free_memory() == remap_mode::before_growth;
  }
  bool is_small_request(std::size_t size_bytes) const noexcept {
    return size_bytes <= granularity_bytes_ / 2;
  }
  bool in_small_reservation_locked(std::uintptr_t address) const;
  /// A free whole granule of the large region that stream may use now, moved into the small
  /// region where it lies (its block is split around it), indexed; false if none. The smallest
  /// block that holds one gives it, so large free blocks stay whole.
  bool move_granule_to_small_region_locked(const stream_timeline& stream);
  /// Large free blocks are held for large requests (remapping before growth) while growing by
  /// size_bytes keeps reserved within peak used plus an allowance (1/512 of it, a granule at
  /// least).
  bool growth_within_allowance_locked(std::size_t size_bytes) const;
  static bool is_large_hole_for(const block* b, std::size_t size_bytes) noexcept;
  static constexpr std::size_t large_hole_bytes = std::size_t{64} << 20;
  static constexpr std::size_t large_hole_factor = 8;
  static constexpr std::uint64_t large_hole_allowance_divisor = 512;
  /// S11: may `stream` use b now without any added ordering?
  bool usable_without_waiting(const block* b, const stream_timeline& stream) const {
    return reuse_rule(b, stream).has_value();
  }
  /// The rule of S11 that lets `stream` use b now without added ordering; nullopt if none.
  std::optional<served_by> reuse_rule(const block* b, const stream_timeline& stream) const;
  void make_live(block* b, std::size_t requested_bytes) {
    SOMA_ASSERT(
        b->current_state() != block_state::live && b->current_state() != block_state::indexed,
        "a block handed out is taken out of its cache or the index first");
    b->requested_bytes = requested_bytes;
    b->set_state(block_state::live);
  }
  /// allocate() past its fast path: a request above the max size, or a miss in the cache.
  [[gnu::noinline]] result<block*> allocate_missed(std::size_t requested_bytes,
                                                   const stream_timeline& stream,
                                                   stream_hooks* hooks);
  /// free() past its fast path: no cache for the stream (unpublish `unpublish` bytes first), or
  /// the cache is full; the block goes to the index, or, where filing it finds host memory
  /// exhausted, to unfiled_ (never lost, never an error: a free does not fail).
  /// With a note, records the free (memory history) before the block is in the index.
  [[gnu::noinline]] void free_to_index(block* live, std::int64_t unpublish,
                                       const free_note* noted = nullptr) noexcept;
  /// Takes the scope label off a block being freed into note; returns the note where memory
  /// history records, else nullptr. b's stamp still names its previous free.
  static const free_note* note_free(block& b, const stream_timeline& stream,
                                    free_note& note) noexcept {
    note.scope = b.scope.load(std::memory_order_relaxed);
    if (note.scope != 0) b.scope.store(0, std::memory_order_relaxed);
    if (!memory_history::recording()) return nullptr;
    note.stream = &stream;
    // Served by the stream's cache, b was freed on the stream before: its allocation went into
    // the same log as this free will.
    note.elsewhere = !(b.how == served_by::stream_cache && b.stamp.timeline == &stream);
    return &note;
  }
  /// Records an allocation of the slow path (memory history), stamped after b's previous free.
  [[gnu::noinline]] void record_allocated(block& b, const stream_timeline& stream) const noexcept;
  /// Files the blocks of unfiled_ in the index (at the next slow path, release or teardown);
  /// where host memory is still short, the rest stay.
  void file_unfiled_locked() noexcept;
  /// Puts a list of free blocks linked by next_in_bin on unfiled_.
  void leave_unfiled_locked(block* first) noexcept;
  // Used bytes (S10) = published + the unpublished shares of the stream caches. A cache's share
  // is published when it turns positive, and every share is folded in on the slow path, so
  // published never falls below the true figure and the high watermark follows it. used_now
  // holds every cache while it adds, so the sum is one moment's.
  std::uint64_t used_now() const noexcept;
  /// The same sum without holding the caches, for the slow path's heuristics (how far growth
  /// may go, whether compaction pays): a miss there must not stop every stream's fast path.
  std::uint64_t used_estimate() const noexcept;
  void fold_used_shares() noexcept;
  void publish_used(std::int64_t bytes) noexcept;
  void drain_caches_locked();
  /// Moves the blocks of one cache (nullptr: none) into the index.
  void drain_cache_locked(stream_cache* cache);
  /// Files blocks that leave a cache (or skip it) in the index, after the directory forgets
  /// them: once indexed they may merge into a neighbour.
  void index_from_cache_locked(block* drained) noexcept;
  /// Files a list of free blocks linked by next_in_bin, which the directory has forgotten, in
  /// the index; those it cannot take for want of host memory go to unfiled_.
  void file_locked(block* first) noexcept;
  /// Commits memory for a request of `stream`, extending a free block of the stream's below
  /// unmapped space where one exists.
  /// exact: by the request's granules only, not the growth step.
  /// small: in the small region (serves_small_apart).
  status grow_locked(std::size_t size_bytes, const stream_timeline& stream, bool exact = false,
                     bool small = false);
  /// The unmapped range growth starts at (whole; growth takes its start), reserving one if
  /// needed, and in need_bytes how much growth must commit there; in *extended the free block
  /// that growth extends, if any.
  result<address_range> find_unmapped_locked(std::size_t bytes, std::size_t* need_bytes,
                                             std::size_t size_bytes, const stream_timeline& stream,
                                             block** extended, bool small);
  /// An unmapped range of at least bytes in a reservation of the small region or not, reserving
  /// one if needed.
  result<address_range> unmapped_range_locked(std::size_t bytes, bool small = false);
  void split_locked(block* b, std::size_t size_bytes);
  /// Files a block of newly mapped memory and links it with the blocks it touches.
  void link_new_block_locked(block* fresh);
  /// The remap path (pool_remap.cpp): a block of size_bytes made of free whole granules that
  /// stream may use now, mapped again at fresh addresses; nullptr when they do not add up (or
  /// the memory cannot be mapped twice).
  block* remap_locked(std::size_t size_bytes, const stream_timeline& stream);
  /// The free block whose whole granules the remap path keeps where they lie, mapping the rest
  /// after it: the largest one stream may use now that ends where unmapped address space of its
  /// own reservation begins, with room there for need_bytes past its first whole granule.
  /// nullptr if none.
  block* remap_anchor_locked(std::size_t need_bytes, const stream_timeline& stream) const;
  /// Unmaps the retired ranges whose frees have completed (all: every one, at teardown).
  void unmap_retired_locked(bool all);
  /// True if part of [offset, offset + bytes) of the commit under token is still mapped at a
  /// retired address.
  bool is_aliased_locked(std::uint64_t token, std::size_t offset_bytes, std::size_t bytes) const;
  /// Takes [from, to) out of the chunk that holds it; returns that part as a piece.
  physical_piece cut_chunk_locked(std::uintptr_t from, std::uintptr_t to);
  /// Fragmented free memory worth a synchronize before growing (compaction, S9).
  std::size_t compaction_floor(std::size_t size_bytes) const;

  void release_locked(std::size_t keep_bytes);
  /// With SOMA_EXPENSIVE_CHECKS: free bytes equal the sum over the free index, reserved equals
  /// the sum over the commits, the blocks cover exactly the commits, blocks do not overlap and
  /// their adjacency links are symmetric.
  /// Aborts naming the broken invariant. Requires: the pool lock.
  void check_invariants_locked() const;
  /// With SOMA_EXPENSIVE_CHECKS: used bytes equal the sum over the live blocks. Allocate and
  /// free change both outside the pool lock, so the comparison is made only when no such call
  /// ran while the blocks were counted (calls_). Takes the pool lock.
  void check_used_if_quiet() const;
  std::size_t release_range_locked(std::uintptr_t from, std::uintptr_t to, std::size_t limit_bytes);
  /// Requires: b is indexed and covers [from, to); host memory for it was made ahead
  /// (prepare_locked(1, carve_nodes)): it changes the blocks and cannot stop halfway.
  void carve_locked(block* b, std::uintptr_t from, std::uintptr_t to);
  /// Makes ahead the host memory of a step that must not stop halfway: `blocks` blocks and
  /// `nodes` tree nodes (api-behaviour.md, "Host memory exhausted inside soma"). May throw
  /// std::bad_alloc, before the step has changed anything.
  void prepare_locked(std::size_t blocks, std::size_t nodes) {
    blocks_.reserve(blocks);
    nodes_.reserve(nodes);
    if (exact_preparation_) [[unlikely]] {
      blocks_.set_aside_beyond(blocks);
      nodes_.keep_at_most(nodes);
    }
  }
  block* block_containing_locked(std::uintptr_t address) const;
  /// The free, indexed block that ends exactly at address (where unmapped space begins), or
  /// nullptr: what growth may extend and a remap may keep in place.
  block* free_block_ending_at_locked(std::uintptr_t address) const;
  void raise_reserved(std::uint64_t bytes) noexcept;

  const pool_config config_;
  const std::unique_ptr<memory_provider> memory_;
  const std::size_t granularity_bytes_;
  const std::uint32_t serial_;
  block_directory* directory_ = nullptr;

  mutable std::mutex mutex_;        // the pool lock: index, blocks, chunks, address space
  node_reserve nodes_;              // before the maps and sets that take their nodes from it
  bool exact_preparation_ = false;  // prepare_exactly; under mutex_
  block_store blocks_;              // before the structures that hold blocks
  block_map all_blocks_{std::less<>{}, reserve_allocator<block_map::value_type>(nodes_)};
  free_index index_{all_blocks_, blocks_, nodes_};
  chunk_map chunks_{std::less<>{}, reserve_allocator<chunk_map::value_type>(nodes_)};
  std::vector<retired_range> retired_;
  address_space address_space_;  // reservations and their unmapped ranges
  // Bases of the small region's reservations.
  std::set<std::uintptr_t, std::less<>, reserve_allocator<std::uintptr_t>> small_reservations_{
      std::less<>{}, reserve_allocator<std::uintptr_t>(nodes_)};
  // Read on every call: starts a cache line (left where the members before it happened to end, a
  // pair cost about 1 ns more on the CPU machine, 2026-12-05).
  alignas(64) std::array<std::atomic<cache_segment*>, cache_segment_count> cache_segments_{};
  std::vector<std::unique_ptr<stream_cache>> cache_storage_;

  std::atomic<std::uint64_t> reserved_bytes_{0};
  std::atomic<std::uint64_t> reserved_high_bytes_{0};
  std::atomic<std::int64_t> used_published_bytes_{0};
  std::atomic<std::uint64_t> used_high_bytes_{0};
  std::atomic<stream_cache*> first_cache_{nullptr};  // list of every cache, newest first
  std::atomic<std::uint64_t> release_threshold_bytes_{0};
  std::array<std::atomic<bool>, 3> reuse_policies_{true, true, true};
  std::atomic<bool> compact_{false};
  std::atomic<remap_mode> remap_{remap_mode::instead_of_failing};
  std::atomic<std::uint64_t> remaps_{0};
  std::atomic<std::uint64_t> remapped_bytes_{0};
  std::atomic<std::uint64_t> retired_bytes_{0};
  std::atomic<std::uint64_t> retired_ranges_{0};
  std::atomic<std::uint64_t> unmap_calls_{0};
  std::atomic<std::uint64_t> kept_in_place_bytes_{0};
  call_census calls_;         // allocate and free calls, for check_used_if_quiet
  block* unfiled_ = nullptr;  // freed blocks the index could not take yet, linked by next_in_bin
  mutable std::mutex name_mutex_;  // apart from the pool lock: messages are built under it
  std::string name_;
};

}  // namespace soma::detail
