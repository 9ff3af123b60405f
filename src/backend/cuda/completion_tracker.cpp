#include "backend/cuda/completion_tracker.hpp"

#include <new>

#include "core/check.hpp"

namespace soma::detail::backend::cuda {

completion_tracker::completion_tracker(const driver_api& driver, CUcontext context,
                                       int device) noexcept
    : driver_(driver), context_(context), device_(device) {}

completion_tracker::~completion_tracker() {
  context_scope scope(driver_, context_);
  if (!scope.entered().ok()) return;
  // Destroying a pending event is allowed: the driver frees it once it completes.
  for (const marker& m : pending_) driver_.cuEventDestroy(m.event);
  for (CUevent e : spare_events_) driver_.cuEventDestroy(e);
}

void completion_tracker::attach(CUstream stream, stream_timeline& timeline) {
  std::lock_guard lock(mutex_);
  SOMA_ASSERT(timeline_ == nullptr, "a tracker serves one stream at a time");
  stream_ = stream;
  timeline_ = &timeline;
  final_position_ = 0;
  capturing_ = false;
  cover_all_ = false;
  timeline.set_poller(this);
}

std::size_t completion_tracker::pending_markers() const {
  std::lock_guard lock(mutex_);
  return pending_.size();
}

void completion_tracker::keep_spare_locked(CUevent event) noexcept {
  try {
    spare_events_.push_back(event);
  } catch (const std::bad_alloc&) {
    driver_.cuEventDestroy(event);  // a later marker creates one: learning completion goes on
  }
}

void completion_tracker::collect_completed_locked() {
  // A stream runs in order: once one marker is pending, the later ones are too.
  while (!pending_.empty()) {
    const marker oldest = pending_.front();
    const CUresult state = driver_.cuEventQuery(oldest.event);
    // NOT_READY: still running. Anything else but success means the context failed (a
    // kernel fault): completion can no longer be learned, and the marker stays pending.
    if (state != CUDA_SUCCESS) return;
    timeline_->note_completed(oldest.position);
    keep_spare_locked(oldest.event);
    pending_.pop_front();
  }
}

result<CUevent> completion_tracker::record_marker_locked() {
  if (stream_ == nullptr) {
    return status(error_code::invalid_handle,
                  "the stream was destroyed; no marker can be recorded");
  }
  // The marker would be captured into the graph instead of recorded (begin_capture_locked).
  if (capturing_) {
    return status(error_code::not_permitted,
                  "the stream is being captured into a graph; no marker can be recorded on it "
                  "until the capture ends");
  }
  CUevent event = nullptr;
  if (!spare_events_.empty()) {
    event = spare_events_.back();
    spare_events_.pop_back();
  } else if (const CUresult made = driver_.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING);
             made != CUDA_SUCCESS) {
    return driver_.check(made, "cuEventCreate",
                         "a completion marker for device " + std::to_string(device_));
  }
  const std::uint64_t position = timeline_->enqueued_position();
  if (const CUresult recorded = driver_.cuEventRecord(event, stream_); recorded != CUDA_SUCCESS) {
    keep_spare_locked(event);
    return driver_.check(recorded, "cuEventRecord", [&] {
      return "a completion marker at stream position " + std::to_string(position);
    });
  }
  try {
    pending_.push_back({event, position});
  } catch (const std::bad_alloc&) {
    // Untracked, the marker covers nothing: the stream's next marker covers this position too.
    driver_.cuEventDestroy(event);
    throw;
  }
  return event;
}

result<CUevent> completion_tracker::marker_covering_locked(std::uint64_t position) {
  SOMA_ASSERT(timeline_ == nullptr || position <= timeline_->enqueued_position(),
              "a marker covers only a position already taken");
  context_scope scope(driver_, context_);
  if (!scope.entered().ok()) return scope.entered();
  if (!pending_.empty() && pending_.back().position >= position) return pending_.back().event;
  return record_marker_locked();
}

void completion_tracker::poll(std::uint64_t position) {
  std::lock_guard lock(mutex_);
  if (timeline_ == nullptr) return;  // detached: a late poll from a finished stream
  context_scope scope(driver_, context_);
  if (!scope.entered().ok()) return;
  collect_completed_locked();
  if (timeline_->completed_position() >= position) return;
  if (!pending_.empty() && pending_.back().position >= position) return;  // learn from it later
  if (stream_ == nullptr) return;  // retired: the final marker is the last word
  if (cover_all_) return;          // the stream may be gone; its markers are the only word
  if (capturing_)
    return;  // no query, no marker: the pending markers cover all (begin_capture_locked)
  const std::uint64_t enqueued = timeline_->enqueued_position();
  if (pending_.empty()) {
    // An idle stream answers at once, without an event (the common case: the free ran
    // long ago). Issuing holds this lock, so nothing slips in between.
    if (driver_.cuStreamQuery(stream_) == CUDA_SUCCESS) {
      timeline_->note_completed(enqueued);
      return;
    }
  } else if (pending_.back().position == enqueued) {
    return;  // nothing was issued since the newest marker: another would capture the same
  }
  if (pending_.size() >= max_pending_markers) return;  // the oldest completes first anyway
  (void)record_marker_locked();                        // on failure a later poll tries again
}

void completion_tracker::cover_every_position() noexcept {
  std::lock_guard lock(mutex_);
  cover_all_ = true;
}

status completion_tracker::cover_enqueued_locked() {
  if (!cover_all_ || stream_ == nullptr || capturing_) return status::success();
  collect_completed_locked();
  const std::uint64_t enqueued = timeline_->enqueued_position();
  if (!pending_.empty() && pending_.back().position >= enqueued) return status::success();
  if (pending_.size() < max_pending_markers) {
    result<CUevent> recorded = record_marker_locked();
    return recorded.ok() ? status::success() : recorded.take_error();
  }
  // Bounded under a long kernel: the newest marker moves forward. A wait already ordered on
  // it (cuStreamWaitEvent) keeps the point it saw; the driver snapshots an event at the wait.
  marker& newest = pending_.back();
  if (const CUresult recorded = driver_.cuEventRecord(newest.event, stream_);
      recorded != CUDA_SUCCESS) {
    return driver_.check(recorded, "cuEventRecord",
                         "a completion marker at stream position " + std::to_string(enqueued));
  }
  newest.position = enqueued;
  return status::success();
}

status completion_tracker::begin_capture_locked() {
  if (stream_ == nullptr || timeline_ == nullptr)
    return status(error_code::invalid_handle, "the stream was destroyed");
  const std::uint64_t enqueued = timeline_->enqueued_position();
  const bool covered = timeline_->completed_position() >= enqueued ||
                       (!pending_.empty() && pending_.back().position >= enqueued);
  if (!covered) {
    if (result<CUevent> marker = record_marker_locked(); !marker.ok()) return marker.take_error();
  }
  capturing_ = true;
  return status::success();
}

void completion_tracker::retire() {
  std::lock_guard lock(mutex_);
  if (stream_ == nullptr || timeline_ == nullptr) return;
  context_scope scope(driver_, context_);
  if (!scope.entered().ok()) return;
  final_position_ = timeline_->enqueued_position();
  collect_completed_locked();
  const bool covered = timeline_->completed_position() >= final_position_ ||
                       (!pending_.empty() && pending_.back().position >= final_position_);
  // If this record fails the context is broken (nothing it runs completes any more) and the
  // frees of this stream stay pending until settle_unmarked_streams synchronizes the context. A
  // stream covering every position may already be gone: it is never recorded on here.
  if (!covered && !cover_all_) (void)record_marker_locked();
  stream_ = nullptr;
}

bool completion_tracker::needs_context_synchronize() {
  std::lock_guard lock(mutex_);
  if (stream_ != nullptr || timeline_ == nullptr) return false;
  context_scope scope(driver_, context_);
  if (!scope.entered().ok()) return false;
  collect_completed_locked();
  if (timeline_->completed_position() >= final_position_) return false;
  return pending_.empty() || pending_.back().position < final_position_;
}

void completion_tracker::note_context_synchronized() {
  std::lock_guard lock(mutex_);
  if (stream_ != nullptr || timeline_ == nullptr) return;
  context_scope scope(driver_, context_);
  if (scope.entered().ok()) collect_completed_locked();
  timeline_->note_completed(final_position_);  // everything issued before the sync has run
}

marker_wait completion_tracker::newest_marker() {
  std::lock_guard lock(mutex_);
  if (timeline_ == nullptr) return {};
  context_scope scope(driver_, context_);
  if (scope.entered().ok()) collect_completed_locked();
  if (pending_.empty()) return {};
  return {pending_.back().event, pending_.back().position};
}

bool completion_tracker::finish_if_drained() {
  std::lock_guard lock(mutex_);
  if (stream_ != nullptr) return false;  // still serving a live stream
  if (timeline_ == nullptr) return true;
  context_scope scope(driver_, context_);
  if (!scope.entered().ok()) return false;
  collect_completed_locked();
  if (!pending_.empty() || timeline_->completed_position() < final_position_) return false;
  timeline_->set_poller(nullptr);
  timeline_ = nullptr;
  return true;
}

}  // namespace soma::detail::backend::cuda
