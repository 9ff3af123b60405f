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

/// The trace of events (oldest first); dropped and capacity go into its otherData.
std::string chrome_trace_json(const std::vector<history_event>& events, std::uint64_t dropped,
                              std::size_t capacity, const history_labels& labels);

}  // namespace soma::detail
