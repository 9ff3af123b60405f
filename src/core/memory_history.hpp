// Memory history: a bounded ring of what the pools did, recorded only while a user asks for
// it. Every pool and thread records into one ring; the newest events replace the oldest. Off,
// the cost is one relaxed load per allocation and free.
#pragma once

#include <algorithm>
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

#include "core/check.hpp"
#include "core/history_clock.hpp"
#include "core/history_ring.hpp"

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
  remap = 11,         ///< address, bytes: free granules mapped again there as one range
};

/// One event, 64 bytes (the last 4 are padding). reserved_bytes and used_bytes are the pool's
/// right after a pool event (creation, growth, release, trim, compaction, out of memory).
/// Allocations and frees leave them 0, since reading a pool's used bytes walks its stream caches:
/// the trace counts used bytes on from the last pool event.
struct history_event {
  std::uint64_t time_ns = 0;  ///< steady clock (in the ring: a history_clock stamp)
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

/// An event as the ring's eight words, built in registers: copying the struct's narrow fields
/// out as words through memory would stall on store forwarding on every event.
inline history_words encode(const history_event& e) noexcept {
  return {{e.time_ns, e.stream, e.address, e.bytes, e.reserved_bytes, e.used_bytes,
           e.pool | std::uint64_t{e.label} << 32,
           static_cast<std::uint64_t>(e.kind) | std::uint64_t{e.how} << 8 |
               std::uint64_t{static_cast<std::uint16_t>(e.device)} << 16}};
}
history_event decode(const std::uint64_t* words) noexcept;

/// What memory history keeps per thread, in one thread_local: reached once per event.
struct history_thread {
  history_ring::cursor cursor;
  history_clock::thread_state clock;  ///< clock.last: the stamp of the thread's last event
  std::uint32_t scope = 0;            ///< the innermost open scope label, 0 for none
  /// The stream cache log (history_log) the thread's last event went to; nullptr where it went
  /// to the thread's own chunk. An event in another place than the last takes a later stamp.
  const void* log = nullptr;
};
extern constinit thread_local history_thread this_thread_history;

/// The process's history. Thread-safe; recording takes no lock and no atomic read-modify-write
/// (history_ring); a reader reads while threads record.
class memory_history {
 public:
  static memory_history& process() {
    static memory_history* const history = made(new memory_history());  // lives past teardown
    return *history;
  }
  /// process() where recording is on (recording() read true): it was made before recording
  /// started, so this is one load, not a call.
  static memory_history& recording_one() noexcept {
    memory_history* const history = instance_.load(std::memory_order_acquire);
    SOMA_ASSERT(history != nullptr, "memory history read as recording before process() made it");
    return *history;
  }
  /// The calling thread's history_thread, its address worked out once: reached through the
  /// thread_local itself, a shared library works the address out again at each use.
  static history_thread& this_thread() noexcept {
    history_thread* t = &this_thread_history;
    asm("" : "+r"(t));  // NOLINT(hicpp-no-assembler): keeps the address in a register
    return *t;
  }

  /// Starts recording into a ring of capacity events (> 0), dropping what was recorded. The
  /// ring's memory is kept for the process's life, a ring for each power of two asked for.
  void start(std::size_t capacity);
  /// Stops recording; what was recorded stays readable.
  void stop() noexcept;
  bool enabled() const noexcept { return recording(); }
  /// enabled() of the process's history, without reaching it first (one load).
  static bool recording() noexcept { return enabled_.load(std::memory_order_relaxed); }
  std::size_t capacity() const;
  /// Rings made so far and kept (tests: bounded however often start() is called).
  std::size_t rings_kept() const {
    std::lock_guard lock(mutex_);
    return rings_.size();
  }

  /// Records e, stamped now, if recording is on.
  void record(history_event e) noexcept {
    if (enabled()) record(e, exact_stamp(0));
  }
  /// Records e with a stamp from cheap_stamp().
  void record(history_event e, std::uint64_t stamp) noexcept {
    record(e, stamp, this_thread_history);
  }
  /// The same for the thread whose history_thread t is (this_thread_history, reached once by a
  /// caller that records and stamps: each reach of a thread_local is a call in a shared library).
  void record(history_event e, std::uint64_t stamp, history_thread& t) noexcept {
    if (!enabled()) return;
    history_ring* r = ring_.load(std::memory_order_acquire);
    if (r == nullptr) return;
    e.time_ns = stamp;
    t.log = nullptr;
    r->write(t.cursor, encode(e));
  }
  /// The ring recording goes into (nullptr before the first start()).
  history_ring* ring_in_use() const noexcept { return ring_.load(std::memory_order_acquire); }
  /// A stamp for an allocation or a free (history_clock::cheap): never before floor + 1, the
  /// block's previous stamp, so that one block's events keep their order across threads.
  std::uint64_t cheap_stamp(std::uint64_t floor) noexcept {
    return cheap_stamp(floor, this_thread_history);
  }
  std::uint64_t cheap_stamp(std::uint64_t floor, history_thread& t) noexcept {
    return clock_.cheap(t.clock, after_log(t, floor));
  }
  /// A stamp read now, raised above floor (history_clock::exact).
  static std::uint64_t exact_stamp(std::uint64_t floor) noexcept {
    return exact_stamp(floor, this_thread_history);
  }
  static std::uint64_t exact_stamp(std::uint64_t floor, history_thread& t) noexcept {
    return history_clock::exact(t.clock, after_log(t, floor));
  }

  /// The recorded events (at most capacity, the newest), oldest first, with their times in
  /// steady-clock nanoseconds, and how many the ring dropped. Each thread's events keep the
  /// order they were recorded in.
  std::vector<history_event> events(std::uint64_t* dropped = nullptr) const;

  /// A small number for text, the same for the same text; 0 for "". Texts stay for the
  /// process's life, so the number of distinct ones should stay small (scope labels, names).
  std::uint32_t label(const std::string& text);
  /// The text of a label; "" for 0 or an unknown one.
  std::string label_text(std::uint32_t id) const;
  /// The same text, stored for the process's life; nullptr for 0 or an unknown label.
  const char* label_c_str(std::uint32_t id) const;

  /// The calling thread's innermost scope label, 0 for none (memory_scope).
  static std::uint32_t current_scope() noexcept { return this_thread_history.scope; }
  static void push_scope(std::uint32_t label);
  /// false if the thread has no scope open.
  static bool pop_scope() noexcept;

 private:
  /// A floor that puts an event of the thread's own chunk after its last event where that
  /// went to a stream cache's log (another chunk, so a shared stamp would not keep the order).
  static std::uint64_t after_log(const history_thread& t, std::uint64_t floor) noexcept {
    return t.log != nullptr ? std::max(floor, t.clock.last) : floor;
  }
  static memory_history* made(memory_history* h) noexcept {
    instance_.store(h, std::memory_order_release);
    return h;
  }

  static constinit inline std::atomic<bool> enabled_{false};  // one history per process
  static constinit inline std::atomic<memory_history*> instance_{nullptr};  // process()'s
  // The ring in use. Rings are kept until exit: a writer that loaded one may still write into
  // it. Their sizes are powers of two, and start() restarts the one of its size if there is one.
  std::atomic<history_ring*> ring_{nullptr};
  std::atomic<std::size_t> capacity_{0};  // the events start() was asked to keep
  history_clock clock_;
  mutable std::mutex mutex_;  // rings_, labels
  std::vector<std::unique_ptr<history_ring>> rings_;
  std::deque<std::string> texts_{""};  // a deque: c_str() pointers stay valid as it grows
  std::unordered_map<std::string, std::uint32_t> ids_;
};

}  // namespace soma::detail
