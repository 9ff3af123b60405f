// A stream cache's memory history: the allocations and frees of its pops and pushes, written
// under the lock the cache already holds as entries of two words into a chunk of the process's
// ring (history_ring). A thread's own events take eight words and a reach of its thread_local
// state each; a pair recorded that way cost +38-45 % (docs/benchmarks.md, "Memory history").
//
// A chunk's entries: the pool and stream they belong to (a source entry, again where the cache
// serves another stream), the time (a mark entry, only where the time moved), a scope label (for
// the next event only), and the events. Times come from marks: a new one is taken where the
// clock's beat moved, where the thread's last event was elsewhere (so that one thread's events
// keep their order across chunks), and where a block's previous event, recorded elsewhere,
// carries a later stamp (so that one block's events keep theirs).
//
// A loop that takes one block from the cache and gives it back, over and over, writes a run: the
// first event, then a repeat entry whose count each further event of that block raises (one
// store, no new entry), its kinds turning about. The run goes on while each event would have
// taken the chunk's mark anyway (same beat, the thread's last event the run's) and is the
// block's next in this cache: every push and pop of the cache is logged here, so the block's
// events in between would have been entries of this log, which end the run. A run's events
// count against the chunk's room, so the ring holds as many events as it did.
#pragma once

#include <cstdint>

#include <vector>

#include "core/biased_lock.hpp"
#include "core/block.hpp"
#include "core/memory_history.hpp"

namespace soma::detail {

/// What an entry of a log's chunk is: the top byte of its first word.
enum class log_entry : std::uint8_t {
  event = 1,   ///< first: bytes (48 bits) | kind << 48; second: the address
  mark = 2,    ///< second: the stamp of the events after it
  source = 3,  ///< first: pool serial | device << 32; second: the stream (history_name)
  scope = 4,   ///< first: the label of the next event
  repeat = 5,  ///< second: how many events follow the last event, on its block, kinds turn about
};

/// Decodes a log chunk's entries (2 words each) into events, appended to out; a repeat entry
/// stands for its count of events (at most `room`, the entries a chunk holds).
void decode_log(const std::uint64_t* words, std::size_t entries, std::size_t room,
                std::vector<history_event>& out);

/// One stream cache's log. Every member runs under the cache's lock.
class history_log {
 public:
  history_log() = default;
  ~history_log() {
    arm(nullptr);  // a run's repeats count if the chunk is dropped
    history_ring::hand_back(cursor_);
  }
  history_log(const history_log&) = delete;
  history_log& operator=(const history_log&) = delete;

  /// The pool the cache belongs to, named in every chunk.
  void set_pool(std::uint32_t serial, int device) noexcept {
    pool_ = serial;
    device_ = static_cast<std::uint16_t>(static_cast<std::int16_t>(device));
  }

  /// b was allocated from the cache for `bytes` on stream: records it with the thread's scope,
  /// which b then carries. Where recording is on.
  /// `how`: the cache lock's entry (the thread's bias slot, or nullptr).
  void allocated(block& b, std::uint64_t bytes, std::uintptr_t stream, bias_slot* how) noexcept {
    history_thread& t = thread_of(how);
    // b's requested_bytes are still its last allocation's: those of the run. A scope the thread
    // opened before the run began must still label the allocation.
    if (&b == run_block_ && bytes == b.requested_bytes && t.scope == 0 && repeated(t, stream))
      return;
    // b's previous event is its free into this cache, at or before the chunk's mark; a later
    // stamp means that free is not here (it was dropped), and the stamp is then a floor.
    const std::uint64_t floor = b.history_stamp.load(std::memory_order_relaxed);
    if (!fast(t, stream) || t.scope != 0 || floor > mark_) [[unlikely]] {
      note_slow(t, history_kind::allocate, b, bytes, stream, t.scope, floor);
      return;
    }
    put_event(history_kind::allocate, b, bytes, floor);
  }
  /// b, allocated for `bytes` with the scope label `scope`, was freed into the cache on
  /// stream. `elsewhere`: b's allocation may have been recorded in another chunk (another
  /// stream's cache, or the pool's slow path), so that even its stamp equal to the chunk's
  /// mark does not order it.
  void freed(block& b, std::uint64_t bytes, std::uintptr_t stream, std::uint32_t scope,
             bool elsewhere, bias_slot* how) noexcept {
    history_thread& t = thread_of(how);
    // The run's block, allocated from this cache (not elsewhere) by the run: no scope label.
    if (&b == run_block_ && !elsewhere && scope == 0 && repeated(t, stream)) return;
    // Recorded elsewhere, b's allocation may share the chunk's mark and still sort after it.
    const std::uint64_t floor = b.history_stamp.load(std::memory_order_relaxed);
    if (!fast(t, stream) || scope != 0 || (elsewhere ? floor >= mark_ : floor > mark_))
        [[unlikely]] {
      note_slow(t, history_kind::free, b, bytes, stream, scope, floor);
      return;
    }
    put_event(history_kind::free, b, bytes, floor);
  }

 private:
  /// The calling thread's memory history state: through its bias slot where it entered the
  /// cache's lock with the bias (a load), else its thread_local (a call in a shared library).
  static history_thread& thread_of(bias_slot* how) noexcept {
    if (how != nullptr && how->thread_data != nullptr) [[likely]]
      return *static_cast<history_thread*>(how->thread_data);
    history_thread& t = memory_history::this_thread();
    if (how != nullptr) how->thread_data = &t;
    return t;
  }
  /// The event fits the chunk as it stands: same beat, the thread's last event was here at the
  /// chunk's mark (another thread moved the mark since, or the thread's last event was
  /// elsewhere: a new mark), same stream, and room. Loads only: stores are what a pair is
  /// short of.
  bool fast(const history_thread& t, std::uintptr_t stream) const noexcept {
    return beat_ == history_clock::beat() && t.log == this && t.clock.last == mark_ &&
           stream == stream_ && entries() < limit_;
  }
  /// Entries written to the chunk: its count is the one index (a second would be a store
  /// more an event).
  std::uint32_t entries() const noexcept { return chunk_->count.load(std::memory_order_relaxed); }
  /// An event's first word. An allocation from the cache was served by it, served_by's 0, as
  /// a free's event says (how is 0): the word has no field for it.
  static std::uint64_t event_word(history_kind kind, std::uint64_t bytes) {
    static_assert(static_cast<int>(served_by::stream_cache) == 0);
    constexpr std::uint64_t byte_mask = (std::uint64_t{1} << 48) - 1;
    return (bytes & byte_mask) | std::uint64_t{static_cast<std::uint8_t>(kind)} << 48 |
           std::uint64_t{static_cast<std::uint8_t>(log_entry::event)} << 56;
  }
  /// Entry n's two words: the chunk's slots lie end to end, four entries to a slot.
  static_assert(sizeof(history_slot) == 8 * sizeof(std::uint64_t));
  std::uint64_t* entry(std::uint32_t n) const noexcept {
    return reinterpret_cast<std::uint64_t*>(cursor_.slots) + std::size_t{n} * 2;
  }
  /// Writes entry n of the chunk (n < limit_); published by the next publish().
  void put(std::uint32_t n, std::uint64_t first, std::uint64_t second) noexcept {
    std::uint64_t* words = entry(n);
    std::atomic_ref<std::uint64_t>(words[0]).store(first, std::memory_order_relaxed);
    std::atomic_ref<std::uint64_t>(words[1]).store(second, std::memory_order_relaxed);
  }
  void publish(std::uint32_t entries) noexcept {
    chunk_->count.store(entries, std::memory_order_release);
  }
  /// The event, at the chunk's mark, which b then carries (a floor for its next event);
  /// `stamp`: b's stamp as the caller read it.
  void put_event(history_kind kind, block& b, std::uint64_t bytes, std::uint64_t stamp) noexcept {
    const std::uint32_t n = entries();
    put(n, event_word(kind, bytes), b.address);
    publish(n + 1);
    if (stamp != mark_) b.history_stamp.store(mark_, std::memory_order_relaxed);
    arm(&b);
  }
  /// The next event on b may repeat this one (nullptr: none may).
  void arm(const block* b) noexcept {
    if (run_count_ != 0) [[unlikely]]
      end_run();
    run_block_ = b;
  }
  /// The event, on the run's block, repeats the run where the thread's last event was here at
  /// the chunk's mark (no event elsewhere since: t.log), the beat has not moved and the stream
  /// is the chunk's (a stream made where a forgotten one was looks like it to the pool). Counts
  /// it in the run's repeat entry.
  bool repeated(const history_thread& t, std::uintptr_t stream) noexcept {
    if (t.log != this || t.clock.last != mark_ || stream != stream_ ||
        beat_ != history_clock::beat()) [[unlikely]]
      return false;
    if (run_count_ >= run_room_) [[unlikely]]
      return start_run();
    std::atomic_ref<std::uint64_t>(*run_word_).store(++run_count_, std::memory_order_relaxed);
    return true;
  }
  /// Counts the run's events against the chunk's room, and its repeats (events without an entry
  /// of their own) where a claim that reuses the chunk counts what it drops.
  void end_run() noexcept {
    chunk_->repeats.store(chunk_->repeats.load(std::memory_order_relaxed) + run_count_ - 1,
                          std::memory_order_relaxed);
    limit_ -= run_count_;
    run_count_ = 0;
    run_room_ = 0;
  }
  [[gnu::noinline]] bool start_run() noexcept;
  [[gnu::noinline]] void note_slow(history_thread& t, history_kind kind, block& b,
                                   std::uint64_t bytes, std::uintptr_t stream, std::uint32_t scope,
                                   std::uint64_t floor) noexcept;

  // Where no chunk is claimed: no room, so the next event claims one.
  static constinit inline history_ring::chunk_header no_chunk{};

  history_ring::cursor cursor_;  // its index unused: the chunk's count is the index
  history_ring::chunk_header* chunk_ = &no_chunk;  // cursor_'s chunk, or no_chunk
  std::uint32_t limit_ = 0;                        // entries a chunk holds; 0 until the first claim
  std::uint64_t beat_ = ~std::uint64_t{0};
  std::uint64_t mark_ = 0;     // the stamp of the chunk's events so far
  std::uintptr_t stream_ = 0;  // the stream the chunk's source names
  std::uint32_t pool_ = 0;
  std::uint16_t device_ = 0xffff;
  // The run: the block whose next event may repeat the last entry's, and its repeat entry
  // (run_count_ events so far, room for run_room_ in the chunk).
  const block* run_block_ = nullptr;  // compared, never read through
  std::uint64_t* run_word_ = nullptr;
  std::uint32_t run_count_ = 0;
  std::uint32_t run_room_ = 0;
};

}  // namespace soma::detail
