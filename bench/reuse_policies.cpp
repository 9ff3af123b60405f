// reuse_policies_bench: the 8 combinations of the S11 reuse policies (follow event
// dependencies, opportunistic, internal dependencies) on the same workload, in the same
// process and run, plus the system allocator as a reference.
//
// Workload: a 4-stage pipeline over 4 streams. Item k is allocated on stream 0 (sizes 4 KiB to
// 4 MiB, log-uniform, the same sequence for every configuration), worked on by a host task
// standing for a kernel (it touches the first 16 KiB and spins a few microseconds), handed to
// streams 1, 2 and 3 in turn through an event each (record on the producer, wait on the
// consumer, a kernel there), and freed on stream 3; an event recorded on stream 3 after the
// free is the credit that stream 0 waits on before item k + depth (back pressure, depth 4).
// So every reuse crosses streams: stream 0 allocates what stream 3 freed.
//   - follow event dependencies: stream 0's clock covers stream 3's frees through the credit
//     events, so those blocks are reused at once;
//   - opportunistic: blocks whose free has already run are reused, depending on timing;
//   - internal dependencies: when the pool is full (max size 64 MiB), a pending block is taken
//     with a wait inserted.
// With none of them, memory crosses streams only after a synchronize: the benchmark answers
// out-of-memory by synchronizing stream 3 and retrying (counted: "oom syncs").
// Two scenarios: the host enqueues everything at once and runs far ahead of the streams (frees
// are still pending when the allocations come), or the host is paced by 100 us of its own work
// per item (the streams catch up, so frees have often run by the next allocation).
// Each configuration runs 10 times (runs interleaved across configurations) on a fresh pool
// (release threshold UINT64_MAX) and fresh streams. Reported: items per second (wall time of
// the run, including the final drain), p50 and p99 of the somaMallocAsync call (all runs),
// peak reserved memory (somaMemPoolAttrReservedMemHigh) median and its spread min..max over
// the runs. The system row uses malloc on the host thread and free() in stream 3's last host
// task of the item (no reuse question arises; no pool, so no reserved figure).
//
// Usage: reuse_policies_bench [--quick]
#include <soma/soma.h>

#include "bench_support.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;
constexpr int kStreams = 4;      // pipeline stages
constexpr int kCreditDepth = 4;  // items in flight before stream 0 waits on a credit
constexpr std::size_t kPoolMaxBytes = 64 * MiB;
constexpr std::size_t kTouchBytes = 16 * KiB;

struct settings {
  int items = 1500;
  int runs = 10;
  int kernel_spin_us = 5;
  int host_pause_us = 0;  // paced scenario: host work between items (the device catches up)
};

[[noreturn]] void fail(const char* what, somaError_t status) {
  std::fprintf(stderr, "reuse_policies_bench: %s failed: %s: %s\n", what, somaGetErrorName(status),
               somaGetLastErrorMessage());
  std::exit(1);
}

#define SOMA_BENCH_CHECK(call)                         \
  do {                                                 \
    const somaError_t soma_bench_status = (call);      \
    if (soma_bench_status != somaSuccess) [[unlikely]] \
      fail(#call, soma_bench_status);                  \
  } while (0)

struct policies {
  bool follow;
  bool opportunistic;
  bool internal;
};

std::string policy_label(policies p) {
  return std::string(p.follow ? "F" : "-") + (p.opportunistic ? "O" : "-") +
         (p.internal ? "I" : "-");
}

/// The same log-uniform sizes for every configuration and run.
std::vector<std::size_t> make_sizes(int count) {
  std::mt19937_64 random(20251201);
  std::uniform_real_distribution<double> exponent(std::log2(4.0 * KiB), std::log2(4.0 * MiB));
  std::vector<std::size_t> sizes;
  sizes.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i)
    sizes.push_back(static_cast<std::size_t>(std::exp2(exponent(random))));
  return sizes;
}

// ---- the kernel: host work standing for device work ----------------------------------------

struct kernel_arguments {
  void* pointer;
  std::size_t bytes;
  int spin_us;
  bool free_after;  // system allocator row: the last stage frees
};

void spin_for(int microseconds) {
  const clock_type::time_point until = clock_type::now() + std::chrono::microseconds(microseconds);
  while (clock_type::now() < until) {
  }
}

void run_kernel(void* user_data) {
  auto* arguments = static_cast<kernel_arguments*>(user_data);
  std::memset(arguments->pointer, 0x5a, std::min(arguments->bytes, kTouchBytes));
  spin_for(arguments->spin_us);
  if (arguments->free_after) std::free(arguments->pointer);
  delete arguments;
}

void launch_kernel(somaStream_t stream, void* pointer, std::size_t bytes, int spin_us,
                   bool free_after = false) {
  SOMA_BENCH_CHECK(somaLaunchHostFunc(stream, run_kernel,
                                      new kernel_arguments{pointer, bytes, spin_us, free_after}));
}

// ---- one run --------------------------------------------------------------------------------

struct run_result {
  double seconds = 0;
  std::uint64_t peak_reserved_bytes = 0;
  int oom_syncs = 0;
};

struct pipeline {
  somaStream_t streams[kStreams] = {};
  somaEvent_t handoff[kStreams - 1][kCreditDepth] = {};
  somaEvent_t credit[kCreditDepth] = {};

  pipeline() {
    for (somaStream_t& stream : streams) SOMA_BENCH_CHECK(somaStreamCreate(&stream));
    for (auto& row : handoff)
      for (somaEvent_t& event : row)
        SOMA_BENCH_CHECK(somaEventCreateWithFlags(&event, somaEventDisableTiming));
    for (somaEvent_t& event : credit)
      SOMA_BENCH_CHECK(somaEventCreateWithFlags(&event, somaEventDisableTiming));
  }
  ~pipeline() {
    for (somaStream_t stream : streams) (void)somaStreamSynchronize(stream);
    for (somaStream_t stream : streams) (void)somaStreamDestroy(stream);
    for (auto& row : handoff)
      for (somaEvent_t event : row) (void)somaEventDestroy(event);
    for (somaEvent_t event : credit) (void)somaEventDestroy(event);
  }

  /// Credit: stream 0 waits until item k - depth was freed on the last stream.
  void wait_credit(int item) {
    if (item >= kCreditDepth)
      SOMA_BENCH_CHECK(somaStreamWaitEvent(streams[0], credit[item % kCreditDepth], 0));
  }
  /// Hands the item down the stages, a kernel on each; returns the last stream.
  somaStream_t pass_down(int item, void* pointer, std::size_t bytes, int spin_us,
                         bool free_in_last_kernel) {
    for (int stage = 1; stage < kStreams; ++stage) {
      somaEvent_t event = handoff[stage - 1][item % kCreditDepth];
      SOMA_BENCH_CHECK(somaEventRecord(event, streams[stage - 1]));
      SOMA_BENCH_CHECK(somaStreamWaitEvent(streams[stage], event, 0));
      launch_kernel(streams[stage], pointer, bytes, spin_us,
                    free_in_last_kernel && stage == kStreams - 1);
    }
    return streams[kStreams - 1];
  }
  void give_credit(int item) {
    SOMA_BENCH_CHECK(somaEventRecord(credit[item % kCreditDepth], streams[kStreams - 1]));
  }
  void drain() {
    for (somaStream_t stream : streams) SOMA_BENCH_CHECK(somaStreamSynchronize(stream));
  }
};

run_result run_soma(const settings& config, policies p, const std::vector<std::size_t>& sizes,
                    std::vector<double>& malloc_ns) {
  somaMemPoolProps props{};
  props.allocType = somaMemAllocationTypePinned;
  props.location.type = somaMemLocationTypeDevice;
  props.location.id = 0;
  props.maxSize = kPoolMaxBytes;
  somaMemPool_t pool = nullptr;
  SOMA_BENCH_CHECK(somaMemPoolCreate(&pool, &props));
  std::uint64_t keep = UINT64_MAX;
  SOMA_BENCH_CHECK(somaMemPoolSetAttribute(pool, somaMemPoolAttrReleaseThreshold, &keep));
  int flag = p.follow;
  SOMA_BENCH_CHECK(somaMemPoolSetAttribute(pool, somaMemPoolReuseFollowEventDependencies, &flag));
  flag = p.opportunistic;
  SOMA_BENCH_CHECK(somaMemPoolSetAttribute(pool, somaMemPoolReuseAllowOpportunistic, &flag));
  flag = p.internal;
  SOMA_BENCH_CHECK(somaMemPoolSetAttribute(pool, somaMemPoolReuseAllowInternalDependencies, &flag));

  run_result result;
  {
    pipeline line;
    const clock_type::time_point start = clock_type::now();
    for (int item = 0; item < config.items; ++item) {
      const std::size_t bytes = sizes[static_cast<std::size_t>(item)];
      line.wait_credit(item);
      void* pointer = nullptr;
      for (int attempt = 0;; ++attempt) {
        const clock_type::time_point before = clock_type::now();
        const somaError_t status = somaMallocFromPoolAsync(&pointer, bytes, pool, line.streams[0]);
        const clock_type::time_point after = clock_type::now();
        if (status == somaSuccess) {
          malloc_ns.push_back(std::chrono::duration<double, std::nano>(after - before).count());
          break;
        }
        if (status != somaErrorMemoryAllocation || attempt == 2)
          fail("somaMallocFromPoolAsync", status);
        // Nothing may cross streams without proof: prove the last stage's frees, then retry.
        ++result.oom_syncs;
        SOMA_BENCH_CHECK(attempt == 0 ? somaStreamSynchronize(line.streams[kStreams - 1])
                                      : somaDeviceSynchronize());
      }
      launch_kernel(line.streams[0], pointer, bytes, config.kernel_spin_us);
      somaStream_t last = line.pass_down(item, pointer, bytes, config.kernel_spin_us, false);
      SOMA_BENCH_CHECK(somaFreeAsync(pointer, last));
      line.give_credit(item);
      if (config.host_pause_us > 0)
        std::this_thread::sleep_for(std::chrono::microseconds(config.host_pause_us));
    }
    line.drain();
    result.seconds = std::chrono::duration<double>(clock_type::now() - start).count();
  }
  SOMA_BENCH_CHECK(
      somaMemPoolGetAttribute(pool, somaMemPoolAttrReservedMemHigh, &result.peak_reserved_bytes));
  SOMA_BENCH_CHECK(somaMemPoolDestroy(pool));
  return result;
}

run_result run_system(const settings& config, const std::vector<std::size_t>& sizes,
                      std::vector<double>& malloc_ns) {
  run_result result;
  pipeline line;
  const clock_type::time_point start = clock_type::now();
  for (int item = 0; item < config.items; ++item) {
    const std::size_t bytes = sizes[static_cast<std::size_t>(item)];
    line.wait_credit(item);
    const clock_type::time_point before = clock_type::now();
    void* pointer = std::malloc(bytes);
    const clock_type::time_point after = clock_type::now();
    if (pointer == nullptr) {
      std::fprintf(stderr, "reuse_policies_bench: malloc(%zu) failed\n", bytes);
      std::exit(1);
    }
    malloc_ns.push_back(std::chrono::duration<double, std::nano>(after - before).count());
    launch_kernel(line.streams[0], pointer, bytes, config.kernel_spin_us);
    (void)line.pass_down(item, pointer, bytes, config.kernel_spin_us, /*free_in_last=*/true);
    line.give_credit(item);
    if (config.host_pause_us > 0)
      std::this_thread::sleep_for(std::chrono::microseconds(config.host_pause_us));
  }
  line.drain();
  result.seconds = std::chrono::duration<double>(clock_type::now() - start).count();
  return result;
}

// ---- report ---------------------------------------------------------------------------------

double percentile(std::vector<double> values, double fraction) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto index = static_cast<std::size_t>(fraction * static_cast<double>(values.size() - 1));
  return values[index];
}

struct configuration_result {
  std::string label;
  std::vector<double> items_per_second;
  std::vector<double> malloc_ns;
  std::vector<double> peak_mib;
  int oom_syncs = 0;
};

void print_machine(const settings& config) {
  const std::string date = soma_bench::utc_date_text();
  const char* backend = "?";
  SOMA_BENCH_CHECK(somaGetBackendName(&backend));
  int granularity_kib = 0;
  SOMA_BENCH_CHECK(
      somaDeviceGetAttribute(&granularity_kib, somaDevAttrAllocationGranularityKiB, 0));
  std::printf("reuse_policies_bench — S11 reuse policies on a %d-stage pipeline\n", kStreams);
  std::printf("date        %s\n", date.c_str());
  soma_bench::print_cpu_and_kernel();
  std::printf("compiler    %s%s\n", __VERSION__,
#ifdef NDEBUG
              ", NDEBUG"
#else
              ", assertions ON (not a release build: figures are pessimistic)"
#endif
  );
  std::printf("soma        backend %s, granularity %d KiB, pool max size %zu MiB\n", backend,
              granularity_kib, kPoolMaxBytes / MiB);
  std::printf(
      "workload    %d items of 4 KiB..4 MiB (log-uniform), %d streams, credit depth %d,\n"
      "            kernels touch %zu KiB and spin %d us; %d runs per configuration\n\n",
      config.items, kStreams, kCreditDepth, kTouchBytes / KiB, config.kernel_spin_us, config.runs);
}

void print_table(const std::vector<configuration_result>& results) {
  const double default_throughput = percentile(results.back().items_per_second, 0.5);
  std::printf("%-8s %11s %8s %10s %10s %11s %19s %9s\n", "policies", "items/s", "vs FOI",
              "malloc p50", "malloc p99", "peak MiB", "peak min..max MiB", "oom syncs");
  std::printf("%s\n", std::string(93, '-').c_str());
  for (const configuration_result& r : results) {
    const double throughput = percentile(r.items_per_second, 0.5);
    char peak[32];
    char spread[32];
    char syncs[32];
    std::snprintf(peak, sizeof peak, "%.0f", percentile(r.peak_mib, 0.5));
    std::snprintf(spread, sizeof spread, "%.0f..%.0f",
                  *std::min_element(r.peak_mib.begin(), r.peak_mib.end()),
                  *std::max_element(r.peak_mib.begin(), r.peak_mib.end()));
    std::snprintf(syncs, sizeof syncs, "%.1f",
                  static_cast<double>(r.oom_syncs) / static_cast<double>(r.peak_mib.size()));
    std::printf("%-8s %11.0f %8.2f %8.0fns %8.0fns %11s %19s %9s\n", r.label.c_str(), throughput,
                throughput / default_throughput, percentile(r.malloc_ns, 0.5),
                percentile(r.malloc_ns, 0.99), peak, spread, syncs);
  }
}

}  // namespace

int main(int argc, char** argv) {
  settings config;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      config.items = 300;
      config.runs = 3;
    } else {
      std::fprintf(stderr, "usage: reuse_policies_bench [--quick]\n");
      return 2;
    }
  }
  print_machine(config);
  const std::vector<std::size_t> sizes = make_sizes(config.items);

  // All eight combinations, all-off first and the default (all on) last.
  std::vector<policies> combinations;
  for (int mask = 0; mask < 8; ++mask)
    combinations.push_back(policies{(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0});
  std::stable_sort(combinations.begin(), combinations.end(), [](policies a, policies b) {
    return (a.follow + a.opportunistic + a.internal) < (b.follow + b.opportunistic + b.internal);
  });

  // Warm-up (thread start-up, first commits), not reported.
  {
    std::vector<double> ignored;
    settings warm = config;
    warm.items = std::min(config.items, 100);
    (void)run_soma(warm, combinations.back(), sizes, ignored);
    (void)run_system(warm, sizes, ignored);
  }

  struct scenario {
    const char* name;
    int host_pause_us;
  };
  const scenario scenarios[] = {
      {"host runs ahead (enqueues everything at once; frees are still pending when the "
       "allocations come)",
       0},
      {"host paced (100 us of host work per item; the streams catch up between items)", 100},
  };
  for (const scenario& current : scenarios) {
    settings run_config = config;
    run_config.host_pause_us = current.host_pause_us;
    std::vector<configuration_result> results;
    for (policies p : combinations) results.push_back({policy_label(p)});
    configuration_result system_result{"system"};
    for (int run = 0; run < config.runs; ++run) {
      for (std::size_t i = 0; i < combinations.size(); ++i) {
        const run_result r = run_soma(run_config, combinations[i], sizes, results[i].malloc_ns);
        results[i].items_per_second.push_back(config.items / r.seconds);
        results[i].peak_mib.push_back(static_cast<double>(r.peak_reserved_bytes) / MiB);
        results[i].oom_syncs += r.oom_syncs;
      }
      const run_result r = run_system(run_config, sizes, system_result.malloc_ns);
      system_result.items_per_second.push_back(config.items / r.seconds);
    }
    std::printf("scenario: %s\n\n", current.name);
    print_table(results);  // the default (FOI) is last: the ratios divide by it
    std::printf(
        "system   %11.0f %8.2f %8.0fns %8.0fns   (malloc on the host, free() in the last "
        "stage's task)\n\n",
        percentile(system_result.items_per_second, 0.5),
        percentile(system_result.items_per_second, 0.5) /
            percentile(results.back().items_per_second, 0.5),
        percentile(system_result.malloc_ns, 0.5), percentile(system_result.malloc_ns, 0.99));
  }
  std::printf(
      "policies: F follow event dependencies, O opportunistic, I internal dependencies "
      "(- = off);\nFOI is the default. items/s: median over the runs; vs FOI: ratio to "
      "the default.\nmalloc p50/p99: one somaMallocFromPoolAsync (malloc for system), "
      "all runs.\npeak MiB: ReservedMemHigh, median and min..max over the runs. oom "
      "syncs: per run,\nsynchronizes the benchmark needed after an out-of-memory "
      "answer.\n");
  return 0;
}
