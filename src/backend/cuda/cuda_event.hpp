// A cuda backend event: a CUevent created with CU_EVENT_DISABLE_TIMING.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cuda/cuda_stream.hpp"
#include "backend/cuda/driver_api.hpp"
#include "core/spin_lock.hpp"

namespace soma::detail::backend::cuda {

/// backend::create_event() names no device, and a CUevent belongs to one context, so the
/// CUevent is created at the first record, in the recording stream's context. A record on
/// another device's stream uses (or creates) that context's CUevent; all are kept until this
/// event is destroyed, because a synchronize on another thread may still be using one, so
/// there is at most one per device.
/// A never-recorded event is complete (query and synchronize succeed). Thread-safe.
class cuda_event final : public event {
 public:
  explicit cuda_event(const driver_api& driver) noexcept : driver_(driver) {}
  ~cuda_event() override;
  cuda_event(const cuda_event&) = delete;
  cuda_event& operator=(const cuda_event&) = delete;

  /// Captures the work issued to s so far (s must be a cuda_stream).
  status record(stream& s) override;
  status query() override;
  status synchronize() override;

  /// The latest recorded CUevent (nullptr if never recorded): what a stream wait waits on. One
  /// load, no lock (a wait is half of every ping-pong): a record on another thread meanwhile
  /// yields the CUevent of either record, both valid (created_ keeps them), as the lock gave.
  CUevent recorded() const noexcept { return event_.load(std::memory_order_acquire); }

  /// This event's CUevent in context (of device), created there at first use as a record
  /// would: what a graph's event record or wait node names. Requires: context is current.
  result<CUevent> event_in(CUcontext context, int device);
  /// The event now stands for a record of `recorded` (its CUevent in context) by work at
  /// position of a stream whose failures are sticky: what a graph launch whose record node
  /// names this event does. Called under that stream's issue lock, as record() holds it.
  void note_recorded(CUevent recorded, CUcontext context, std::shared_ptr<sticky_state> sticky,
                     std::uint64_t position);

 private:
  result<CUevent> event_in_locked(CUcontext context, int device);
  /// The CUevent made in context before, or nullptr.
  CUevent made_in_locked(CUcontext context) const noexcept;

  const driver_api& driver_;
  // A spin lock: taken on every record and wait (ping-pong), held for a field update or one
  // driver call (cuEventRecord, cuEventQuery: a fraction of a microsecond), never while blocking.
  spin_lock mutex_;
  struct per_context {
    CUcontext context = nullptr;
    CUevent event = nullptr;
  };
  // The latest record's; null until the first record. Written under mutex_, read by recorded()
  // without it.
  std::atomic<CUevent> event_{nullptr};
  // A host task that failed at or before the recorded position is this event's failure
  // too (a CUevent knows nothing of soma's host tasks).
  std::shared_ptr<sticky_state> sticky_;
  std::uint64_t recorded_position_ = 0;
  CUcontext context_ = nullptr;       // the context event_ belongs to
  std::vector<per_context> created_;  // one CUevent per context recorded on
};

}  // namespace soma::detail::backend::cuda
