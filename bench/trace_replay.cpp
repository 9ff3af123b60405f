// trace_replay: replays an allocation trace (integrations/torch: SOMA_TORCH_TRACE) against
// soma's pool logic with synthetic memory, and prints what fragmentation cost: peak reserved
// over peak used. No GPU and no physical memory are needed, so PyTorch's allocation pattern
// recorded on a GPU machine can be studied and the pool tuned here.
//
//   trace_replay TRACE [--granularity BYTES] [--growth-step BYTES] [--partial-decommit]
//                [--compact]
//
// Defaults model the cuda backend on an H200: 2 MiB granules, commits in 32 MiB steps, whole
// commits released only, release threshold never reached (soma_torch's default). --compact
// models somaMemPoolAttrCompactBeforeGrowth as the runtime does it: the stream is synchronized
// (its frees proven), the pool trimmed to 0, the allocation retried; commits then go back by
// granule, as the cuda backend's granule commits allow.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_map>

#include "core/pool.hpp"
#include "core/memory_provider.hpp"
#include "core/synthetic_memory.hpp"
#include "core/stream_timeline.hpp"

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

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s TRACE [--granularity B] [--growth-step B] [--partial-decommit]\n",
                 argv[0]);
    return 2;
  }
  std::size_t granularity = std::size_t{2} << 20;
  std::size_t growth_step = std::size_t{32} << 20;
  bool partial = false;
  bool verbose = false;
  bool compact = false;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--granularity") == 0 && i + 1 < argc)
      granularity = parse_size(argv[++i]);
    else if (std::strcmp(argv[i], "--growth-step") == 0 && i + 1 < argc)
      growth_step = parse_size(argv[++i]);
    else if (std::strcmp(argv[i], "--partial-decommit") == 0)
      partial = true;
    else if (std::strcmp(argv[i], "--verbose") == 0)
      verbose = true;
    else if (std::strcmp(argv[i], "--compact") == 0)
      compact = true;
  }
  std::ifstream trace(argv[1]);
  if (!trace) {
    std::fprintf(stderr, "trace_replay: cannot read %s\n", argv[1]);
    return 2;
  }
  auto memory = std::make_unique<synthetic_memory>(granularity, partial || compact);
  synthetic_memory* observed = memory.get();
  pool_config config;
  config.name = "replay";
  config.max_size_bytes = std::size_t{140} << 30;
  config.reservation_bytes = config.max_size_bytes * 2;
  config.growth_step_bytes = growth_step;
  pool replayed(config, std::move(memory));
  replayed.set_release_threshold_bytes(UINT64_MAX);
  replayed.set_compact_before_growth(compact);
  stream_timeline stream(0);
  replay_hooks hooks(stream, verbose);

  std::unordered_map<std::uint64_t, block*> live;
  std::size_t events = 0;
  std::string kind;
  std::uint64_t id = 0;
  std::size_t bytes = 0;
  while (trace >> kind >> id) {
    ++events;
    if (kind == "a") {
      trace >> bytes;
      if (bytes == 0) continue;
      if (verbose) {
        const pool_statistics now = replayed.statistics();
        std::printf("event %zu: allocate %zu (%.1f MiB), used %.3f GiB, reserved %.3f GiB\n",
                    events, bytes, static_cast<double>(bytes) / (1 << 20),
                    static_cast<double>(now.used_bytes) / (1 << 30),
                    static_cast<double>(now.reserved_bytes) / (1 << 30));
      }
      result<block*> made = replayed.allocate(bytes, stream, &hooks);
      if (!made.ok()) {
        std::fprintf(stderr, "trace_replay: event %zu: %s\n", events,
                     made.error().message().c_str());
        return 1;
      }
      live[id] = made.value();
    } else if (kind == "f") {
      auto found = live.find(id);
      if (found == live.end()) continue;
      replayed.free(found->second, stream);
      live.erase(found);
    }
  }
  const pool_statistics s = replayed.statistics();
  std::printf("trace %s: %zu events, granularity %zu KiB, growth step %zu MiB, %s release\n",
              argv[1], events, granularity >> 10, growth_step >> 20,
              partial ? "granule" : "whole-commit");
  std::printf("compactions %zu (each a stream synchronize on the GPU)\n", hooks.compactions);
  std::printf("peak used %.3f GiB, peak reserved %.3f GiB, reserved/used %.3f; %zu commits\n",
              static_cast<double>(s.used_high_bytes) / (1 << 30),
              static_cast<double>(s.reserved_high_bytes) / (1 << 30),
              static_cast<double>(s.reserved_high_bytes) / static_cast<double>(s.used_high_bytes),
              observed->commits());
  for (auto& [unused, b] : live) replayed.free(b, stream);
  return 0;
}
