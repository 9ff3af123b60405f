// A soma stream: its timeline (positions) and the backend queue behind it; a soma event.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "backend/backend.hpp"
#include "core/spin_lock.hpp"
#include "core/stream_timeline.hpp"
#include "core/timeline_registry.hpp"
#include "core/vector_clock.hpp"

namespace soma::detail {

/// Shared: a destroyed stream's record stays while its queued work runs (blocks freed on it
/// name its timeline) and while events recorded on it are alive. Once its work has run the
/// runtime forgets it (stream_registry::forget_finished).
struct stream_object : std::enable_shared_from_this<stream_object> {
  stream_object(int device_index, std::uint32_t cache_slot, timeline_registry* registry)
      : timeline(cache_slot, registry), device(device_index) {}

  stream_timeline timeline;
  std::shared_ptr<backend::stream> queue;  // null once destroyed; registry lock
  const int device;
  std::uintptr_t handle = 0;  // 0 for a device's default stream
  unsigned flags = 0;
  /// The queue when it runs on a native stream (cuda), which may carry work soma never saw:
  /// a free tells it (S2). Set before the stream is published, never changed. A free racing
  /// the stream's destruction is the caller's error, as in CUDA (the queue may be gone).
  backend::stream* native_queue = nullptr;
};

/// A soma event: a backend event plus the stream position it captured, which lets a
/// successful synchronize or query prove that position complete (S12). Used from several
/// threads at once: `mutex` keeps the fields below consistent with the backend record. A spin
/// lock (which yields after a short spin): it is taken on every record and wait, and threads
/// rarely share one event.
struct event_object {
  spin_lock mutex;
  std::unique_ptr<backend::event> backend_event;
  std::shared_ptr<stream_object> recorded_stream;  // null until recorded
  std::uint64_t recorded_position = 0;
  std::uint64_t record_count = 0;  // tells a synchronize whether a record came meanwhile
  vector_clock clock;              // what happened before the recorded point (S11)
  unsigned flags = 0;
};

}  // namespace soma::detail
