// `soma replay TRACE [--try SETTINGS]...`: replays a memory-history trace on the pool logic
// with synthetic memory, under the recorded settings and each --try, and prints side by side
// what each would have held and done: peak reserved and used memory, inserted waits,
// synchronizes and failed allocations.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "commands.hpp"
#include "recorded_trace.hpp"
#include "trace_replayer.hpp"

namespace soma::tools {
namespace {

constexpr const char* usage =
    "usage: soma replay TRACE.json [--try SETTINGS]...\n"
    "  SETTINGS: comma-separated threshold=SIZE|max, follow=0|1, opportunistic=0|1,\n"
    "            internal=0|1, compact=0|1, remap=0|1|2 (for every pool; the rest as recorded)\n";

struct column {
  std::string label;
  std::uint64_t peak_reserved = 0;
  std::uint64_t peak_used = 0;
  std::size_t waits = 0;
  std::size_t synchronizes = 0;
  std::size_t failures = 0;
  std::uint64_t remaps = 0;
  std::uint64_t remapped_bytes = 0;
};

column recorded_column(const recorded_trace& trace) {
  column c;
  c.label = "recorded";
  for (const auto& [pool, peak] : trace.peak_reserved_bytes) c.peak_reserved += peak;
  for (const recorded_event& e : trace.events) {
    using k = recorded_event::kind;
    c.waits += e.what == k::wait ? 1 : 0;
    c.synchronizes += e.what == k::synchronize || e.what == k::compaction ? 1 : 0;
    c.failures += e.what == k::out_of_memory ? 1 : 0;
    c.remaps += e.reuse == "remap" ? 1 : 0;
  }
  return c;
}

void print_row(const char* what, const std::vector<column>& columns,
               std::string (*cell)(const column&)) {
  std::printf("%-16s", what);
  for (const column& c : columns) std::printf(" %22s", cell(c).c_str());
  std::printf("\n");
}

void print_settings(const recorded_trace& trace) {
  for (const recorded_pool& p : trace.pools) {
    std::printf(
        "  %s: release threshold %s, follow %d, opportunistic %d, internal %d, compact %d, "
        "remap %d, granularity %s, growth step %s\n",
        p.name.c_str(), format_bytes(p.release_threshold_bytes).c_str(),
        p.follow_event_dependencies ? 1 : 0, p.opportunistic ? 1 : 0,
        p.internal_dependencies ? 1 : 0, p.compact_before_growth ? 1 : 0, p.remap_free_memory,
        format_bytes(p.granularity_bytes).c_str(), format_bytes(p.growth_step_bytes).c_str());
  }
}

}  // namespace

int run_replay(int argc, char** argv) {
  std::string path;
  std::vector<replay_settings> tries{replay_settings{}};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--try") == 0 && i + 1 < argc) {
      replay_settings s;
      std::string error;
      if (!parse_replay_settings(argv[++i], &s, &error)) {
        std::fprintf(stderr, "soma replay: --try %s: %s\n%s", argv[i], error.c_str(), usage);
        return 2;
      }
      tries.push_back(s);
    } else if (path.empty() && argv[i][0] != '-') {
      path = argv[i];
    } else {
      std::fprintf(stderr, "soma replay: unexpected argument '%s'\n%s", argv[i], usage);
      return 2;
    }
  }
  if (path.empty()) {
    std::fputs(usage, stderr);
    return 2;
  }
  std::string text;
  if (!read_whole_file("replay", path, &text)) return 1;
  recorded_trace trace;
  std::string error;
  if (!read_recorded_trace(text, &trace, &error)) {
    std::fprintf(stderr, "soma replay: '%s': %s\n", path.c_str(), error.c_str());
    return 1;
  }
  std::printf("soma replay: %s: %zu events on the %s backend, %zu pool(s) with settings:\n",
              path.c_str(), trace.events.size(), trace.backend.c_str(), trace.pools.size());
  print_settings(trace);

  std::vector<column> columns{recorded_column(trace)};
  std::size_t skipped = 0;
  for (const replay_settings& s : tries) {
    const replay_outcome o = replay_trace(trace, s);
    columns.push_back({s.label, o.peak_reserved_bytes, o.peak_used_bytes, o.waits, o.synchronizes,
                       o.failures, o.remaps, o.remapped_bytes});
    skipped = o.skipped_events;
  }
  std::printf("\n%-16s", "");
  for (const column& c : columns) std::printf(" %22s", c.label.c_str());
  std::printf("\n");
  print_row("peak reserved", columns,
            [](const column& c) { return format_bytes(c.peak_reserved); });
  print_row("peak used", columns, [](const column& c) {
    return c.label == "recorded" ? std::string("-") : format_bytes(c.peak_used);
  });
  print_row("waits inserted", columns, [](const column& c) { return std::to_string(c.waits); });
  print_row("synchronizes", columns,
            [](const column& c) { return std::to_string(c.synchronizes); });
  print_row("failures", columns, [](const column& c) { return std::to_string(c.failures); });
  print_row("remaps", columns, [](const column& c) { return std::to_string(c.remaps); });
  print_row("bytes remapped", columns, [](const column& c) {
    return c.label == "recorded" ? std::string("-") : format_bytes(c.remapped_bytes);
  });

  const bool same = columns[0].peak_reserved == columns[1].peak_reserved;
  std::printf("\nreplay with the recorded settings %s the recorded peak (%s)\n",
              same ? "reproduces" : "does not reproduce",
              format_bytes(columns[1].peak_reserved).c_str());
  if (trace.dropped_events != 0 || skipped != 0) {
    std::printf(
        "note: the ring dropped %llu older events and %zu events name pools without "
        "settings (destroyed before the export); record from the start "
        "(SOMA_HISTORY) for an exact replay\n",
        static_cast<unsigned long long>(trace.dropped_events), skipped);
  }
  return 0;
}

}  // namespace soma::tools
