// The clock memory history stamps events with. Reading the time stamp counter costs 8-24 ns,
// more than the rest of recording an allocation, so a thread's allocations and frees reuse its
// last reading until a beat passes (a thread of the clock's own advances the beat about every
// millisecond while recording is on) or after 32 events; every other event reads the counter.
// A stamp is never earlier than the thread's previous one, nor than a floor the caller gives
// (the stamp of the block's previous event), so a block's events stay in order across threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <utility>

namespace soma::detail {

class history_clock {
 public:
  /// The counter: the time stamp counter on x86, else the steady clock in nanoseconds.
  static std::uint64_t ticks() noexcept;
  static std::uint64_t steady_ns() noexcept;

  history_clock() = default;
  /// Stops the beat and waits for its thread to end.
  ~history_clock();
  history_clock(const history_clock&) = delete;
  history_clock& operator=(const history_clock&) = delete;

  /// Starts the beat (if it is not beating) and marks now as the origin of conversions.
  void start();
  /// The beat stops within one beat of `running` turning false.
  void stop() noexcept { running_.store(false, std::memory_order_release); }
  /// The beat now: it moves about every millisecond while recording is on, and at each
  /// advance(). A stream cache's log reads the counter again when it has moved (history_log).
  static std::uint64_t beat() noexcept { return beat_.load(std::memory_order_acquire); }
  /// Moves the beat on now: whoever acts on a change of it (a log that checks its chunk is
  /// still in the ring in use) does so at its next event.
  static void advance() noexcept { beat_.fetch_add(1, std::memory_order_release); }

  /// A thread's last stamp and how many more events may reuse it. Trivially destructible.
  struct thread_state {
    std::uint64_t last = 0;
    std::uint64_t beat = ~std::uint64_t{0};
    std::uint32_t budget = 0;
  };

  /// A stamp read now for the thread of t, raised above floor: for events that are rare (pool
  /// events, waits, synchronizes) or that come after other threads' (an allocation from the
  /// free index).
  static std::uint64_t exact(thread_state& t, std::uint64_t floor = 0) noexcept {
    return after(t, ticks(), floor);
  }

  /// A stamp for an allocation or a free: the thread's last reading while no beat passed,
  /// raised above floor.
  std::uint64_t cheap(thread_state& t, std::uint64_t floor) noexcept {
    const std::uint64_t beat = beat_.load(std::memory_order_relaxed);
    if (beat != t.beat || t.budget == 0) [[unlikely]] {
      t.beat = beat;
      t.budget = events_per_reading;
      return after(t, ticks(), floor);
    }
    --t.budget;
    return after(t, t.last, floor);
  }

  /// Ticks to steady-clock nanoseconds, by the rate measured from start() to now.
  class converter {
   public:
    explicit converter(std::pair<std::uint64_t, std::uint64_t> origin);
    std::uint64_t ns(std::uint64_t ticks) const noexcept;

   private:
    std::pair<std::uint64_t, std::uint64_t> origin_;
    double ns_per_tick_ = 1.0;
  };
  converter conversion() const;

 private:
  static constexpr std::uint32_t events_per_reading = 32;
  static std::uint64_t after(thread_state& t, std::uint64_t reading, std::uint64_t floor) noexcept {
    t.last = std::max({t.last, reading, floor + 1});
    return t.last;
  }
  void beat_loop();

  // One per process (one clock beats at a time: memory history's).
  alignas(64) static constinit inline std::atomic<std::uint64_t> beat_{0};
  alignas(64) std::atomic<bool> running_{false};
  mutable std::mutex mutex_;  // beating_, origin_
  bool beating_ = false;
  std::pair<std::uint64_t, std::uint64_t> origin_{0, 0};  // ticks and ns at start()
};

}  // namespace soma::detail
