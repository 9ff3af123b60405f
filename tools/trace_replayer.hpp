// Replays a recorded trace on soma's pool logic with synthetic memory (core/synthetic_memory):
// the same allocations and frees, on the same streams, at the same synchronizes, under the
// recorded settings or others. What the GPU had completed when is not in the trace; the replay
// learns it from the rule that served each recorded allocation (a free another stream's
// allocation reused had completed, was proven, or was waited for), and otherwise counts a free
// complete once a synchronize proved it.
#ifndef SOMA_TOOLS_TRACE_REPLAYER_HPP
#define SOMA_TOOLS_TRACE_REPLAYER_HPP

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "recorded_trace.hpp"

namespace soma::tools {

/// Settings that replace the recorded ones in every pool (unset: as recorded).
struct replay_settings {
  std::string label = "recorded settings";
  std::optional<std::uint64_t> release_threshold_bytes;
  std::optional<bool> follow_event_dependencies;
  std::optional<bool> opportunistic;
  std::optional<bool> internal_dependencies;
  std::optional<bool> compact_before_growth;
  std::optional<int> remap_free_memory;  ///< 0, 1 or 2 (somaMemPoolAttrRemapFreeMemory)
};

/// Parses "threshold=0,internal=0,compact=1" (keys threshold, follow, opportunistic, internal,
/// compact, remap; threshold takes bytes, K/M/G, or max). False with the reason in *error.
bool parse_replay_settings(const std::string& text, replay_settings* out, std::string* error);

struct replay_outcome {
  std::uint64_t peak_reserved_bytes = 0;  ///< over the replayed pools
  std::uint64_t peak_used_bytes = 0;
  std::size_t waits = 0;           ///< orderings the pools inserted (internal dependencies)
  std::size_t synchronizes = 0;    ///< recorded synchronizes, plus compaction's
  std::size_t failures = 0;        ///< allocations refused
  std::size_t skipped_events = 0;  ///< of pools the trace has no settings for
  std::uint64_t remaps = 0;        ///< allocations served by remapping free granules
  std::uint64_t remapped_bytes = 0;
};

replay_outcome replay_trace(const recorded_trace& trace, const replay_settings& settings);

}  // namespace soma::tools

#endif  // SOMA_TOOLS_TRACE_REPLAYER_HPP
