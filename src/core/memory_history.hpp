// Memory history (issue "seeing memory"): a bounded ring of what the pools did, recorded only
// while a user asks for it. Every pool and thread records into one ring; the newest events
// replace the oldest. Off, the cost is one relaxed load per allocation and free.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace soma::detail {

/// What happened. The numbers are part of soma's trace format: do not reorder.
enum class history_kind : std::uint8_t {
  pool_created = 0,   ///< label: the pool's description
  allocate = 1,       ///< address, bytes (requested), how; label: the scope
  free = 2,           ///< address, bytes
  wait = 3,           ///< stream ordered after the stream `address` (a handle) at `bytes`
  grow = 4,           ///< address, bytes: physical memory committed
  release = 5,        ///< address, bytes: physical memory given back
  trim = 6,           ///< bytes: what trim_to keeps
  compaction = 7,     ///< bytes: the allocation that synchronized to give free memory back
  synchronize = 8,    ///< a synchronize point (S9, S12): stream, or every stream of a device
  out_of_memory = 9,  ///< bytes: the request that failed; label: the message
  settings = 10,      ///< label: the pool's settings, "threshold=...,follow=1,..." (at creation,
                      ///< at each change, and for every pool when recording starts)
};

/// One event, 64 bytes (the last 4 are padding). reserved_bytes and used_bytes are the pool's
/// right after a pool event (creation, growth, release, trim, compaction, out of memory).
/// Allocations and frees leave them 0, since reading a pool's used bytes walks its stream caches:
/// the trace counts used bytes on from the last pool event.
struct history_event {
  std::uint64_t time_ns = 0;  ///< steady clock (in the ring: ticks(), converted by events())
  std::uint64_t stream = 0;   ///< the stream's timeline id; 0: none
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
  std::uint64_t reserved_bytes = 0;
  std::uint64_t used_bytes = 0;
  std::uint32_t pool = 0;   ///< the pool's serial (pool::serial); 0: no pool
  std::uint32_t label = 0;  ///< memory_history::label_text; 0: none
  history_kind kind = history_kind::allocate;
  std::uint8_t how = 0;  ///< allocate: the served_by of the block
  std::int16_t device = -1;
};

/// The process's history. Thread-safe; recording takes no lock: a writer claims a slot with
/// one atomic add and publishes it with a sequence number, so a reader skips a slot being
/// written.
class memory_history {
 public:
  static memory_history& process();

  /// Starts recording into a fresh ring of capacity events (> 0), dropping what was recorded.
  void start(std::size_t capacity);
  /// Stops recording; what was recorded stays readable.
  void stop() noexcept { enabled_.store(false, std::memory_order_release); }
  bool enabled() const noexcept { return enabled_.load(std::memory_order_relaxed); }
  std::size_t capacity() const;

  /// Records e (its time is set here) if recording is on.
  void record(history_event e) noexcept;
  /// The clock events are stamped with: the time stamp counter on x86, else the steady clock.
  static std::uint64_t ticks() noexcept;
  /// The recorded events, oldest first, with their times in steady-clock nanoseconds (at most
  /// capacity; slots being written are skipped), and how many older ones the ring dropped.
  std::vector<history_event> events(std::uint64_t* dropped = nullptr) const;

  /// A small number for text, the same for the same text; 0 for "". Texts stay for the
  /// process's life, so the number of distinct ones should stay small (scope labels, names).
  std::uint32_t label(const std::string& text);
  /// The text of a label; "" for 0 or an unknown one.
  std::string label_text(std::uint32_t id) const;
  /// The same text, stored for the process's life; nullptr for 0 or an unknown label.
  const char* label_c_str(std::uint32_t id) const;

  /// The calling thread's innermost scope label, 0 for none (memory_scope).
  static std::uint32_t current_scope() noexcept;
  static void push_scope(std::uint32_t label);
  /// false if the thread has no scope open.
  static bool pop_scope() noexcept;

 private:
  struct slot {
    std::atomic<std::uint64_t> sequence{0};  ///< 2n+1 while event n is written, 2n+2 after
    std::atomic<std::uint64_t> words[8]{};
  };
  struct ring {
    explicit ring(std::size_t n) : slots(std::make_unique<slot[]>(n)), size(n) {}
    std::unique_ptr<slot[]> slots;
    std::size_t size;
    std::atomic<std::uint64_t> next{0};
  };

  std::atomic<bool> enabled_{false};
  // Rings are replaced by start() and kept until exit: a writer that loaded the old one may
  // still be writing into it.
  std::atomic<ring*> ring_{nullptr};
  std::pair<std::uint64_t, std::uint64_t> clock_start_{0, 0};  // ticks and ns at start()
  mutable std::mutex mutex_;                                   // rings_, labels
  std::vector<std::unique_ptr<ring>> rings_;
  std::deque<std::string> texts_{""};  // a deque: c_str() pointers stay valid as it grows
  std::unordered_map<std::string, std::uint32_t> ids_;
};

}  // namespace soma::detail
