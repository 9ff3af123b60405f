// A memory-history trace (somaMemHistoryExportTrace) read back: its events in time order with
// their streams and pools, and the pools' settings at export. What `soma replay` replays.
#ifndef SOMA_TOOLS_RECORDED_TRACE_HPP
#define SOMA_TOOLS_RECORDED_TRACE_HPP

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace soma::tools {

struct recorded_event {
  enum class kind {
    allocate,
    free,
    wait,
    grow,
    release,
    trim,
    compaction,
    synchronize,
    out_of_memory,
    settings,
    other
  };
  kind what = kind::other;
  int device = 0;
  int track = 0;       ///< the trace's tid: 0 the device's pools track, else a stream's
  std::string stream;  ///< the track's name ("stream 0x...", "default stream")
  std::string pool;    ///< the pool's name, as the trace gives it
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
  std::string reuse;     ///< allocate: the rule that served it
  std::string name;      ///< the event's name (synchronize: which kind)
  std::string settings;  ///< settings: "threshold=...,follow=1,..."
};

struct recorded_pool {
  std::string name;
  int device = 0;
  std::uint64_t granularity_bytes = 0;
  std::uint64_t max_size_bytes = 0;
  std::uint64_t growth_step_bytes = 0;
  std::uint64_t release_threshold_bytes = 0;
  bool follow_event_dependencies = true;
  bool opportunistic = true;
  bool internal_dependencies = true;
  bool compact_before_growth = false;
  int remap_free_memory = 0;  ///< 0 never, 1 before growth, 2 instead of failing; older traces: 0
};

struct recorded_trace {
  std::vector<recorded_event> events;  ///< in time order
  std::vector<recorded_pool> pools;    ///< live at export, with their settings
  /// Each pool's highest reserved counter, by name (pools destroyed before the export too).
  std::map<std::string, std::uint64_t> peak_reserved_bytes;
  std::string backend;
  std::uint64_t dropped_events = 0;
};

/// The settings text of a settings event applied to pool (keys threshold, follow,
/// opportunistic, internal, compact, remap, granularity, max, growth); unknown keys are ignored.
void apply_recorded_settings(const std::string& text, recorded_pool* pool);

/// Reads a trace soma wrote; false with the reason in *error for anything else.
bool read_recorded_trace(const std::string& text, recorded_trace* out, std::string* error);

}  // namespace soma::tools

#endif  // SOMA_TOOLS_RECORDED_TRACE_HPP
