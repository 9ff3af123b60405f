#include "backend/cuda/cuda_stream.hpp"

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_event.hpp"

namespace soma::detail::backend::cuda {
namespace {

/// What cuLaunchHostFunc carries to the driver thread; the callback owns and frees it.
struct host_call {
  std::shared_ptr<sticky_state> sticky;
  host_task task;
  stream_timeline* timeline;  // outlives the stream (backend.hpp), so also this call
  std::uint64_t position;
};

void run_host_call(void* data) {
  std::unique_ptr<host_call> call(static_cast<host_call*>(data));
  bool skip = false;
  {
    std::lock_guard lock(call->sticky->mutex);
    skip = !call->sticky->failure.ok();  // after a failure later host tasks are skipped
  }
  status outcome;
  if (!skip) {
    try {
      outcome = call->task();
    } catch (...) {  // nothing may unwind into the driver's thread
      outcome = status(error_code::unknown, "the host task threw an exception");
    }
  }
  if (!outcome.ok()) {
    std::lock_guard lock(call->sticky->mutex);
    if (call->sticky->failure.ok()) {
      call->sticky->fail(status(error_code::launch_failure,
                                "asynchronous work at position " + std::to_string(call->position) +
                                    " of the stream failed: " + outcome.message()),
                         call->position);
    }
  }
  // A host function runs after everything before it on the stream: its position is done.
  call->timeline->note_completed(call->position);
}

CUdeviceptr device_pointer(const void* pointer) {
  return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(pointer));
}

}  // namespace

cuda_stream::cuda_stream(cuda_backend& owner, const driver_api& driver, int device,
                         CUcontext context, CUstream native, bool owns_native,
                         stream_timeline& timeline, completion_tracker& tracker)
    : stream(device, native),
      owner_(owner),
      driver_(driver),
      device_(device),
      context_(context),
      native_(native),
      owns_native_(owns_native),
      timeline_(timeline),
      tracker_(tracker),
      sticky_(std::make_shared<sticky_state>()) {
  watch_failures(sticky_->failed);
}

cuda_stream::~cuda_stream() {
  // The final marker goes on the stream before it is destroyed; the tracker keeps serving
  // the timeline, so blocks freed here become reusable once the stream's work is done.
  tracker_.retire();
  if (owns_native_) {
    context_scope scope(driver_, context_);
    if (scope.entered().ok())
      driver_.cuStreamDestroy(native_);  // returns at once; pending work still completes
  }
  owner_.retire_tracker(tracker_);
}

template <typename Issue>
status cuda_stream::issue_one(Issue&& issue) {
  if (status failed = sticky_error(); !failed.ok()) return failed;
  context_scope scope(driver_, context_);
  if (!scope.entered().ok()) return scope.entered();
  std::lock_guard lock(tracker_.issue_mutex());
  // A position taken for a call the driver then refuses stays unused; markers recorded
  // later cover it, so the timeline remains correct.
  status issued = issue(timeline_.note_enqueued());
  if (issued.ok())
    (void)tracker_.cover_enqueued_locked();  // failure: settle_unmarked_streams copes
  return issued;
}

void cuda_stream::note_free() {
  if (!tracker_.covers_every_position()) {
    (void)timeline_.note_enqueued();  // a later poll records a marker if one is needed
    return;
  }
  context_scope scope(driver_, context_);
  std::lock_guard lock(tracker_.issue_mutex());
  (void)timeline_.note_enqueued();
  if (scope.entered().ok()) (void)tracker_.cover_enqueued_locked();
}

status cuda_stream::enqueue(stream_work item) {
  return std::visit([this](auto& work) { return issue(work); }, item);
}

status cuda_stream::issue(work::host& w) {
  return issue_one([&](std::uint64_t position) {
    auto call =
        std::make_unique<host_call>(host_call{sticky_, std::move(w.task), &timeline_, position});
    const CUresult launched = driver_.cuLaunchHostFunc(native_, &run_host_call, call.get());
    if (launched != CUDA_SUCCESS) return driver_.check(launched, "cuLaunchHostFunc");
    (void)call.release();  // run_host_call frees it (unless the context fails first: it leaks)
    return status::success();
  });
}

status cuda_stream::issue(work::fill& w) {
  return issue_one([&](std::uint64_t) {
    return driver_.check(
        driver_.cuMemsetD8Async(device_pointer(w.destination), static_cast<unsigned char>(w.value),
                                w.bytes, native_),
        "cuMemsetD8Async", [&] {
          return format_bytes(w.bytes) + " at " +
                 format_address(reinterpret_cast<std::uintptr_t>(w.destination));
        });
  });
}

status cuda_stream::issue(work::copy& w) {
  // Unlike the cpu backend's memmove, overlapping ranges are undefined (as in cudaMemcpyAsync).
  return issue_one([&](std::uint64_t) {
    return driver_.check(driver_.cuMemcpyAsync(device_pointer(w.destination),
                                               device_pointer(w.source), w.bytes, native_),
                         "cuMemcpyAsync", [&] {
                           return format_bytes(w.bytes) + " from " +
                                  format_address(reinterpret_cast<std::uintptr_t>(w.source)) +
                                  " to " +
                                  format_address(reinterpret_cast<std::uintptr_t>(w.destination));
                         });
  });
}

status cuda_stream::issue(work::wait_value32& w) {
  // wait_condition's values are CU_STREAM_WAIT_VALUE_*; host words are mapped page-locked
  // memory, whose device address equals the host address under unified addressing.
  return issue_one([&](std::uint64_t) {
    return driver_.check(driver_.cuStreamWaitValue32(native_, device_pointer(w.address), w.value,
                                                     static_cast<unsigned>(w.condition)),
                         "cuStreamWaitValue32",
                         "word at " + format_address(reinterpret_cast<std::uintptr_t>(w.address)));
  });
}

status cuda_stream::issue(work::write_value32& w) {
  return issue_one([&](std::uint64_t) {
    return driver_.check(driver_.cuStreamWriteValue32(native_, device_pointer(w.address), w.value,
                                                      CU_STREAM_WRITE_VALUE_DEFAULT),
                         "cuStreamWriteValue32",
                         "word at " + format_address(reinterpret_cast<std::uintptr_t>(w.address)));
  });
}

status cuda_stream::issue(work::wait_event& w) {
  auto& awaited = static_cast<cuda_event&>(*w.awaited);
  if (status failed = sticky_error(); !failed.ok()) return failed;
  std::lock_guard lock(tracker_.issue_mutex());
  const CUevent recorded = awaited.recorded();
  if (recorded == nullptr) return status::success();  // never recorded: nothing to wait for
  timeline_.note_enqueued();
  // No context check unless the wait fails (call_in_stream_context).
  status waited = call_in_stream_context(driver_, context_, "cuStreamWaitEvent", [&] {
    return driver_.cuStreamWaitEvent(native_, recorded, CU_EVENT_WAIT_DEFAULT);
  });
  if (waited.ok() && tracker_.covers_every_position()) [[unlikely]] {
    // A marker is recorded now: that needs the context current.
    context_scope scope(driver_, context_);
    if (scope.entered().ok()) (void)tracker_.cover_enqueued_locked();
  }
  return waited;
}

status cuda_stream::issue(work::wait_stream& w) {
  auto& source = static_cast<cuda_stream&>(*w.other);
  const std::uint64_t position = w.position;
  if (&source == this) return status::success();  // in order already
  if (status failed = sticky_error(); !failed.ok()) return failed;
  context_scope scope(driver_, context_);
  if (!scope.entered().ok()) return scope.entered();
  // Both issue locks, taken deadlock-free: two streams may wait for each other at once.
  std::scoped_lock both(tracker_.issue_mutex(), source.tracker_.issue_mutex());
  if (source.timeline_.completed_position() >= position) return status::success();
  result<CUevent> marker = source.tracker_.marker_covering_locked(position);
  if (!marker.ok()) return marker.take_error();
  timeline_.note_enqueued();
  status waited =
      driver_.check(driver_.cuStreamWaitEvent(native_, marker.value(), CU_EVENT_WAIT_DEFAULT),
                    "cuStreamWaitEvent", [&] {
                      return "ordering after position " + std::to_string(position) +
                             " of a stream on device " + std::to_string(source.device_);
                    });
  if (waited.ok()) (void)tracker_.cover_enqueued_locked();
  return waited;
}

status cuda_stream::enqueue_graph(CUgraphExec exec,
                                  const std::function<void(std::uint64_t)>& launched) {
  return issue_one([&](std::uint64_t position) {
    if (status s = driver_.check(
            driver_.cuGraphLaunch(exec, native_), "cuGraphLaunch",
            [&] { return "a graph on a stream of device " + std::to_string(device_); });
        !s.ok())
      return s;
    launched(position);
    return status::success();
  });
}

status cuda_stream::upload_graph(CUgraphExec exec) {
  if (status failed = sticky_error(); !failed.ok()) return failed;
  context_scope scope(driver_, context_);
  if (!scope.entered().ok()) return scope.entered();
  std::lock_guard lock(tracker_.issue_mutex());
  return driver_.check(driver_.cuGraphUpload(exec, native_), "cuGraphUpload",
                       [&] { return "a graph on a stream of device " + std::to_string(device_); });
}

status cuda_stream::begin_capture() {
  context_scope scope(driver_, context_);
  if (!scope.entered().ok()) return scope.entered();
  std::lock_guard lock(tracker_.issue_mutex());
  if (status prepared = tracker_.begin_capture_locked(); !prepared.ok()) return prepared;
  const CUresult begun = driver_.cuStreamBeginCapture(native_, CU_STREAM_CAPTURE_MODE_RELAXED);
  if (begun != CUDA_SUCCESS) {
    tracker_.end_capture_locked();
    return driver_.check(begun, "cuStreamBeginCapture",
                         "relaxed mode, a stream of device " + std::to_string(device_));
  }
  return status::success();
}

result<CUgraph> cuda_stream::end_capture() {
  context_scope scope(driver_, context_);
  if (!scope.entered().ok()) return scope.entered();
  std::lock_guard lock(tracker_.issue_mutex());
  CUgraph captured = nullptr;
  const CUresult ended = driver_.cuStreamEndCapture(native_, &captured);
  // Even a failed cuStreamEndCapture (an invalidated capture) leaves the stream uncaptured.
  tracker_.end_capture_locked();
  if (status s = driver_.check(ended, "cuStreamEndCapture",
                               "a stream of device " + std::to_string(device_));
      !s.ok())
    return s;
  return captured;
}

status cuda_stream::synchronize_by_markers() {
  std::uint64_t enqueued = 0;
  {
    std::lock_guard lock(tracker_.issue_mutex());
    enqueued = timeline_.enqueued_position();
  }
  // Waited on outside every lock; a marker completed meanwhile may be re-recorded later on
  // this stream, which only makes this wait longer.
  const marker_wait newest = tracker_.newest_marker();
  if (newest.event != nullptr) {
    context_scope scope(driver_, context_);
    if (!scope.entered().ok()) return scope.entered();
    const CUresult done = driver_.cuEventSynchronize(newest.event);
    if (done != CUDA_SUCCESS) return note_failure(driver_.check(done, "cuEventSynchronize"));
    timeline_.note_completed(newest.position);
  }
  if (timeline_.completed_position() < enqueued) {
    // A marker could not be recorded (its failure was the driver's), and soma may not touch
    // this stream otherwise: say so rather than answer for work nothing covers. The stream's
    // next operation records a marker that covers it again.
    return status(error_code::unknown,
                  "no completion marker covers stream position " + std::to_string(enqueued) +
                      " (recording one failed); enqueue more work on the stream and "
                      "synchronize it again");
  }
  return sticky_error();
}

status cuda_stream::synchronize() {
  if (tracker_.covers_every_position()) return synchronize_by_markers();
  std::uint64_t position = 0;
  {
    std::lock_guard lock(tracker_.issue_mutex());
    position = timeline_.enqueued_position();  // everything up to it is in the driver's hands
  }
  context_scope scope(driver_, context_);
  if (!scope.entered().ok()) return scope.entered();
  const CUresult done = driver_.cuStreamSynchronize(native_);
  if (done != CUDA_SUCCESS) return note_failure(driver_.check(done, "cuStreamSynchronize"));
  timeline_.note_completed(position);
  return sticky_error();
}

status cuda_stream::query() {
  if (tracker_.covers_every_position()) {
    const std::uint64_t position = timeline_.enqueued_position();
    if (!timeline_.has_completed(position)) return status(error_code::not_ready, "stream busy");
    return sticky_error();
  }
  context_scope scope(driver_, context_);
  if (!scope.entered().ok()) return scope.entered();
  std::uint64_t position = 0;
  CUresult state = CUDA_SUCCESS;
  {
    std::lock_guard lock(tracker_.issue_mutex());
    position = timeline_.enqueued_position();
    state = driver_.cuStreamQuery(native_);
  }
  if (state == CUDA_ERROR_NOT_READY) return status(error_code::not_ready, "stream busy");
  if (state != CUDA_SUCCESS) return note_failure(driver_.check(state, "cuStreamQuery"));
  timeline_.note_completed(position);
  return sticky_error();
}

status cuda_stream::failure() {
  std::lock_guard lock(sticky_->mutex);
  return sticky_->failure;
}

status cuda_stream::note_failure(status failure) {
  // Only faults of asynchronous work stick; a bad argument concerns one call.
  const bool asynchronous =
      failure.code() == error_code::launch_failure || failure.code() == error_code::illegal_address;
  if (asynchronous) {
    std::lock_guard lock(sticky_->mutex);
    if (sticky_->failure.ok()) sticky_->fail(failure, 0);  // the position is not known
  }
  return failure;
}

}  // namespace soma::detail::backend::cuda
