#include "backend/cuda/cuda_event.hpp"

#include <optional>

#include "backend/cuda/cuda_stream.hpp"

namespace soma::detail::backend::cuda {

cuda_event::~cuda_event() {
  std::lock_guard lock(mutex_);
  for (const per_context& created : created_) {
    context_scope scope(driver_, created.context);
    // cuEventDestroy of a pending event returns at once; the driver frees it on completion.
    if (scope.entered().ok()) driver_.cuEventDestroy(created.event);
  }
}

CUevent cuda_event::made_in_locked(CUcontext context) const noexcept {
  for (const per_context& created : created_)
    if (created.context == context) return created.event;
  return nullptr;
}

result<CUevent> cuda_event::event_in_locked(CUcontext context, int device) {
  if (CUevent made = made_in_locked(context)) return made;
  CUevent made = nullptr;
  if (status s =
          driver_.check(driver_.cuEventCreate(&made, CU_EVENT_DISABLE_TIMING), "cuEventCreate",
                        "creating an event on device " + std::to_string(device));
      !s.ok())
    return s;
  created_.push_back({context, made});
  return made;
}

result<CUevent> cuda_event::event_in(CUcontext context, int device) {
  std::lock_guard lock(mutex_);
  return event_in_locked(context, device);
}

void cuda_event::note_recorded(CUevent recorded, CUcontext context,
                               std::shared_ptr<sticky_state> sticky, std::uint64_t position) {
  std::lock_guard lock(mutex_);
  event_.store(recorded, std::memory_order_release);
  context_ = context;
  sticky_ = std::move(sticky);
  recorded_position_ = position;
}

status cuda_event::record(stream& s) {
  auto& target = static_cast<cuda_stream&>(s);
  // The stream's issue lock first (the order enqueue_wait uses too): an operation whose
  // position was taken is then also in the driver's hands, so the event captures every
  // position the runtime read before calling here.
  std::lock_guard issuing(target.issue_mutex());
  std::lock_guard lock(mutex_);
  // The first record in this context creates its CUevent there, which needs it current (and
  // records within the same scope).
  std::optional<context_scope> creating;
  CUevent chosen = made_in_locked(target.context());
  if (chosen == nullptr) [[unlikely]] {
    creating.emplace(driver_, target.context());
    if (!creating->entered().ok()) return creating->entered();
    result<CUevent> made = event_in_locked(target.context(), target.device());
    if (!made.ok()) return made.take_error();
    chosen = made.value();
  }
  // Otherwise no context check unless the record fails (call_in_stream_context).
  if (status s =
          call_in_stream_context(driver_, target.context(), "cuEventRecord",
                                 [&] { return driver_.cuEventRecord(chosen, target.native()); });
      !s.ok())
    return s;
  event_.store(chosen, std::memory_order_release);
  // Recorded on the same stream again: no reference-count traffic.
  if (sticky_ != target.sticky()) sticky_ = target.sticky();
  recorded_position_ = target.enqueued_position();
  context_ = target.context();
  return status::success();
}

status cuda_event::query() {
  std::lock_guard lock(mutex_);
  const CUevent recorded = event_.load(std::memory_order_relaxed);
  if (recorded == nullptr) return status::success();  // never recorded: nothing to wait for
  context_scope scope(driver_, context_);
  if (!scope.entered().ok()) return scope.entered();
  const CUresult state = driver_.cuEventQuery(recorded);
  if (state == CUDA_ERROR_NOT_READY) {
    return status(error_code::not_ready, "the work the event captured has not completed yet");
  }
  if (status failed = driver_.check(state, "cuEventQuery"); !failed.ok()) return failed;
  return sticky_ != nullptr ? sticky_->failure_up_to(recorded_position_) : status::success();
}

status cuda_event::synchronize() {
  CUevent waited = nullptr;
  CUcontext context = nullptr;
  std::shared_ptr<sticky_state> sticky;
  std::uint64_t position = 0;
  {
    // Not held while blocking: a record or a stream wait on this event must not stall
    // behind a host wait. created_ keeps the handle valid if a record moves devices.
    std::lock_guard lock(mutex_);
    waited = event_.load(std::memory_order_relaxed);
    context = context_;
    sticky = sticky_;
    position = recorded_position_;
  }
  if (waited == nullptr) return status::success();
  context_scope scope(driver_, context);
  if (!scope.entered().ok()) return scope.entered();
  if (status done = driver_.check(driver_.cuEventSynchronize(waited), "cuEventSynchronize");
      !done.ok())
    return done;
  return sticky != nullptr ? sticky->failure_up_to(position) : status::success();
}

}  // namespace soma::detail::backend::cuda
