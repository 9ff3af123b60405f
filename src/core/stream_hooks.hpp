// What a pool asks of the layer that owns its streams, so that one allocate call finishes
// (as RMM's stream-ordered resource asks its derived class): synchronize a stream, for
// compaction before growth (S9), and order a stream after another stream's position, for
// internal dependencies (S11). The runtime implements it; core tests give a fake.
#pragma once

#include <cstdint>

#include "core/stream_timeline.hpp"

namespace soma::detail {

class stream_hooks {
 public:
  virtual ~stream_hooks() = default;
  /// Blocks until the work enqueued on stream so far has run, and records it as proven (S12)
  /// so that its frees serve every stream. False if the stream failed (nothing is proven).
  virtual bool synchronize(const stream_timeline& stream) = 0;
  /// Makes later work on waiter wait until the stream with id stream_id completed position.
  virtual void order_after(const stream_timeline& waiter, std::uint64_t stream_id,
                           std::uint64_t position) = 0;
};

}  // namespace soma::detail
