// A soma stream: its timeline (positions) and the backend queue behind it.
#pragma once

#include <cstdint>
#include <memory>

#include "backend/backend.hpp"
#include "core/stream_timeline.hpp"
#include "core/vector_clock.hpp"

namespace soma::detail {

/// Destroyed streams keep this object (without its backend queue): blocks freed on the
/// stream still refer to its timeline.
struct stream_object {
  stream_object(int device_index, std::uint32_t cache_slot) : timeline(cache_slot), device(device_index) {}

  stream_timeline timeline;
  std::shared_ptr<backend::stream> queue;  // null once destroyed
  const int device;
  std::uintptr_t handle = 0;  // 0 for a device's default stream
  unsigned flags = 0;
};

/// A soma event: a backend event plus the stream position it captured, which lets a
/// successful synchronize or query prove that position complete (S12).
struct event_object {
  std::unique_ptr<backend::event> backend_event;
  stream_object* recorded_stream = nullptr;  // null until recorded
  std::uint64_t recorded_position = 0;
  vector_clock clock;  // what happened before the recorded point (S11)
  unsigned flags = 0;
};

}  // namespace soma::detail
