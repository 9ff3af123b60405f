// The ring memory history records into: chunks of event slots, each filled by one writer at a
// time, so that recording an event takes no atomic read-modify-write and no shared cache line.
// A writer claims a chunk with one atomic add, fills it, and claims the next; a claim takes the
// oldest chunk that no writer is filling, and its events count as dropped. Writers are threads
// (events of eight words) and stream caches' logs (history_log: entries of two words, written
// under the cache's lock).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace soma::detail {

/// One event as the ring stores it: eight words, one cache line. Plain words, written and
/// read through std::atomic_ref, so that calloc'd memory holds slots as it is.
struct alignas(64) history_slot {
  std::uint64_t words[8];
};

/// The words of one event (memory_history's encode).
struct history_words {
  std::uint64_t word[8];
};

class history_ring {
 public:
  /// Holds at least `capacity` newest events while at most spare_chunks threads fill chunks
  /// at once (each such chunk may be partly filled).
  explicit history_ring(std::size_t capacity);
  ~history_ring();
  history_ring(const history_ring&) = delete;
  history_ring& operator=(const history_ring&) = delete;

  std::size_t capacity() const noexcept { return capacity_; }

  /// Forgets every event (readers skip chunks claimed before) and makes each writer claim
  /// afresh; the ring's memory is used again.
  void restart() noexcept;

  enum : std::uint32_t { unused = 0, filling = 1, filled = 2 };
  /// A chunk's state, apart from its slots (so that a reader's loads do not share its lines).
  struct alignas(64) chunk_header {
    std::atomic<std::uint64_t> claim{0};  ///< 2n+1 while claim n resets it, 2n+2 after
    std::atomic<std::uint32_t> count{0};  ///< events (entries of a log's chunk) written
    std::atomic<std::uint32_t> state{unused};
    std::atomic<std::uint32_t> entry_words{8};  ///< 8: a thread's events; 2: a log's entries
    std::atomic<std::uint32_t> repeats{0};      ///< a log's events beyond its entries (its runs')
  };
  /// A thread's place in a ring: its chunk and the next slot. Trivially destructible, so that a
  /// thread_local one is reached without a guard; a thread ending hands its chunk back.
  struct cursor {
    const history_ring* ring = nullptr;
    std::uint64_t epoch = 0;
    chunk_header* chunk = nullptr;
    history_slot* slots = nullptr;
    std::uint32_t index = 0;
  };

  /// Writes one event for the thread whose cursor c is; counts it as dropped if every chunk is
  /// being filled by another thread. Wait-free but for the claim of a chunk.
  void write(cursor& c, const history_words& event) noexcept {
    if (c.ring != this || c.epoch != epoch_.load(std::memory_order_relaxed) ||
        c.index == chunk_events_) [[unlikely]] {
      if (!claim(c)) return;
    }
    history_slot& s = c.slots[c.index];
    // Written out, not a loop: compilers keep a loop of atomic stores a loop (4 instructions a
    // word, 32 an event).
    auto put = [&s](std::size_t i, std::uint64_t word) {
      std::atomic_ref<std::uint64_t>(s.words[i]).store(word, std::memory_order_relaxed);
    };
    put(0, event.word[0]);
    put(1, event.word[1]);
    put(2, event.word[2]);
    put(3, event.word[3]);
    put(4, event.word[4]);
    put(5, event.word[5]);
    put(6, event.word[6]);
    put(7, event.word[7]);
    c.chunk->count.store(++c.index, std::memory_order_release);
  }

  /// A log's chunk holds this many entries of two words (a thread's holds a quarter as many
  /// events of eight).
  std::uint32_t log_entries() const noexcept { return chunk_events_ * 4; }
  /// Claims a fresh chunk of two-word entries for a log's cursor (history_log), handing back
  /// the one it had; false (counted as dropped) if every chunk is being filled. Unlike a
  /// thread's, the chunk is not handed back when the calling thread ends: the log hands it back.
  /// The log writes its entries into c.slots (four to a slot) and publishes them through the
  /// chunk's count.
  bool claim_for_log(cursor& c) noexcept { return claim(c, 2); }
  /// Hands back the chunk a cursor fills (a log that goes away).
  static void hand_back(cursor& c) noexcept { release(c); }
  /// The epoch restart() moved on from: a cursor claimed before it writes nowhere a reader looks.
  std::uint64_t epoch() const noexcept { return epoch_.load(std::memory_order_relaxed); }

  /// One chunk's events as read: claim order, then the events (or a log's entries) in the order
  /// written.
  struct chunk_events {
    std::uint64_t claim = 0;
    std::uint32_t entry_words = 8;     ///< 8: events of a thread; 2: entries of a log
    std::vector<std::uint64_t> words;  ///< entry_words per event or entry
  };
  /// Every chunk with events claimed since the last restart; chunks being reused while read are
  /// skipped. `dropped` gets the events lost to reuse or to a full ring.
  std::vector<chunk_events> read(std::uint64_t* dropped) const;

 private:
  static constexpr std::size_t spare_chunks = 64;
  /// Claims a chunk of entries of entry_words words: 8 for a thread's cursor (handed back when
  /// the thread ends), 2 for a log's.
  bool claim(cursor& c, std::uint32_t entry_words = 8) noexcept;
  static void release(cursor& c) noexcept;
  friend struct history_ring_thread_exit;

  std::size_t capacity_;
  std::uint32_t chunk_events_;
  std::size_t chunk_count_;
  std::unique_ptr<chunk_header[]> chunks_;
  void* memory_;         // calloc'd, every page touched at construction
  history_slot* slots_;  // chunk_count_ * chunk_events_, in memory_
  std::atomic<std::uint64_t> epoch_{0};
  std::atomic<std::uint64_t> first_claim_{0};  // claims below belong to before restart()
  alignas(64) std::atomic<std::uint64_t> next_claim_{0};
  std::atomic<std::uint64_t> dropped_{0};
};

}  // namespace soma::detail
