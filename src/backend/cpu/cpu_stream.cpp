#include "backend/cpu/cpu_stream.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "backend/cpu/cpu_event.hpp"

namespace soma::detail::backend::cpu {

status stream_state::wait_for(std::uint64_t position) {
  std::unique_lock lock(mutex);
  progress.wait(lock, [&] { return completed >= position; });
  if (failed_at != 0 && failed_at <= position) return sticky;
  return status::success();
}

status stream_state::query(std::uint64_t position) {
  std::lock_guard lock(mutex);
  if (failed_at != 0 && failed_at <= position) return sticky;
  if (completed < position) return status(error_code::not_ready, "work not completed yet");
  return status::success();
}

cpu_stream::cpu_stream(int device, stream_timeline& timeline)
    : state_(std::make_shared<stream_state>(timeline, device)) {
  std::thread(serve, state_).detach();
}

cpu_stream::~cpu_stream() {
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
  }
  state_->work_ready.notify_one();
}

void cpu_stream::serve(std::shared_ptr<stream_state> state) {
  for (;;) {
    stream_state::operation op;
    bool skip = false;
    {
      std::unique_lock lock(state->mutex);
      state->work_ready.wait(lock, [&] { return !state->queue.empty() || state->stopping; });
      if (state->queue.empty()) return;  // stopping and drained
      op = std::move(state->queue.front());
      state->queue.pop_front();
      skip = state->failed_at != 0;  // after a failure later work is skipped
    }
    status outcome = skip ? status::success() : op.task();
    {
      std::lock_guard lock(state->mutex);
      if (!outcome.ok() && state->failed_at == 0) {
        state->failed_at = op.position;
        state->sticky = status(error_code::launch_failure,
                               "asynchronous work at position " + std::to_string(op.position) +
                                   " of the stream failed: " + outcome.message());
      }
      state->completed = op.position;
      // Inside the lock: whoever wakes from `progress` sees the timeline advanced too.
      state->timeline.note_completed(op.position);
    }
    state->progress.notify_all();
  }
}

status cpu_stream::enqueue_host_task(host_task task) {
  {
    std::lock_guard lock(state_->mutex);
    if (state_->failed_at != 0) return state_->sticky;
    const std::uint64_t position = state_->timeline.note_enqueued();
    state_->enqueued = position;
    state_->queue.push_back({position, std::move(task)});
  }
  state_->work_ready.notify_one();
  return status::success();
}

status cpu_stream::enqueue_memset(void* destination, int value, std::size_t bytes) {
  return enqueue_host_task([=] {
    std::memset(destination, value, bytes);
    return status::success();
  });
}

status cpu_stream::enqueue_memcpy(void* destination, const void* source, std::size_t bytes) {
  return enqueue_host_task([=] {
    std::memmove(destination, source, bytes);
    return status::success();
  });
}

status cpu_stream::enqueue_wait_value32(std::uint32_t* address, std::uint32_t value,
                                        wait_condition condition) {
  return enqueue_host_task([=] {
    // The writer is the host or another stream's worker; poll with a growing pause (up to
    // 1 ms), as the GPU polls the word, so a gate held for seconds costs no core.
    std::atomic_ref<std::uint32_t> word(*address);
    auto pause = std::chrono::microseconds(1);
    for (int spins = 0; !wait_satisfied(word.load(std::memory_order_acquire), value, condition);
         ++spins) {
      if (spins < 64) {
        std::this_thread::yield();
        continue;
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
    return status::success();
  });
}

status cpu_stream::enqueue_write_value32(std::uint32_t* address, std::uint32_t value) {
  return enqueue_host_task([=] {
    std::atomic_ref<std::uint32_t>(*address).store(value, std::memory_order_release);
    return status::success();
  });
}

status cpu_stream::enqueue_wait(event& e) {
  cpu_event::snapshot at = static_cast<cpu_event&>(e).recorded();
  std::shared_ptr<stream_state> source = std::move(at.source);
  const std::uint64_t position = at.position;
  if (source == nullptr || source == state_) return status::success();  // nothing to wait for
  return enqueue_host_task([source, position] {
    status waited = source->wait_for(position);
    // A failure upstream is the upstream stream's error; the waiting stream carries on.
    (void)waited;
    return status::success();
  });
}

status cpu_stream::enqueue_wait_for(stream& other, std::uint64_t position) {
  std::shared_ptr<stream_state> source = static_cast<cpu_stream&>(other).state();
  if (source == state_) return status::success();  // in-order already
  return enqueue_host_task([source, position] {
    (void)source->wait_for(position);  // an upstream failure stays the upstream's error
    return status::success();
  });
}

status cpu_stream::synchronize() {
  std::uint64_t target = 0;
  {
    std::lock_guard lock(state_->mutex);
    target = state_->enqueued;
  }
  status waited = state_->wait_for(target);
  if (!waited.ok()) return waited;
  std::lock_guard lock(state_->mutex);
  return state_->failed_at != 0 ? state_->sticky : status::success();
}

status cpu_stream::query() {
  std::lock_guard lock(state_->mutex);
  if (state_->failed_at != 0) return state_->sticky;
  if (state_->completed < state_->enqueued) return status(error_code::not_ready, "stream busy");
  return status::success();
}

status cpu_stream::sticky_error() {
  std::lock_guard lock(state_->mutex);
  return state_->failed_at != 0 ? state_->sticky : status::success();
}

}  // namespace soma::detail::backend::cpu
