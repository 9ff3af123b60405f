// Memory history as Chrome trace-event JSON, which Perfetto (ui.perfetto.dev) and
// chrome://tracing open: a process per device, a track per stream with its allocations, frees
// and inserted waits, a "pools" track with growth, release and trims, and a counter per pool
// with its reserved and used bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/memory_history.hpp"

namespace soma::detail {

/// The texts the trace names events with.
class history_labels {
 public:
  virtual ~history_labels() = default;
  /// memory_history's label text.
  virtual std::string label(std::uint32_t id) const = 0;
  /// The pool with this serial, as messages name it.
  virtual std::string pool(std::uint32_t serial) const = 0;
};

/// A pool's settings at export, which `soma replay` starts from.
struct history_pool_settings {
  std::uint32_t serial = 0;
  int device = 0;
  std::size_t granularity_bytes = 0;
  std::size_t max_size_bytes = 0;
  std::size_t growth_step_bytes = 0;
  std::uint64_t release_threshold_bytes = 0;
  bool follow_event_dependencies = true;
  bool opportunistic = true;
  bool internal_dependencies = true;
  bool compact_before_growth = false;
  int remap_free_memory = 2;  ///< somaMemPoolAttrRemapFreeMemory
};

/// What goes into the trace's otherData besides the events.
struct history_context {
  std::uint64_t dropped = 0;                 ///< events the ring dropped
  std::size_t capacity = 0;                  ///< the ring's size
  std::string backend;                       ///< "cpu" or "cuda"
  std::vector<history_pool_settings> pools;  ///< the live pools
};

/// The trace of events (oldest first).
std::string chrome_trace_json(const std::vector<history_event>& events,
                              const history_context& context, const history_labels& labels);

}  // namespace soma::detail
