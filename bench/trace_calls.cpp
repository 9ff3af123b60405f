// trace_calls: what each call of a PyTorch allocation trace costs through the C API, on the backend
// soma picks (SOMA_BACKEND=cpu|cuda), with real memory. bench/trace_replay studies the same traces'
// memory on the pool logic alone; this program times the calls a training step makes, so the two
// backends can be compared on one host in one run (issue 14: a step within 1 % of PyTorch's own
// allocators).
//
//   trace_calls TRACE [--passes N] [--remap 0|1|2] [--per-remap]
//
// TRACE is a file of `a ID BYTES` and `f ID` lines (integrations/torch's SOMA_TORCH_TRACE; a .gz
// is read through gzip -dc; bench/torch_trace.hpp). The pool is soma_torch's: release threshold at
// the maximum, somaMemPoolAttrRemapFreeMemory 1 unless --remap says otherwise; one soma stream.
// Each pass replays the whole trace; what is still live at the end of a pass is freed outside the
// timing, so every pass starts from the same live set and later passes show the pool warm.
// --per-remap also times each allocation that remapped, apart (the remap count is read after every
// allocation, which adds that read to every call's figure): what one remap costs, and a MiB of it.
#include <soma/soma.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench_support.hpp"
#include "torch_trace.hpp"

namespace {

void check(somaError_t e, const char* what) {
  if (e != somaSuccess) {
    std::fprintf(stderr, "trace_calls: %s: %s\n", what, somaGetErrorString(e));
    std::exit(1);
  }
}

std::uint64_t attribute(somaMemPool_t pool, somaMemPoolAttr which) {
  std::uint64_t value = 0;
  check(somaMemPoolGetAttribute(pool, which, &value), "somaMemPoolGetAttribute");
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: trace_calls TRACE [--passes N] [--remap 0|1|2]\n");
    return 2;
  }
  const std::string path = argv[1];
  int passes = 3;
  int remap = 1;
  bool per_remap = false;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--passes") == 0 && i + 1 < argc) {
      passes = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--remap") == 0 && i + 1 < argc) {
      remap = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--per-remap") == 0) {
      per_remap = true;
    } else {
      std::fprintf(stderr, "usage: trace_calls TRACE [--passes N] [--remap 0|1|2] [--per-remap]\n");
      return 2;
    }
  }
  const std::vector<soma_bench::trace_event> events =
      soma_bench::read_torch_trace(path, "trace_calls");

  const char* backend = nullptr;
  check(somaGetBackendName(&backend), "somaGetBackendName");
  somaMemPoolProps props{};
  props.allocType = somaMemAllocationTypePinned;
  props.location.type = somaMemLocationTypeDevice;
  props.location.id = 0;
  somaMemPool_t pool = nullptr;
  check(somaMemPoolCreate(&pool, &props), "somaMemPoolCreate");
  std::uint64_t threshold = UINT64_MAX;
  check(somaMemPoolSetAttribute(pool, somaMemPoolAttrReleaseThreshold, &threshold),
        "release threshold");
  check(somaMemPoolSetAttribute(pool, somaMemPoolAttrRemapFreeMemory, &remap), "remap");
  somaStream_t stream = nullptr;
  check(somaStreamCreate(&stream), "somaStreamCreate");

  soma_bench::print_cpu_and_kernel();
  std::printf("trace_calls: %s, %zu events, backend %s, remap %d, %d passes\n", path.c_str(),
              events.size(), backend, remap, passes);
  std::printf("%-6s %12s %10s %10s %16s", "pass", "ns a call", "calls", "remaps", "peak reserved");
  if (per_remap) std::printf(" %14s %16s", "us a remap", "us a MiB moved");
  std::printf("\n");
  std::unordered_map<std::uint64_t, void*> live;
  live.reserve(events.size());
  for (int pass = 1; pass <= passes; ++pass) {
    const std::uint64_t remaps_before = attribute(pool, somaMemPoolAttrRemapCount);
    const std::uint64_t moved_before = attribute(pool, somaMemPoolAttrRemappedBytes);
    std::size_t calls = 0;
    double remap_seconds = 0;
    const auto start = std::chrono::steady_clock::now();
    for (const soma_bench::trace_event& e : events) {
      if (e.allocate) {
        if (e.bytes == 0) continue;
        void* p = nullptr;
        if (per_remap) {
          const std::uint64_t remaps = attribute(pool, somaMemPoolAttrRemapCount);
          const auto called = std::chrono::steady_clock::now();
          check(somaMallocFromPoolAsync(&p, e.bytes, pool, stream), "somaMallocFromPoolAsync");
          if (attribute(pool, somaMemPoolAttrRemapCount) != remaps)
            remap_seconds += soma_bench::seconds_since(called);
        } else {
          check(somaMallocFromPoolAsync(&p, e.bytes, pool, stream), "somaMallocFromPoolAsync");
        }
        live[e.id] = p;
      } else {
        auto found = live.find(e.id);
        if (found == live.end()) continue;
        check(somaFreeAsync(found->second, stream), "somaFreeAsync");
        live.erase(found);
      }
      ++calls;
    }
    const double seconds = soma_bench::seconds_since(start);
    for (const auto& [id, p] : live) check(somaFreeAsync(p, stream), "somaFreeAsync");
    live.clear();
    check(somaStreamSynchronize(stream), "somaStreamSynchronize");
    const std::uint64_t remaps = attribute(pool, somaMemPoolAttrRemapCount) - remaps_before;
    const double moved_mib =
        static_cast<double>(attribute(pool, somaMemPoolAttrRemappedBytes) - moved_before) /
        (1 << 20);
    std::printf("%-6d %12.1f %10zu %10llu %12.3f GiB", pass,
                seconds * 1e9 / static_cast<double>(calls), calls,
                static_cast<unsigned long long>(remaps),
                static_cast<double>(attribute(pool, somaMemPoolAttrReservedMemHigh)) / (1 << 30));
    if (per_remap && remaps > 0) {
      std::printf(" %14.1f %16.1f", remap_seconds * 1e6 / static_cast<double>(remaps),
                  moved_mib > 0 ? remap_seconds * 1e6 / moved_mib : 0.0);
    }
    std::printf("\n");
  }
  check(somaStreamDestroy(stream), "somaStreamDestroy");
  check(somaMemPoolDestroy(pool), "somaMemPoolDestroy");
  return 0;
}
