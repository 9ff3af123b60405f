// trace_replay: replays an allocation trace (integrations/torch: SOMA_TORCH_TRACE) against
// soma's pool logic with synthetic memory, and prints what fragmentation cost: peak reserved
// over peak used. No GPU and no physical memory are needed, so PyTorch's allocation pattern
// recorded on a GPU machine can be studied and the pool tuned here.
//
//   trace_replay TRACE [--granularity BYTES] [--growth-step BYTES] [--partial-decommit]
//                [--compact] [--no-remap] [--frees-at-one-point] [--max-ratio R]
//                [--passes N] [--sync-passes] [--show-remaps] [--show-growths]
//                [--complete-lag N]
//
// --passes N replays the trace N times on one pool, as a training loop goes on, keeping what the
// first pass left live (the weights), and prints each pass's remaps and the peak so far: a pool
// that has settled remaps nothing in later passes, and its peak stays. --sync-passes instead frees
// everything between passes and synchronizes the stream, as bench/trace_calls does on a real
// backend: each later pass starts from memory proven free. --show-remaps prints the event, size
// and pool state of every allocation that remapped; --show-growths, of every allocation that grew
// the pool, with the free memory it found (blocks, pending bytes, the largest, whole granules)
// and what it would have grown by had remaps also taken the free ends of partly used granules;
// with --passes, each pass's growth and the sum of those bounds. --complete-lag N has each free's
// work complete N trace events after the free, as a device catching up with its stream: a remap's
// old addresses are then unmapped at a later remap, as on cuda, and their address space serves
// again (without it nothing completes before a pass ends, and old addresses stay out of use).
// Defaults model the cuda backend on an H200 under soma_torch: 2 MiB granules, commits in
// 32 MiB steps, release threshold never reached; by default with remapping before growth
// (somaMemPoolAttrRemapFreeMemory = 1; the pool then commits granule by granule). --compact models
// somaMemPoolAttrCompactBeforeGrowth as the runtime does it: the stream is synchronized (its frees
// proven), the pool trimmed to 0, the allocation retried. The same trace is also replayed with
// neither and with compaction alone, side by side: remaps, bytes remapped, and the synchronizes
// remapping avoids.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/pool.hpp"
#include "core/memory_provider.hpp"
#include "core/synthetic_memory.hpp"
#include "core/stream_timeline.hpp"
#include "torch_trace.hpp"

namespace {

using namespace soma::detail;

std::size_t parse_size(const char* text) { return std::strtoull(text, nullptr, 0); }

}  // namespace

// What the runtime does when the pool asks: a synchronize of the one stream proves its frees
// (compaction before growth); there is no other stream to order after.
class replay_hooks final : public soma::detail::stream_hooks {
 public:
  replay_hooks(stream_timeline& stream, bool verbose) : stream_(stream), verbose_(verbose) {}
  bool synchronize(const stream_timeline&) override {
    ++compactions;
    if (verbose_) std::printf("compaction (a stream synchronize on the GPU)\n");
    const std::uint64_t position = stream_.note_enqueued();
    stream_.note_completed(position);
    stream_.prove_completed(position);
    return true;
  }
  void order_after(const stream_timeline&, std::uint64_t, std::uint64_t) override {}
  std::size_t compactions = 0;

 private:
  stream_timeline& stream_;
  bool verbose_;
};

struct replay_figures {
  pool_statistics stats;
  remap_statistics remapped;
  std::size_t compactions = 0;
  std::size_t commits = 0;
  bool ok = true;
};

struct replay_options {
  std::size_t granularity = std::size_t{2} << 20;
  std::size_t growth_step = std::size_t{32} << 20;
  bool partial = false;
  bool verbose = false;
  bool compact = false;
  bool remap = true;
  bool position_per_free = true;
  bool show_remaps = false;
  bool show_growths = false;
  bool sync_passes = false;
  int passes = 1;
  std::size_t complete_lag = 0;  // --complete-lag: 0, nothing completes during a pass
};

// --show-growths: a pass's growth, and the sum of each growth's bound below.
struct growth_tally {
  std::size_t grew_bytes = 0;
  std::size_t bound_bytes = 0;
};

// --show-growths: the free memory a growth found, to tell fragmentation from need, and what the
// growth would have been had a remap also taken the free ends of partly used granules (mapping
// such a granule again, its used part unused at the new address): an upper bound on that
// design's saving at this one allocation, the rest of the pool as it stood.
void print_growth(const pool_snapshot& before, const pool& replayed, std::size_t event,
                  std::size_t bytes, std::size_t granularity, growth_tally& tally) {
  std::size_t free_bytes = 0, pieces = 0, largest = 0, granules = 0, pending = 0;
  // The largest free top of a granule whose bottom is taken, and free bottom of one whose top
  // is: a remap could start its range with the one and end it with the other.
  std::size_t top_piece = 0, bottom_piece = 0;
  for (const block_view& b : before.blocks) {
    if (b.what == block_view::state::live) continue;
    if (b.what == block_view::state::pending) pending += b.size_bytes;
    free_bytes += b.size_bytes;
    ++pieces;
    largest = std::max(largest, b.size_bytes);
    const std::uintptr_t end = b.address + b.size_bytes;
    const std::uintptr_t from = (b.address + granularity - 1) / granularity * granularity;
    const std::uintptr_t to = end / granularity * granularity;
    if (to > from) granules += (to - from) / granularity;
    if (from <= end) top_piece = std::max<std::size_t>(top_piece, from - b.address);
    if (to >= b.address) bottom_piece = std::max<std::size_t>(bottom_piece, end - to);
  }
  const std::size_t grew = replayed.statistics().reserved_bytes - before.reserved_bytes;
  // Large requests only: small ones grow granules of their own (serves_small_apart).
  std::size_t bound = grew;
  if (bytes > granularity / 2) {
    const std::size_t pieces_bytes = top_piece + bottom_piece;
    const std::size_t rest = bytes > pieces_bytes ? bytes - pieces_bytes : 0;
    const std::size_t rest_granules = (rest + granularity - 1) / granularity;
    bound = std::min(grew, rest_granules > granules ? (rest_granules - granules) * granularity : 0);
  }
  tally.grew_bytes += grew;
  tally.bound_bytes += bound;
  constexpr double mib = 1 << 20;
  constexpr double gib = 1 << 30;
  std::printf(
      "event %zu: allocate %.2f MiB grew by %.1f MiB; used %.3f GiB, reserved %.3f GiB; free "
      "%.1f MiB in %zu blocks (%.1f MiB pending), the largest %.1f MiB, %zu whole granules in "
      "them; %.1f MiB with partly used granules' free ends\n",
      event, static_cast<double>(bytes) / mib, static_cast<double>(grew) / mib,
      static_cast<double>(before.used_bytes) / gib,
      static_cast<double>(before.reserved_bytes) / gib, static_cast<double>(free_bytes) / mib,
      pieces, static_cast<double>(pending) / mib, static_cast<double>(largest) / mib, granules,
      static_cast<double>(bound) / mib);
}

// One pass over the trace ("a ID BYTES" allocates, "f ID" frees) on one stream.
replay_figures replay(const std::vector<soma_bench::trace_event>& trace, const replay_options& o) {
  replay_figures out;
  // Remapping and compaction take memory back granule by granule, as the cuda backend's
  // granule commits allow (a pool that keeps memory commits so when remapping is on).
  auto memory =
      std::make_unique<synthetic_memory>(o.granularity, o.partial || o.compact || o.remap);
  synthetic_memory* observed = memory.get();
  pool_config config;
  config.name = "replay";
  config.max_size_bytes = std::size_t{140} << 30;
  config.reservation_bytes = config.max_size_bytes * 2;
  config.growth_step_bytes = o.growth_step;
  pool replayed(config, std::move(memory));
  replayed.set_release_threshold_bytes(UINT64_MAX);
  replayed.set_compact_before_growth(o.compact);
  replayed.set_remap_free_memory(o.remap ? remap_mode::before_growth : remap_mode::never);
  stream_timeline stream(0);
  replay_hooks hooks(stream, o.verbose);

  std::unordered_map<std::uint64_t, block*> live;
  std::size_t events = 0;
  // Further passes replay the trace again on the same pool, as a training loop runs on: a pool
  // that has settled remaps nothing in them. What the first pass left live (the model's weights
  // and the optimizer's state) stays, and its allocation and free are skipped.
  std::unordered_set<std::uint64_t> kept;
  growth_tally grown;  // --show-growths, this pass
  // --complete-lag: each free's position and the event it was made at, oldest first.
  std::deque<std::pair<std::size_t, std::uint64_t>> frees_running;
  for (int pass = 0; pass < o.passes && out.ok; ++pass) {
    if (pass > 0) {
      if (o.sync_passes) {
        // What bench/trace_calls does between passes: everything freed, the stream synchronized.
        for (auto& [unused, b] : live) replayed.free(b, stream);
        live.clear();
        const std::uint64_t position = stream.note_enqueued();
        stream.note_completed(position);
        stream.prove_completed(position);
        replayed.on_synchronize();
      } else {
        for (const auto& [kept_id, unused] : live) kept.insert(kept_id);
      }
    }
    const remap_statistics before_pass = replayed.remap_counts();
    for (const soma_bench::trace_event& e : trace) {
      ++events;
      while (!frees_running.empty() && frees_running.front().first + o.complete_lag <= events) {
        stream.note_completed(frees_running.front().second);
        frees_running.pop_front();
      }
      const std::uint64_t id = e.id;
      const std::size_t bytes = e.bytes;
      if (e.allocate) {
        if (bytes == 0 || kept.count(id) != 0) continue;
        if (o.verbose) {
          const pool_statistics now = replayed.statistics();
          std::printf("event %zu: allocate %zu (%.1f MiB), used %.3f GiB, reserved %.3f GiB\n",
                      events, bytes, static_cast<double>(bytes) / (1 << 20),
                      static_cast<double>(now.used_bytes) / (1 << 30),
                      static_cast<double>(now.reserved_bytes) / (1 << 30));
        }
        const std::uint64_t remaps_before = replayed.remap_counts().remaps;
        pool_snapshot before;
        if (o.show_growths) before = replayed.snapshot();
        result<block*> made = replayed.allocate(bytes, stream, &hooks);
        if (o.show_growths && made.ok() &&
            replayed.statistics().reserved_bytes > before.reserved_bytes)
          print_growth(before, replayed, events, bytes, o.granularity, grown);
        if (o.show_remaps && replayed.remap_counts().remaps != remaps_before) {
          const pool_statistics now = replayed.statistics();
          std::printf(
              "pass %d event %zu: allocate %.1f MiB remapped; used %.3f GiB, reserved %.3f "
              "GiB\n",
              pass + 1, events, static_cast<double>(bytes) / (1 << 20),
              static_cast<double>(now.used_bytes) / (1 << 30),
              static_cast<double>(now.reserved_bytes) / (1 << 30));
        }
        if (!made.ok()) {
          std::fprintf(stderr, "trace_replay: event %zu: %s\n", events,
                       made.error().message().c_str());
          out.ok = false;
          break;
        }
        live[id] = made.value();
      } else {
        auto found = live.find(id);
        if (found == live.end() || kept.count(id) != 0) continue;
        // On cuda every free on a native stream is a point of its own (S2): soma cannot see the
        // work enqueued around it, so it takes a position and nothing proves it complete.
        if (o.position_per_free) (void)stream.note_enqueued();
        replayed.free(found->second, stream);
        if (o.complete_lag != 0) frees_running.emplace_back(events, stream.enqueued_position());
        live.erase(found);
      }
    }
    if (o.passes > 1 && o.remap) {
      const remap_statistics after_pass = replayed.remap_counts();
      const pool_statistics now = replayed.statistics();
      std::printf(
          "pass %d: %llu remaps (%llu granules); peak reserved %.3f GiB, %.3f over peak used\n",
          pass + 1, static_cast<unsigned long long>(after_pass.remaps - before_pass.remaps),
          static_cast<unsigned long long>((after_pass.remapped_bytes - before_pass.remapped_bytes) /
                                          o.granularity),
          static_cast<double>(now.reserved_high_bytes) / (1 << 30),
          static_cast<double>(now.reserved_high_bytes) / static_cast<double>(now.used_high_bytes));
      if (o.show_growths) {
        std::printf(
            "pass %d: grew %.1f MiB; with partly used granules' free ends, each growth on its own, "
            "%.1f MiB\n",
            pass + 1, static_cast<double>(grown.grew_bytes) / (1 << 20),
            static_cast<double>(grown.bound_bytes) / (1 << 20));
        grown = {};
      }
    }
  }
  out.stats = replayed.statistics();
  out.compactions = hooks.compactions;
  out.commits = observed->commits();
  for (auto& [unused, b] : live) replayed.free(b, stream);
  const std::uint64_t position = stream.note_enqueued();
  stream.note_completed(position);
  stream.prove_completed(position);
  // Every free is complete now: the old addresses of remapped memory go (trim keeps the rest),
  // and the pool's counts include their unmaps.
  replayed.trim_to(SIZE_MAX);
  out.remapped = replayed.remap_counts();
  return out;
}

void print(const char* label, const replay_figures& f) {
  std::printf(
      "%-26s peak used %.3f GiB, peak reserved %.3f GiB, reserved/used %.3f; %zu commits, "
      "%llu remaps (%.3f GiB), %zu compactions\n",
      label, static_cast<double>(f.stats.used_high_bytes) / (1 << 30),
      static_cast<double>(f.stats.reserved_high_bytes) / (1 << 30),
      static_cast<double>(f.stats.reserved_high_bytes) /
          static_cast<double>(f.stats.used_high_bytes),
      f.commits, static_cast<unsigned long long>(f.remapped.remaps),
      static_cast<double>(f.remapped.remapped_bytes) / (1 << 30), f.compactions);
}

int main(int argc, char** argv) {
  auto usage = [&] {
    std::fprintf(stderr,
                 "usage: %s TRACE [--granularity B] [--growth-step B] [--partial-decommit] "
                 "[--compact] [--no-remap] [--frees-at-one-point] [--max-ratio R] [--max-remaps N] "
                 "[--max-remapped-granules N] [--passes N] [--sync-passes] [--show-remaps] "
                 "[--show-growths] [--complete-lag N] [--verbose]\n",
                 argv[0]);
    return 2;
  };
  if (argc < 2 || std::strncmp(argv[1], "--", 2) == 0) return usage();
  replay_options o;
  double max_ratio = 0;       // 0: no check
  long long max_remaps = -1;  // -1: no check
  long long max_remapped_granules = -1;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--granularity") == 0 && i + 1 < argc)
      o.granularity = parse_size(argv[++i]);
    else if (std::strcmp(argv[i], "--growth-step") == 0 && i + 1 < argc)
      o.growth_step = parse_size(argv[++i]);
    else if (std::strcmp(argv[i], "--partial-decommit") == 0)
      o.partial = true;
    else if (std::strcmp(argv[i], "--verbose") == 0)
      o.verbose = true;
    else if (std::strcmp(argv[i], "--show-remaps") == 0)
      o.show_remaps = true;
    else if (std::strcmp(argv[i], "--show-growths") == 0)
      o.show_growths = true;
    else if (std::strcmp(argv[i], "--sync-passes") == 0)
      o.sync_passes = true;
    else if (std::strcmp(argv[i], "--passes") == 0 && i + 1 < argc)
      o.passes = std::max(1, std::atoi(argv[++i]));
    else if (std::strcmp(argv[i], "--compact") == 0)
      o.compact = true;
    else if (std::strcmp(argv[i], "--no-remap") == 0)
      o.remap = false;
    else if (std::strcmp(argv[i], "--complete-lag") == 0 && i + 1 < argc)
      o.complete_lag = parse_size(argv[++i]);
    else if (std::strcmp(argv[i], "--frees-at-one-point") == 0)
      o.position_per_free = false;
    else if (std::strcmp(argv[i], "--max-remaps") == 0 && i + 1 < argc)
      max_remaps = std::strtoll(argv[++i], nullptr, 10);
    else if (std::strcmp(argv[i], "--max-remapped-granules") == 0 && i + 1 < argc)
      max_remapped_granules = std::strtoll(argv[++i], nullptr, 10);
    else if (std::strcmp(argv[i], "--max-ratio") == 0 && i + 1 < argc)
      max_ratio = std::strtod(argv[++i], nullptr);
    else
      return usage();
  }
  const std::vector<soma_bench::trace_event> trace =
      soma_bench::read_torch_trace(argv[1], "trace_replay");
  std::printf("trace %s: granularity %zu KiB, growth step %zu MiB\n", argv[1], o.granularity >> 10,
              o.growth_step >> 20);
  const replay_figures asked = replay(trace, o);
  print(o.remap ? (o.compact ? "remap + compaction:" : "remap before growth:")
                : (o.compact ? "compaction:" : "neither:"),
        asked);
  // Side by side: the same trace with neither, and with compaction alone, whose compactions are
  // the synchronizes remapping avoids.
  replay_options neither = o;
  neither.remap = false;
  neither.compact = false;
  replay_options compaction = neither;
  compaction.compact = true;
  const replay_figures plain = replay(trace, neither);
  const replay_figures compacted = replay(trace, compaction);
  print("neither:", plain);
  print("compaction alone:", compacted);
  if (o.remap && !o.compact) {
    std::printf(
        "remapping: %llu remaps, %.3f GiB remapped, %.3f GiB kept in place (top blocks "
        "extended), %zu synchronizes avoided (compaction's); "
        "old addresses: %zu granules in %llu ranges, unmapped in %llu calls once every free "
        "completed\n",
        static_cast<unsigned long long>(asked.remapped.remaps),
        static_cast<double>(asked.remapped.remapped_bytes) / (1 << 30),
        static_cast<double>(asked.remapped.kept_in_place_bytes) / (1 << 30), compacted.compactions,
        static_cast<std::size_t>(asked.remapped.remapped_bytes / o.granularity),
        static_cast<unsigned long long>(asked.remapped.retired_ranges),
        static_cast<unsigned long long>(asked.remapped.unmap_calls));
  }
  if (!(asked.ok && plain.ok && compacted.ok)) return 1;
  // A memory check (CTest bench.trace_replay.*): the replay is deterministic, so peak reserved
  // over peak used is a figure of the pool logic alone, and a change that fragments more shows.
  const double ratio = static_cast<double>(asked.stats.reserved_high_bytes) /
                       static_cast<double>(asked.stats.used_high_bytes);
  if (max_ratio > 0 && !(ratio <= max_ratio)) {  // a ratio of nothing (nan) fails too
    std::printf("FAILED: reserved/used %.4f is above %.4f\n", ratio, max_ratio);
    return 3;
  }
  if (max_ratio > 0) std::printf("reserved/used %.4f is within %.4f\n", ratio, max_ratio);
  // Remapping costs driver calls per granule on a GPU: a change that makes the pool remap again
  // and again (every step of a training loop) shows here.
  if (max_remaps >= 0 && asked.remapped.remaps > static_cast<unsigned long long>(max_remaps)) {
    std::printf("FAILED: %llu remaps, more than %lld\n",
                static_cast<unsigned long long>(asked.remapped.remaps), max_remaps);
    return 3;
  }
  if (max_remaps >= 0) {
    std::printf("%llu remaps, at most %lld\n",
                static_cast<unsigned long long>(asked.remapped.remaps), max_remaps);
  }
  // Each granule mapped again is a map, an access grant and later an unmap on a GPU: the bytes
  // remapped are the cost, more than the number of remaps.
  const auto remapped_granules =
      static_cast<long long>(asked.remapped.remapped_bytes / o.granularity);
  if (max_remapped_granules >= 0 && remapped_granules > max_remapped_granules) {
    std::printf("FAILED: %lld granules remapped, more than %lld\n", remapped_granules,
                max_remapped_granules);
    return 3;
  }
  if (max_remapped_granules >= 0)
    std::printf("%lld granules remapped, at most %lld\n", remapped_granules, max_remapped_granules);
  return 0;
}
