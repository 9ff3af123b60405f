// The positions of one stream, as the pool needs them to decide when a freed block may be
// reused (design §"Happens-before and reuse").
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>

#include "core/spin_lock.hpp"
#include "core/timeline_registry.hpp"
#include "core/vector_clock.hpp"

namespace soma::detail {

/// Lets a backend whose completion is learned by asking (the cuda backend: event queries)
/// advance a timeline on demand. A backend that advances `completed` as work finishes (the
/// cpu backend's workers) needs none.
class completion_poller {
 public:
  virtual ~completion_poller() = default;
  /// Advances the timeline's completed position as far as the backend knows now, and
  /// arranges to learn about `position` later if it cannot tell yet. Thread-safe.
  virtual void poll(std::uint64_t position) = 0;
};

/// Counts the operations enqueued on a stream and how far they are known to have run.
///
/// Positions start at 0 and grow by one per operation. A free made when `enqueued` is k
/// happens after operations 1..k, so it is complete once `completed >= k`.
/// - `completed` is advanced by the backend as work finishes (it may lag, never lead).
/// - `proven` is advanced by the runtime when a synchronize or a successful query shows the
///   user that work has completed; cross-stream reuse waits for it (S9, S12).
/// A timeline outlives its stream: blocks freed on a destroyed stream still refer to it.
class stream_timeline {
 public:
  /// With a registry, the timeline's id comes from it and clocks drop the entries of streams
  /// the registry has forgotten; without one (core tests) ids come from a process counter.
  explicit stream_timeline(std::uint32_t cache_slot, timeline_registry* registry = nullptr)
      : id_(registry != nullptr ? registry->enroll() : next_unregistered_id()),
        registry_(registry),
        cache_slot_(cache_slot) {}
  stream_timeline(const stream_timeline&) = delete;
  stream_timeline& operator=(const stream_timeline&) = delete;

  std::uint64_t enqueued_position() const noexcept {
    return enqueued_.load(std::memory_order_acquire);
  }
  std::uint64_t completed_position() const noexcept {
    return completed_.load(std::memory_order_acquire);
  }
  std::uint64_t proven_position() const noexcept { return proven_.load(std::memory_order_acquire); }

  /// Returns the position of the new operation.
  std::uint64_t note_enqueued() noexcept {
    return enqueued_.fetch_add(1, std::memory_order_acq_rel) + 1;
  }
  void note_completed(std::uint64_t position) noexcept { raise(completed_, position); }
  /// True if the operations up to position have run, asking the poller if needed.
  bool has_completed(std::uint64_t position) const {
    if (completed_position() >= position) return true;
    if (completion_poller* p = poller_.load(std::memory_order_acquire)) p->poll(position);
    return completed_position() >= position;
  }
  bool has_poller() const noexcept { return poller_.load(std::memory_order_acquire) != nullptr; }
  /// Requires: the poller outlives its registration (set nullptr before destroying it).
  void set_poller(completion_poller* poller) noexcept {
    poller_.store(poller, std::memory_order_release);
  }
  void prove_completed(std::uint64_t position) noexcept { raise(proven_, position); }

  // -- happens-before (S11) ---------------------------------------------------------------
  /// This stream's clock with its own tail included: what an event recorded now captures.
  vector_clock capture_clock() const {
    vector_clock captured;
    capture_clock_into(captured);
    return captured;
  }
  /// capture_clock into an existing clock, reusing its storage: an event recorded again and
  /// again (ping-pong) then allocates nothing.
  void capture_clock_into(vector_clock& captured) const {
    std::lock_guard lock(clock_mutex_);
    captured.assign_raised(clock_, id_, enqueued_position());
  }
  /// Later work on this stream is ordered after everything `happened_before` covers.
  void merge_clock(const vector_clock& happened_before) {
    std::lock_guard lock(clock_mutex_);
    clock_.merge(happened_before);
    prune_if_grown_locked();
  }
  void order_after(std::uint64_t other_id, std::uint64_t position) {
    std::lock_guard lock(clock_mutex_);
    clock_.raise(other_id, position);
    prune_if_grown_locked();
  }
  /// True if position of other is known to happen before this stream's next operation.
  bool is_ordered_after(const stream_timeline* other, std::uint64_t position) const {
    std::lock_guard lock(clock_mutex_);
    return clock_.position_of(other->id()) >= position;
  }
  /// Names this stream in vector clocks; never reused.
  std::uint64_t id() const noexcept { return id_; }

  /// False once the stream is destroyed: no new waits on it can be enqueued.
  bool accepts_waits() const noexcept { return accepts_waits_.load(std::memory_order_acquire); }
  void stop_accepting_waits() noexcept { accepts_waits_.store(false, std::memory_order_release); }

  /// Slot of this stream's cache in every pool; reused after the stream is destroyed.
  std::uint32_t cache_slot() const noexcept { return cache_slot_; }
  /// How memory history names the stream (the runtime's handle; 0 unless set). Atomic: the
  /// runtime names a stream once its handle exists, which another thread may already use.
  std::uintptr_t history_name() const noexcept {
    return history_name_.load(std::memory_order_relaxed);
  }
  void set_history_name(std::uintptr_t name) noexcept {
    history_name_.store(name, std::memory_order_relaxed);
  }
  void set_cache_slot(std::uint32_t slot) noexcept { cache_slot_ = slot; }

 private:
  static std::uint64_t next_unregistered_id() noexcept {
    static std::atomic<std::uint64_t> last{std::uint64_t{1} << 62};
    return last.fetch_add(1, std::memory_order_relaxed) + 1;
  }
  // A stream that waits on many short-lived streams gathers their entries; once the clock has
  // doubled since the last pruning, the forgotten ones go (amortized O(1) per merge).
  void prune_if_grown_locked() {
    if (registry_ == nullptr || clock_.size() < prune_at_) return;
    registry_->prune(clock_);
    prune_at_ = std::max<std::size_t>(16, 2 * clock_.size());
  }

  static void raise(std::atomic<std::uint64_t>& counter, std::uint64_t position) noexcept {
    std::uint64_t seen = counter.load(std::memory_order_relaxed);
    while (seen < position &&
           !counter.compare_exchange_weak(seen, position, std::memory_order_acq_rel)) {
    }
  }

  std::atomic<std::uint64_t> enqueued_{0};
  std::atomic<std::uint64_t> completed_{0};
  std::atomic<std::uint64_t> proven_{0};
  std::atomic<completion_poller*> poller_{nullptr};
  std::atomic<bool> accepts_waits_{true};
  const std::uint64_t id_;
  timeline_registry* const registry_;
  // Held for a copy or a merge of a few words (event record, wait): a spin lock costs a
  // third of a mutex there.
  mutable spin_lock clock_mutex_;
  vector_clock clock_;
  std::size_t prune_at_ = 16;  // clock_mutex_
  std::uint32_t cache_slot_;
  std::atomic<std::uintptr_t> history_name_{0};
};

/// Where a block was freed: stream and position. A null timeline means the free is proven
/// complete and the block serves any stream.
struct free_stamp {
  const stream_timeline* timeline = nullptr;
  std::uint64_t position = 0;

  bool is_proven_complete() const noexcept {
    return timeline == nullptr || timeline->proven_position() >= position;
  }
  bool is_complete() const { return timeline == nullptr || timeline->has_completed(position); }
  bool operator==(const free_stamp&) const = default;
};

}  // namespace soma::detail
