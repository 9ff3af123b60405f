#include "core/history_clock.hpp"

#include <chrono>
#include <thread>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

namespace soma::detail {

namespace {
// About 1 000 wake-ups a second while recording: 2-3 % of a core on a virtual machine whose
// timer wake-ups cost 25 us, far less on bare metal.
constexpr std::chrono::microseconds beat_period{1000};
}  // namespace

std::uint64_t history_clock::steady_ns() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

std::uint64_t history_clock::ticks() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  // Constant-rate on the CPUs soma runs on; conversion() turns it into nanoseconds.
  return __rdtsc();
#else
  return steady_ns();
#endif
}

void history_clock::start() {
  std::lock_guard lock(mutex_);
  origin_ = {ticks(), steady_ns()};
  running_.store(true, std::memory_order_release);
  if (beating_) return;
  beating_ = true;
  std::thread([this] { beat_loop(); }).detach();
}

history_clock::~history_clock() {
  stop();
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (!beating_) return;
    }
    std::this_thread::sleep_for(beat_period);
  }
}

void history_clock::beat_loop() {
  for (;;) {
    beat_.fetch_add(1, std::memory_order_relaxed);
    std::this_thread::sleep_for(beat_period);
    if (running_.load(std::memory_order_acquire)) continue;
    std::lock_guard lock(mutex_);  // start() may have turned it on again meanwhile
    if (running_.load(std::memory_order_relaxed)) continue;
    beating_ = false;
    return;
  }
}

history_clock::converter history_clock::conversion() const {
  std::lock_guard lock(mutex_);
  return converter(origin_);
}

history_clock::converter::converter(std::pair<std::uint64_t, std::uint64_t> origin)
    : origin_(origin) {
  const std::uint64_t now_ticks = ticks();
  const std::uint64_t now_ns = steady_ns();
  if (now_ticks > origin.first) {
    ns_per_tick_ =
        static_cast<double>(now_ns - origin.second) / static_cast<double>(now_ticks - origin.first);
  }
}

std::uint64_t history_clock::converter::ns(std::uint64_t ticks) const noexcept {
  const double since = static_cast<double>(static_cast<std::int64_t>(ticks - origin_.first));
  return origin_.second + static_cast<std::uint64_t>(std::max(0.0, since * ns_per_tick_));
}

}  // namespace soma::detail
