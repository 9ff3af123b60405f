// The positions of one stream, as the pool needs them to decide when a freed block may be
// reused (design §"Happens-before and reuse").
#pragma once

#include <atomic>
#include <cstdint>

namespace soma::detail {

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
  explicit stream_timeline(std::uint32_t cache_slot) noexcept : cache_slot_(cache_slot) {}
  stream_timeline(const stream_timeline&) = delete;
  stream_timeline& operator=(const stream_timeline&) = delete;

  std::uint64_t enqueued_position() const noexcept {
    return enqueued_.load(std::memory_order_acquire);
  }
  std::uint64_t completed_position() const noexcept {
    return completed_.load(std::memory_order_acquire);
  }
  std::uint64_t proven_position() const noexcept {
    return proven_.load(std::memory_order_acquire);
  }

  /// Returns the position of the new operation.
  std::uint64_t note_enqueued() noexcept {
    return enqueued_.fetch_add(1, std::memory_order_acq_rel) + 1;
  }
  void note_completed(std::uint64_t position) noexcept { raise(completed_, position); }
  void prove_completed(std::uint64_t position) noexcept { raise(proven_, position); }

  /// Slot of this stream's cache in every pool; reused after the stream is destroyed.
  std::uint32_t cache_slot() const noexcept { return cache_slot_; }
  void set_cache_slot(std::uint32_t slot) noexcept { cache_slot_ = slot; }

 private:
  static void raise(std::atomic<std::uint64_t>& counter, std::uint64_t position) noexcept {
    std::uint64_t seen = counter.load(std::memory_order_relaxed);
    while (seen < position &&
           !counter.compare_exchange_weak(seen, position, std::memory_order_acq_rel)) {
    }
  }

  std::atomic<std::uint64_t> enqueued_{0};
  std::atomic<std::uint64_t> completed_{0};
  std::atomic<std::uint64_t> proven_{0};
  std::uint32_t cache_slot_;
};

/// Where a block was freed: stream and position. A null timeline means the free is proven
/// complete and the block serves any stream.
struct free_stamp {
  const stream_timeline* timeline = nullptr;
  std::uint64_t position = 0;

  bool is_proven_complete() const noexcept {
    return timeline == nullptr || timeline->proven_position() >= position;
  }
  bool is_complete() const noexcept {
    return timeline == nullptr || timeline->completed_position() >= position;
  }
};

}  // namespace soma::detail
