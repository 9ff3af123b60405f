// A cuda backend stream: a CUstream (created, or adopted from the application) plus the
// bookkeeping that keeps its timeline honest.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

#include "backend/backend.hpp"
#include "backend/cuda/completion_tracker.hpp"
#include "backend/cuda/driver_api.hpp"

namespace soma::detail::backend::cuda {

class cuda_backend;

/// The first failure of asynchronous work on a stream, shared with host tasks still in the
/// driver's hands, so a task that fails after its stream was destroyed has somewhere to go.
struct sticky_state {
  std::mutex mutex;
  status failure;               ///< success until something failed
  std::uint64_t failed_at = 0;  ///< position of the failed operation; 0 = none
  /// Set (under mutex) with failure, so that every enqueue's check of a stream that never
  /// failed is one load rather than a lock.
  std::atomic<bool> failed{false};

  void fail(status why, std::uint64_t position) {  // requires: mutex held, no failure yet
    failure = std::move(why);
    failed_at = position;
    failed.store(true, std::memory_order_release);
  }

  /// The failure if it happened at or before position (what an event there must report).
  status failure_up_to(std::uint64_t position) {
    std::lock_guard lock(mutex);
    return failed_at != 0 && failed_at <= position ? failure : status::success();
  }
};

/// Every enqueue advances the timeline by exactly one (note_enqueued), as on the cpu
/// backend, under the completion tracker's issue lock. `completed` advances through marker
/// events (completion_tracker), synchronize, successful queries and host tasks (a host
/// function starts only after everything before it ran).
///
/// Host tasks run on a driver thread (cuLaunchHostFunc); they must not call CUDA or soma
/// functions that enqueue work or wait on streams. A failing task becomes the stream's
/// sticky error (launch_failure) and later host tasks of the stream are skipped; device
/// work already enqueued (memset, memcpy, the application's kernels) cannot be skipped and
/// still runs. After a failure, new enqueues return the sticky error.
///
/// Destruction returns at once: the tracker is retired (a final marker keeps the timeline
/// learning), and an owned CUstream is destroyed, which the driver does once its work is
/// done. An adopted CUstream is never destroyed. Requires: the backend outlives the stream.
class cuda_stream final : public stream {
 public:
  cuda_stream(cuda_backend& owner, const driver_api& driver, int device, CUcontext context,
              CUstream native, bool owns_native, stream_timeline& timeline,
              completion_tracker& tracker);
  ~cuda_stream() override;

  status enqueue(stream_work item) override;
  status synchronize() override;
  status query() override;
  status failure() override;
  /// The free takes a position of its own (work soma never saw may come before it); on a
  /// stream that covers every position, a marker covers it at once.
  void note_free() override;

  /// An adopted stream whose owner may destroy it first (somaNativeStreamMayEndFirst): from
  /// now on every position taken here is covered by a marker as it is taken, and nothing
  /// queries, records on or synchronizes the stream otherwise (synchronize and query answer
  /// from the markers: soma's operations and frees there, not the owner's later work), so soma
  /// needs the CUstream no longer than its own last operation on it. Costs one cuEventRecord
  /// per operation and free.
  void cover_every_position() noexcept { tracker_.cover_every_position(); }

  CUcontext context() const noexcept { return context_; }
  CUstream native() const noexcept { return native_; }
  /// The lock under which work is issued; held by events recording on this stream.
  spin_lock& issue_mutex() noexcept { return tracker_.issue_mutex(); }
  const std::shared_ptr<sticky_state>& sticky() const noexcept { return sticky_; }
  std::uint64_t enqueued_position() const noexcept { return timeline_.enqueued_position(); }

  /// Launches exec (cuGraphLaunch) as one operation, at the next position, so the completion
  /// tracker covers the whole graph as it covers a memset. Once the driver accepted the launch,
  /// launched(position) runs under the issue lock: the graph's record nodes update their events
  /// there, as record() would.
  status enqueue_graph(CUgraphExec exec, const std::function<void(std::uint64_t)>& launched);
  /// cuGraphUpload on this stream: prepares exec's launches; runs none of its work, takes no
  /// position.
  status upload_graph(CUgraphExec exec);
  /// cuStreamBeginCapture in relaxed mode. The completion tracker first records a marker
  /// covering everything issued so far, then neither records nor queries on the stream until
  /// end_capture (either would be captured, or would end the capture with an error).
  /// Requires: nothing is enqueued on this stream until end_capture.
  status begin_capture();
  /// cuStreamEndCapture: the graph recorded since begin_capture (the caller owns it).
  result<CUgraph> end_capture();

 private:
  status synchronize_by_markers();
  /// Takes the next position and runs issue() under the issue lock, in the stream's context.
  template <typename Issue>
  status issue_one(Issue&& issue);
  // One driver call per kind of work (stream_work).
  status issue(work::host& w);
  status issue(work::fill& w);
  status issue(work::copy& w);
  status issue(work::wait_value32& w);
  status issue(work::write_value32& w);
  status issue(work::wait_event& w);
  status issue(work::wait_stream& w);
  /// Keeps a device fault seen by a synchronize or query as the sticky error.
  status note_failure(status failure);

  cuda_backend& owner_;
  const driver_api& driver_;
  const int device_;
  const CUcontext context_;
  const CUstream native_;
  const bool owns_native_;
  stream_timeline& timeline_;
  completion_tracker& tracker_;  // owned by the backend: it outlives this stream
  std::shared_ptr<sticky_state> sticky_;
};

}  // namespace soma::detail::backend::cuda
