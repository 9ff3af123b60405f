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

namespace {

// Each piece of work becomes a host task for the stream's worker; nullopt where there is
// nothing to do. `self` is the enqueuing stream's state.
using maybe_task = std::optional<host_task>;

maybe_task task_for(work::host&& w, const std::shared_ptr<stream_state>&) {
  return std::move(w.task);
}

maybe_task task_for(work::fill&& w, const std::shared_ptr<stream_state>&) {
  return [w] {
    std::memset(w.destination, w.value, w.bytes);
    return status::success();
  };
}

maybe_task task_for(work::copy&& w, const std::shared_ptr<stream_state>&) {
  return [w] {
    std::memmove(w.destination, w.source, w.bytes);
    return status::success();
  };
}

maybe_task task_for(work::wait_value32&& w, const std::shared_ptr<stream_state>&) {
  return [w] {
    // The writer is the host or another stream's worker; poll with a growing pause (up to
    // 1 ms), as the GPU polls the word, so a gate held for seconds costs no core.
    std::atomic_ref<std::uint32_t> word(*w.address);
    auto pause = std::chrono::microseconds(1);
    for (int spins = 0; !wait_satisfied(word.load(std::memory_order_acquire), w.value, w.condition);
         ++spins) {
      if (spins < 64) {
        std::this_thread::yield();
        continue;
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
    return status::success();
  };
}

maybe_task task_for(work::write_value32&& w, const std::shared_ptr<stream_state>&) {
  return [w] {
    std::atomic_ref<std::uint32_t>(*w.address).store(w.value, std::memory_order_release);
    return status::success();
  };
}

/// Waits on the worker until `source` completed position. A failure upstream is the upstream
/// stream's error; the waiting stream carries on. Nothing to do when source already completed
/// it: the wait would only wake this stream's worker (tens of microseconds of thread switches
/// for a stream ping-pong on a small machine).
maybe_task wait_on(std::shared_ptr<stream_state> source, std::uint64_t position,
                   const std::shared_ptr<stream_state>& self) {
  if (source == nullptr || source == self) return std::nullopt;  // nothing to wait for
  {
    std::lock_guard lock(source->mutex);
    if (source->completed >= position) return std::nullopt;
  }
  return [source = std::move(source), position] {
    (void)source->wait_for(position);
    return status::success();
  };
}

maybe_task task_for(work::wait_event&& w, const std::shared_ptr<stream_state>& self) {
  cpu_event::snapshot at = static_cast<cpu_event*>(w.awaited)->recorded();
  return wait_on(std::move(at.source), at.position, self);
}

maybe_task task_for(work::wait_stream&& w, const std::shared_ptr<stream_state>& self) {
  return wait_on(static_cast<cpu_stream*>(w.other)->state(), w.position, self);
}

}  // namespace

cpu_stream::cpu_stream(int device, stream_timeline& timeline)
    : stream(device, nullptr), state_(std::make_shared<stream_state>(timeline, device)) {
  watch_failures(state_->failed);
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
        state->failed.store(true, std::memory_order_release);
      }
      state->completed = op.position;
      // Inside the lock: whoever wakes from `progress` sees the timeline advanced too.
      state->timeline.note_completed(op.position);
    }
    state->progress.notify_all();
  }
}

status cpu_stream::push(host_task task) {
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

status cpu_stream::enqueue(stream_work item) {
  std::optional<host_task> task =
      std::visit([&](auto& work) { return task_for(std::move(work), state_); }, item);
  if (!task) return status::success();  // nothing to wait for
  return push(std::move(*task));
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

status cpu_stream::failure() {
  std::lock_guard lock(state_->mutex);
  return state_->failed_at != 0 ? state_->sticky : status::success();
}

}  // namespace soma::detail::backend::cpu
