// alloc_pairs_bench: soma (whatever backend is active, normally cpu) against the system
// allocator (malloc/free), same scenarios, same process, same run; reports ns per
// alloc+free pair for each and the ratio soma/system.
//
// Scenarios (docs/targets.md):
//   pair        one allocation and its free on the same stream, per size
//   64 live     64 allocations, then their 64 frees; time per pair
//   threads     N threads, each with its own stream, pairs of 4 KiB; aggregate
//   threshold 0 64 MiB alloc + free + stream synchronize on a pool that keeps nothing
//   churn       a stream per request (create, wait on the main stream, allocate, free, the
//               main stream waits on it, destroy): time and heap per request late in a long
//               run against early in it (S2, S11: must stay flat)
// The warm scenarios run on the default pool with the release threshold at UINT64_MAX, after a
// warm-up and a synchronize, so that no synchronize cost is charged to the timed operations
// (S12). Each figure is the median of several timed trials.
//
// Usage: alloc_pairs_bench [--quick] [--churn]   (--churn: only the stream churn table)
#include <soma/soma.h>

#include "bench_support.hpp"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <malloc.h>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;
using soma_bench::median;
using soma_bench::seconds_since;
using soma_bench::size_name;

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;
constexpr int kLiveCount = 64;

struct settings {
  double trial_seconds = 0.05;
  int trials = 7;
};

[[noreturn]] void fail(const char* what, somaError_t status) {
  std::fprintf(stderr, "alloc_pairs_bench: %s failed: %s: %s\n", what, somaGetErrorName(status),
               somaGetLastErrorMessage());
  std::exit(1);
}

#define SOMA_BENCH_CHECK(call)                         \
  do {                                                 \
    const somaError_t soma_bench_status = (call);      \
    if (soma_bench_status != somaSuccess) [[unlikely]] \
      fail(#call, soma_bench_status);                  \
  } while (0)

// Keeps the compiler from removing a malloc/free pair whose pointer is otherwise unused.
inline void escape(void* ptr) { asm volatile("" : : "r"(ptr) : "memory"); }

// ---- the two allocators, behind the same three calls ------------------------------------

struct soma_allocator {
  static constexpr const char* name = "soma";
  somaStream_t stream;
  somaMemPool_t pool;  // nullptr: the stream device's current pool (somaMallocAsync)
  void* allocate(std::size_t bytes) {
    void* ptr = nullptr;
    const somaError_t status = pool == nullptr ? somaMallocAsync(&ptr, bytes, stream)
                                               : somaMallocFromPoolAsync(&ptr, bytes, pool, stream);
    if (status != somaSuccess) [[unlikely]]
      fail("somaMallocAsync", status);
    return ptr;
  }
  void deallocate(void* ptr) {
    const somaError_t status = somaFreeAsync(ptr, stream);
    if (status != somaSuccess) [[unlikely]]
      fail("somaFreeAsync", status);
  }
};

struct system_allocator {
  static constexpr const char* name = "system";
  void* allocate(std::size_t bytes) {
    void* ptr = std::malloc(bytes);
    if (ptr == nullptr) [[unlikely]] {
      std::fprintf(stderr, "alloc_pairs_bench: malloc(%zu) failed\n", bytes);
      std::exit(1);
    }
    return ptr;
  }
  void deallocate(void* ptr) { std::free(ptr); }
};

// ---- timing -------------------------------------------------------------------------------

// Runs batch() (which performs `pairs_per_batch` pairs) until trial_seconds pass; returns ns
// per pair. The median over the trials is reported.
template <class Batch>
double time_pairs(const settings& config, long pairs_per_batch, Batch&& batch) {
  std::vector<double> results;
  for (int trial = 0; trial < config.trials; ++trial) {
    long pairs = 0;
    const clock_type::time_point start = clock_type::now();
    double elapsed = 0;
    do {
      for (int i = 0; i < 16; ++i) batch();
      pairs += 16 * pairs_per_batch;
      elapsed = seconds_since(start);
    } while (elapsed < config.trial_seconds);
    results.push_back(elapsed * 1e9 / static_cast<double>(pairs));
  }
  return median(results);
}

template <class Allocator>
double pair_ns(const settings& config, Allocator& allocator, std::size_t bytes) {
  return time_pairs(config, 1, [&] {
    void* ptr = allocator.allocate(bytes);
    escape(ptr);
    allocator.deallocate(ptr);
  });
}

template <class Allocator>
double live_ns(const settings& config, Allocator& allocator, std::size_t bytes) {
  void* ptrs[kLiveCount];
  return time_pairs(config, kLiveCount, [&] {
    for (void*& ptr : ptrs) {
      ptr = allocator.allocate(bytes);
      escape(ptr);
    }
    for (void* ptr : ptrs) allocator.deallocate(ptr);
  });
}

// N threads, each with its own allocator (for soma: its own stream), run pairs until main says
// stop; returns aggregate ns per pair (wall time / all pairs of all threads).
template <class Allocator>
double threaded_ns(const settings& config, std::vector<Allocator>& allocators, std::size_t bytes) {
  return soma_bench::threaded_pairs_ns(
      static_cast<int>(allocators.size()), config.trials, config.trial_seconds, 64,
      [&](int t, int) {
        Allocator& allocator = allocators[static_cast<std::size_t>(t)];
        for (int i = 0; i < 1000; ++i) allocator.deallocate(allocator.allocate(bytes));
      },
      [&](int t) {
        Allocator& allocator = allocators[static_cast<std::size_t>(t)];
        void* ptr = allocator.allocate(bytes);
        escape(ptr);
        allocator.deallocate(ptr);
      },
      [] {});
}

// ---- stream churn ----------------------------------------------------------------------------

struct churn_phase {
  double us_per_request = 0;
  std::size_t heap_bytes = 0;  // malloc's bytes in use at the end of the phase
};

// The streams a loop of requests uses. `ordered`: each request stream starts after the main
// stream and the main stream continues after it (a server that hands work on); the host
// synchronizes the main stream every 32 requests, as a server returning results would, which
// also bounds the work queued on the cpu backend (a host thread per stream).
struct churn_loop {
  bool ordered = false;
  somaStream_t main_stream = nullptr;
  somaEvent_t main_done = nullptr;
  somaEvent_t request_done = nullptr;
  int done = 0;

  void request() {
    somaStream_t stream = nullptr;
    SOMA_BENCH_CHECK(somaStreamCreate(&stream));
    if (ordered) {
      SOMA_BENCH_CHECK(somaEventRecord(main_done, main_stream));
      SOMA_BENCH_CHECK(somaStreamWaitEvent(stream, main_done, 0));
    }
    void* ptr = nullptr;
    SOMA_BENCH_CHECK(somaMallocAsync(&ptr, 64 * KiB, stream));
    SOMA_BENCH_CHECK(somaFreeAsync(ptr, stream));
    if (ordered) {
      SOMA_BENCH_CHECK(somaEventRecord(request_done, stream));
      SOMA_BENCH_CHECK(somaStreamWaitEvent(main_stream, request_done, 0));
      if (++done % 32 == 0) SOMA_BENCH_CHECK(somaStreamSynchronize(main_stream));
    }
    SOMA_BENCH_CHECK(somaStreamDestroy(stream));
  }

  churn_phase run(int count) {
    const auto start = clock_type::now();
    for (int i = 0; i < count; ++i) request();
    churn_phase phase;
    phase.us_per_request = seconds_since(start) * 1e6 / count;
    phase.heap_bytes = mallinfo2().uordblks;
    return phase;
  }
};

void print_churn_row(bool ordered, int total_requests) {
  constexpr int phase_requests = 1000;
  churn_loop loop;
  loop.ordered = ordered;
  SOMA_BENCH_CHECK(somaStreamCreate(&loop.main_stream));
  SOMA_BENCH_CHECK(somaEventCreate(&loop.main_done));
  SOMA_BENCH_CHECK(somaEventCreate(&loop.request_done));
  const churn_phase early = loop.run(phase_requests);
  (void)loop.run(total_requests - 2 * phase_requests);
  const churn_phase late = loop.run(phase_requests);
  const double heap_per_request =
      (static_cast<double>(late.heap_bytes) - static_cast<double>(early.heap_bytes)) /
      (total_requests - phase_requests);
  std::printf("%-44s %10.2f %10.2f %10.2f %12.1f\n",
              ordered ? "ordered after/before a main stream" : "create, allocate, free, destroy",
              late.us_per_request, early.us_per_request, late.us_per_request / early.us_per_request,
              heap_per_request);
  std::fflush(stdout);
  SOMA_BENCH_CHECK(somaDeviceSynchronize());
  SOMA_BENCH_CHECK(somaEventDestroy(loop.request_done));
  SOMA_BENCH_CHECK(somaEventDestroy(loop.main_done));
  SOMA_BENCH_CHECK(somaStreamDestroy(loop.main_stream));
}

void print_churn(bool quick) {
  const int total_requests = quick ? 10000 : 50000;
  std::printf(
      "\nstream churn: a stream per request, %d requests (S2, S11); time per request "
      "in the\nlast 1000 against the first 1000, and malloc's heap growth per request "
      "after the first 1000\n",
      total_requests);
  std::printf("%-44s %10s %10s %10s %12s\n", "loop", "last us", "first us", "last/first",
              "heap B/req");
  std::printf("%s\n", std::string(90, '-').c_str());
  print_churn_row(false, total_requests);
  print_churn_row(true, total_requests);
}

// ---- report ---------------------------------------------------------------------------------

void print_header() {
  std::printf("%-44s %12s %12s %10s %12s\n", "scenario", "soma ns", "system ns", "soma/sys",
              "soma M/s");
  std::printf("%s\n", std::string(94, '-').c_str());
}

void print_row(const std::string& scenario, double soma_ns, double system_ns) {
  std::printf("%-44s %12.1f %12.1f %10.2f %12.2f\n", scenario.c_str(), soma_ns, system_ns,
              soma_ns / system_ns, 1e3 / soma_ns);
  std::fflush(stdout);
}

void print_machine(const settings& config) {
  const std::string date = soma_bench::utc_date_text();
  const char* backend = "?";
  SOMA_BENCH_CHECK(somaGetBackendName(&backend));
  int granularity_kib = 0;
  SOMA_BENCH_CHECK(
      somaDeviceGetAttribute(&granularity_kib, somaDevAttrAllocationGranularityKiB, 0));
  std::printf("alloc_pairs_bench — soma vs the system allocator (malloc/free)\n");
  std::printf("date        %s\n", date.c_str());
  soma_bench::print_cpu_and_kernel();
  std::printf("compiler    %s%s\n", __VERSION__,
#ifdef NDEBUG
              ", NDEBUG"
#else
              ", assertions ON (not a release build: figures are pessimistic)"
#endif
  );
  std::printf("soma        backend %s, granularity %d KiB\n", backend, granularity_kib);
  std::printf(
      "method      median of %d trials of %.0f ms each; ns per alloc+free pair;\n"
      "            warm pool, release threshold UINT64_MAX unless said (S12)\n\n",
      config.trials, config.trial_seconds * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  settings config;
  bool quick = false;
  bool churn_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--churn") == 0) {
      churn_only = true;
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
      config.trial_seconds = 0.01;
      config.trials = 3;
    } else {
      std::fprintf(stderr, "usage: alloc_pairs_bench [--quick] [--churn]\n");
      return 2;
    }
  }
  print_machine(config);
  if (churn_only) {
    print_churn(quick);
    return 0;
  }

  somaMemPool_t default_pool = nullptr;
  SOMA_BENCH_CHECK(somaDeviceGetDefaultMemPool(&default_pool, 0));
  std::uint64_t keep_everything = UINT64_MAX;
  SOMA_BENCH_CHECK(
      somaMemPoolSetAttribute(default_pool, somaMemPoolAttrReleaseThreshold, &keep_everything));

  somaStream_t stream = nullptr;
  SOMA_BENCH_CHECK(somaStreamCreate(&stream));
  soma_allocator soma{stream, nullptr};
  system_allocator system;

  // Warm-up: every size once, and the 64-live shapes, then a synchronize, outside the timing.
  const std::size_t pair_sizes[] = {256, 4 * KiB, 64 * KiB, 1 * MiB, 64 * MiB};
  const std::size_t live_sizes[] = {256, 4 * KiB, 64 * KiB, 1 * MiB};
  for (std::size_t bytes : live_sizes) {
    void* ptrs[kLiveCount];
    for (void*& ptr : ptrs) ptr = soma.allocate(bytes);
    for (void* ptr : ptrs) soma.deallocate(ptr);
  }
  soma.deallocate(soma.allocate(64 * MiB));
  SOMA_BENCH_CHECK(somaStreamSynchronize(stream));

  // One discarded round, so that the first row does not pay for the CPU's ramp-up.
  (void)pair_ns(config, soma, 256);
  (void)pair_ns(config, system, 256);

  print_header();
  for (std::size_t bytes : pair_sizes) {
    const double soma_ns = pair_ns(config, soma, bytes);
    const double system_ns = pair_ns(config, system, bytes);
    print_row("pair, same stream, " + size_name(bytes), soma_ns, system_ns);
  }
  for (std::size_t bytes : live_sizes) {
    const double soma_ns = live_ns(config, soma, bytes);
    const double system_ns = live_ns(config, system, bytes);
    print_row("64 live then 64 frees, " + size_name(bytes) + ", per pair", soma_ns, system_ns);
  }
  SOMA_BENCH_CHECK(somaStreamSynchronize(stream));

  // Memory history (docs/observability.md): the same pairs with recording off and on.
  soma_bench::print_history_header();
  // Rounds of 3 trials each way (print_history_cost), in place of one 7-trial measure.
  const auto record = [](std::size_t events) { SOMA_BENCH_CHECK(somaMemRecordHistory(events)); };
  settings round_config = config;
  round_config.trials = std::min(config.trials, 3);
  for (std::size_t bytes : {std::size_t{256}, 4 * KiB}) {
    soma_bench::print_history_cost(
        "pair, same stream, " + size_name(bytes),
        [&] { return pair_ns(round_config, soma, bytes); }, record);
  }
  soma_bench::print_history_cost(
      "64 live then 64 frees, 4 KiB, per pair",
      [&] { return live_ns(round_config, soma, 4 * KiB); }, record);
  SOMA_BENCH_CHECK(somaStreamSynchronize(stream));

  // Up to 64 threads, past this machine's cores: more threads than cores must not collapse.
  for (int thread_count : {1, 2, 4, 8, 16, 32, 64}) {
    std::vector<soma_allocator> soma_threads;
    std::vector<somaStream_t> streams;
    for (int t = 0; t < thread_count; ++t) {
      somaStream_t own = nullptr;
      SOMA_BENCH_CHECK(somaStreamCreate(&own));
      streams.push_back(own);
      soma_threads.push_back(soma_allocator{own, nullptr});
    }
    std::vector<system_allocator> system_threads(static_cast<std::size_t>(thread_count));
    const double soma_ns = threaded_ns(config, soma_threads, 4 * KiB);
    const double system_ns = threaded_ns(config, system_threads, 4 * KiB);
    print_row(std::to_string(thread_count) + " thread(s), own stream, 4 KiB, aggregate", soma_ns,
              system_ns);
    for (somaStream_t own : streams) {
      SOMA_BENCH_CHECK(somaStreamSynchronize(own));
      SOMA_BENCH_CHECK(somaStreamDestroy(own));
    }
  }

  // Ping-pong of two idle streams through events, as vs_driver's (d) without allocations: each
  // wait is for work already done. No system anchor: the row is soma's own floor for the pattern.
  {
    somaStream_t a = nullptr;
    somaStream_t b = nullptr;
    somaEvent_t on_a = nullptr;
    somaEvent_t on_b = nullptr;
    SOMA_BENCH_CHECK(somaStreamCreate(&a));
    SOMA_BENCH_CHECK(somaStreamCreate(&b));
    SOMA_BENCH_CHECK(somaEventCreateWithFlags(&on_a, somaEventDisableTiming));
    SOMA_BENCH_CHECK(somaEventCreateWithFlags(&on_b, somaEventDisableTiming));
    const double events_ns = time_pairs(config, 1, [&] {
      SOMA_BENCH_CHECK(somaEventRecord(on_a, a));
      SOMA_BENCH_CHECK(somaStreamWaitEvent(b, on_a, 0));
      SOMA_BENCH_CHECK(somaEventRecord(on_b, b));
      SOMA_BENCH_CHECK(somaStreamWaitEvent(a, on_b, 0));
    });
    std::printf("%-44s %12.1f %12s\n", "ping-pong: 2 records + 2 waits, idle streams", events_ns,
                "-");
    SOMA_BENCH_CHECK(somaEventDestroy(on_a));
    SOMA_BENCH_CHECK(somaEventDestroy(on_b));
    SOMA_BENCH_CHECK(somaStreamDestroy(a));
    SOMA_BENCH_CHECK(somaStreamDestroy(b));
  }

  // Threshold 0: every synchronize gives the memory back, the next allocation maps it again.
  somaMemPoolProps props{};
  props.allocType = somaMemAllocationTypePinned;
  props.location.type = somaMemLocationTypeDevice;
  props.location.id = 0;
  somaMemPool_t small_pool = nullptr;
  SOMA_BENCH_CHECK(somaMemPoolCreate(&small_pool, &props));
  soma_allocator cold{stream, small_pool};
  const double soma_cold_ns = time_pairs(config, 1, [&] {
    void* ptr = cold.allocate(64 * MiB);
    escape(ptr);
    cold.deallocate(ptr);
    SOMA_BENCH_CHECK(somaStreamSynchronize(stream));
  });
  const double system_cold_ns = pair_ns(config, system, 64 * MiB);
  print_row("threshold 0: 64 MiB pair + stream sync", soma_cold_ns, system_cold_ns);
  // The floor of that row: memory the pool takes anew must be zeroed by the kernel, so the
  // anchor is zeroing 64 MiB that is already resident (memset: bandwidth only, no page faults).
  std::vector<char> resident(64 * MiB, 1);
  const double zeroing_ns = time_pairs(config, 1, [&] {
    std::memset(resident.data(), 0, resident.size());
    escape(resident.data());
  });
  std::printf("%-46s %12.1f %12.1f %10.2f   goal <= 2.00: %s\n",
              "threshold 0 against zeroing 64 MiB (memset)", soma_cold_ns, zeroing_ns,
              soma_cold_ns / zeroing_ns, soma_cold_ns <= 2 * zeroing_ns ? "met" : "NOT met");
  std::printf(
      "\nsoma ns / system ns: per alloc+free pair (aggregate rows: wall time / all "
      "pairs);\nsoma/sys below 1 means soma is faster. soma M/s: million pairs per "
      "second.\nThe threshold-0 row compares against plain malloc+free (no "
      "synchronize exists there).\n");

  SOMA_BENCH_CHECK(somaMemPoolDestroy(small_pool));
  SOMA_BENCH_CHECK(somaStreamDestroy(stream));
  print_churn(quick);
  return 0;
}
