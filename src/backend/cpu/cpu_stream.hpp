// A cpu backend stream: an in-order queue served by one worker thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <optional>
#include <memory>
#include <mutex>

#include "backend/backend.hpp"

namespace soma::detail::backend::cpu {

/// State shared by the stream, its worker thread and events recorded on it, so that an
/// event or a waiting stream stays valid after the stream is destroyed.
struct stream_state {
  explicit stream_state(stream_timeline& t, int d) : timeline(t), device(d) {}

  struct operation {
    std::uint64_t position = 0;
    host_task task;
  };

  stream_timeline& timeline;
  const int device;
  std::mutex mutex;
  std::condition_variable work_ready;  // worker waits for operations
  std::condition_variable progress;    // synchronize, events and other streams wait here
  std::deque<operation> queue;
  std::uint64_t enqueued = 0;  // positions, as in the timeline
  std::uint64_t completed = 0;
  std::uint64_t failed_at = 0;  // position of the first failure; 0 = none
  status sticky;
  std::atomic<bool> failed{false};  // failed_at != 0, readable without the lock
  bool stopping = false;

  /// Blocks until completed >= position; returns the sticky error if the stream failed at
  /// or before position.
  status wait_for(std::uint64_t position);
  /// What an event at position reports without blocking.
  status query(std::uint64_t position);
};

class cpu_stream final : public stream {
 public:
  cpu_stream(int device, stream_timeline& timeline);
  ~cpu_stream() override;  // returns at once; the worker drains the queue, then exits

  status enqueue(stream_work item) override;
  status synchronize() override;
  status query() override;
  status failure() override;

  const std::shared_ptr<stream_state>& state() const noexcept { return state_; }

 private:
  static void serve(std::shared_ptr<stream_state> state);
  /// Queues task at the next position (the sticky error instead after a failure).
  status push(host_task task);

  std::shared_ptr<stream_state> state_;
};

}  // namespace soma::detail::backend::cpu
