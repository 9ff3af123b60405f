// How the cuda backend learns that a stream reached a position: marker events recorded per
// batch of frees, not per free (design §"Happens-before and reuse"), queried on demand.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "backend/cuda/driver_api.hpp"
#include "core/stream_timeline.hpp"

namespace soma::detail::backend::cuda {

/// The completion_poller of one stream's timeline, and the lock that orders work issued to
/// the stream with the markers recorded on it.
///
/// A marker is a pooled CUevent (CU_EVENT_DISABLE_TIMING) recorded while the timeline stood
/// at position p: when it completes, everything up to p has run. Issuing work and recording a
/// marker both happen under issue_mutex(), so a marker captures exactly the positions it
/// claims. poll() queries markers oldest first and records a new one only when no pending
/// marker covers the position asked about, so a burst of frees costs one event record.
///
/// Lifetime: owned by the backend, never by the stream. When the stream is destroyed the
/// tracker is retired: it records a final marker and keeps serving the timeline's polls
/// (the timeline outlives the stream, and a poll may already be on its way into this object
/// when the stream goes). Once every marker completed, the timeline stands at its final
/// position, the tracker unregisters and the backend may attach it to a new stream of the
/// same device. A late poll arriving after that acts on the new stream harmlessly (at worst
/// one extra marker). Thread-safe.
/// A marker to wait on outside the tracker's lock, and what it covers.
struct marker_wait {
  CUevent event = nullptr;
  std::uint64_t position = 0;
};

class completion_tracker final : public completion_poller {
 public:
  completion_tracker(const driver_api& driver, CUcontext context, int device) noexcept;
  /// Destroys the events; never touches a timeline (it may be gone).
  ~completion_tracker() override;
  completion_tracker(const completion_tracker&) = delete;
  completion_tracker& operator=(const completion_tracker&) = delete;

  /// Starts serving stream and registers as timeline's poller.
  /// Requires: not attached (new, or finish_if_drained() returned true).
  void attach(CUstream stream, stream_timeline& timeline);

  /// Held while issuing work to the stream and while recording on it, so positions and
  /// what the driver captured agree.
  spin_lock& issue_mutex() noexcept { return mutex_; }

  /// A marker that completes once position has run: the newest pending one if it covers
  /// position, else one recorded now. Requires: issue_mutex() held, position <= enqueued.
  result<CUevent> marker_covering_locked(std::uint64_t position);

  /// completion_poller: learns what completed; records a marker if none covers position
  /// (never on a stream that covers every position: it only learns from its markers).
  void poll(std::uint64_t position) override;

  /// From now until the next attach, every position is covered by a marker as it is taken
  /// (cover_enqueued_locked), and the stream is never queried or recorded on otherwise: its
  /// owner may destroy it once soma's last operation on it is issued.
  void cover_every_position() noexcept;
  bool covers_every_position() const noexcept { return cover_all_; }
  /// Where every position is covered: makes a marker cover the enqueued position. At
  /// max_pending_markers the newest marker is recorded again instead (it then covers the new
  /// position; the older ones still cover theirs). Requires: issue_mutex() held, the stream's
  /// context current.
  status cover_enqueued_locked();

  /// The stream is about to be captured into a graph (cuStreamBeginCapture). During a
  /// capture a marker recorded on the stream would become part of the graph (and could never
  /// be queried), and cuStreamQuery on it would end the capture with an error; so a marker
  /// covering every position issued so far is recorded now, and until end_capture_locked()
  /// the tracker records and queries nothing on the stream: polls learn completion from the
  /// markers already pending, which cover every position (nothing is issued during a
  /// capture). Requires: issue_mutex() held, the stream's context current.
  status begin_capture_locked();
  /// The capture ended (or never began): markers and stream queries are allowed again.
  /// Requires: issue_mutex() held.
  void end_capture_locked() noexcept { capturing_ = false; }

  /// The stream is going away; no more work is issued. Records a final marker unless the
  /// timeline already reached its last position. Call before the CUstream is destroyed.
  void retire();
  /// For a retired tracker: true once every marker completed; the timeline then stands at
  /// its final position and the tracker is detached from it, ready for attach().
  bool finish_if_drained();
  /// For a retired tracker: true if no marker covers the stream's last work (its record
  /// failed, or a native stream was destroyed by its owner first), so only a synchronize of
  /// the whole context can show that work ran. Such a tracker is never recycled until
  /// note_context_synchronized().
  bool needs_context_synchronize();
  /// The context was synchronized after the stream was retired: its last work has run.
  void note_context_synchronized();
  /// Where every position is covered: the newest marker and the position it covers, taken
  /// under the lock so that the caller can wait on it without (nullptr: all known complete).
  marker_wait newest_marker();

  int device() const noexcept { return device_; }
  /// Markers recorded and not yet seen complete (for tests and diagnostics).
  std::size_t pending_markers() const;

  /// Markers in flight at most: polls beyond it wait for the oldest to complete.
  static constexpr std::size_t max_pending_markers = 32;

 private:
  struct marker {
    CUevent event = nullptr;
    std::uint64_t position = 0;  // the timeline's enqueued position when recorded
  };

  void collect_completed_locked();
  /// Keeps a completed marker's event for the next marker, or destroys it where host memory for
  /// the list runs out: learning completion never fails for want of host memory.
  void keep_spare_locked(CUevent event) noexcept;
  result<CUevent> record_marker_locked();

  const driver_api& driver_;
  const CUcontext context_;
  const int device_;
  // A spin lock: taken for every operation issued to the stream (a record, a wait, a free on
  // a stream that covers every position) and held for the driver call that issues it, which is
  // short; a thread that waits for longer yields (spin_lock).
  mutable spin_lock mutex_;
  CUstream stream_ = nullptr;            // null once retired
  stream_timeline* timeline_ = nullptr;  // null when detached
  std::uint64_t final_position_ = 0;     // enqueued position at retirement
  bool capturing_ = false;               // between begin and end of a capture
  bool cover_all_ = false;               // cover_every_position() since the last attach
  std::deque<marker> pending_;           // oldest first; positions ascending
  std::vector<CUevent> spare_events_;    // completed markers, reused
};

}  // namespace soma::detail::backend::cuda
