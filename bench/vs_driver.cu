// vs_driver: soma's cuda backend against the driver's stream-ordered allocator
// (cudaMallocAsync on the device's default pool) and against cudaMalloc/cudaFree, in one
// process on one GPU, same scenarios, same run (docs/targets.md has the anchors and goals).
//
// Scenarios (host time per operation; warm pools with the release threshold at UINT64_MAX
// unless said):
//   (a) pair          one allocation and its free on the same stream, per size
//   (b) 64 live       64 allocations, then their 64 frees; time per pair
//   (c) threads       N threads (1 to 64), each with its own stream, 4 KiB pairs; aggregate pairs/s
//   (d) ping-pong     two streams: alloc on A, record on A, B waits, free on B, alloc on B,
//                     record on B, A waits, free on A (2 pairs + 2 records + 2 waits); also the
//                     4 event calls alone, the floor of this pattern
//   (e) threshold 0   64 MiB alloc + free + stream synchronize on a pool that keeps nothing
//   (h) history       soma's pairs with memory history off and on (goal: on adds <= 5 %)
// Each figure is the median of several timed trials. Streams are synchronized before every
// trial, outside the timed region, so no synchronize is charged to the timed operations (S12);
// only (e) includes a synchronize, by definition.
//
// Usage: vs_driver [--quick]      (SOMA_BACKEND defaults to cuda; exit 2 if soma is not on cuda)
#include <soma/soma.h>

#include "bench_support.hpp"

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
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
constexpr std::size_t kThreadPairBytes = 4 * KiB;
constexpr std::size_t kPingPongBytes = 4 * KiB;
constexpr std::size_t kThresholdZeroBytes = 64 * MiB;

struct settings {
  double trial_seconds = 0.05;
  int trials = 7;
};

[[noreturn]] void fail_soma(const char* what, somaError_t status) {
  std::fprintf(stderr, "vs_driver: %s failed: %s: %s\n", what, somaGetErrorName(status),
               somaGetLastErrorMessage());
  std::exit(1);
}

[[noreturn]] void fail_cuda(const char* what, cudaError_t status) {
  std::fprintf(stderr, "vs_driver: %s failed: %s: %s\n", what, cudaGetErrorName(status),
               cudaGetErrorString(status));
  std::exit(1);
}

#define SOMA_CHECK(call)                              \
  do {                                                \
    const somaError_t vs_driver_status = (call);      \
    if (vs_driver_status != somaSuccess) [[unlikely]] \
      fail_soma(#call, vs_driver_status);             \
  } while (0)

#define CUDA_CHECK(call)                              \
  do {                                                \
    const cudaError_t vs_driver_status = (call);      \
    if (vs_driver_status != cudaSuccess) [[unlikely]] \
      fail_cuda(#call, vs_driver_status);             \
  } while (0)

// Keeps the compiler from dropping an allocation whose pointer is otherwise unused.
inline void escape(void* ptr) { asm volatile("" : : "r"(ptr) : "memory"); }

// ---- the three allocators, behind the same calls -------------------------------------------

struct soma_side {
  somaStream_t stream = nullptr;
  static somaStream_t new_stream() {
    somaStream_t stream = nullptr;
    SOMA_CHECK(somaStreamCreateWithFlags(&stream, somaStreamNonBlocking));
    return stream;
  }
  static void destroy_stream(somaStream_t stream) {
    SOMA_CHECK(somaStreamSynchronize(stream));
    SOMA_CHECK(somaStreamDestroy(stream));
  }
  void* allocate(std::size_t bytes) const {
    void* ptr = nullptr;
    SOMA_CHECK(somaMallocAsync(&ptr, bytes, stream));
    return ptr;
  }
  void deallocate(void* ptr) const { SOMA_CHECK(somaFreeAsync(ptr, stream)); }
  void synchronize() const { SOMA_CHECK(somaStreamSynchronize(stream)); }
  int warm_pairs() const { return 1000; }
};

struct driver_side {
  cudaStream_t stream = nullptr;
  static cudaStream_t new_stream() {
    cudaStream_t stream = nullptr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    return stream;
  }
  static void destroy_stream(cudaStream_t stream) {
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaStreamDestroy(stream));
  }
  void* allocate(std::size_t bytes) const {
    void* ptr = nullptr;
    CUDA_CHECK(cudaMallocAsync(&ptr, bytes, stream));
    return ptr;
  }
  void deallocate(void* ptr) const { CUDA_CHECK(cudaFreeAsync(ptr, stream)); }
  void synchronize() const { CUDA_CHECK(cudaStreamSynchronize(stream)); }
  int warm_pairs() const { return 1000; }
};

struct cuda_malloc_side {
  cudaStream_t stream = nullptr;  // unused by the calls; synchronized like the others
  void* allocate(std::size_t bytes) const {
    void* ptr = nullptr;
    CUDA_CHECK(cudaMalloc(&ptr, bytes));
    return ptr;
  }
  void deallocate(void* ptr) const { CUDA_CHECK(cudaFree(ptr)); }
  void synchronize() const { CUDA_CHECK(cudaDeviceSynchronize()); }
  int warm_pairs() const { return 10; }
};

// ---- timing -------------------------------------------------------------------------------

// Times body() (one iteration) and returns ns per iteration, the median over the trials.
// The iteration count of a trial is calibrated first so that a trial takes about
// trial_seconds and the clock is read only twice per trial. before_trial() runs before each
// trial, outside the timed region (a synchronize, S12).
// (A template, not std::function: an indirect call would add nanoseconds to a figure whose goal
// is 50 ns.)
template <class BeforeTrial, class Body>
double time_iterations(const settings& config, BeforeTrial&& before_trial, Body&& body) {
  long iterations = 1;
  for (;;) {
    before_trial();
    const clock_type::time_point start = clock_type::now();
    for (long i = 0; i < iterations; ++i) body();
    const double elapsed = seconds_since(start);
    if (elapsed >= config.trial_seconds / 8 || iterations >= (1L << 26)) {
      const double per_iteration = std::max(elapsed / static_cast<double>(iterations), 1e-10);
      iterations = std::max(1L, static_cast<long>(config.trial_seconds / per_iteration));
      break;
    }
    iterations *= 4;
  }
  std::vector<double> results;
  for (int trial = 0; trial < config.trials; ++trial) {
    before_trial();
    const clock_type::time_point start = clock_type::now();
    for (long i = 0; i < iterations; ++i) body();
    results.push_back(seconds_since(start) * 1e9 / static_cast<double>(iterations));
  }
  before_trial();
  return median(results);
}

template <class Side>
double pair_ns(const settings& config, const Side& side, std::size_t bytes) {
  side.deallocate(side.allocate(bytes));  // warm: the pool holds this size
  return time_iterations(
      config, [&] { side.synchronize(); },
      [&] {
        void* ptr = side.allocate(bytes);
        escape(ptr);
        side.deallocate(ptr);
      });
}

template <class Side>
double live_ns(const settings& config, const Side& side, std::size_t bytes) {
  void* ptrs[kLiveCount];
  auto body = [&] {
    for (void*& ptr : ptrs) {
      ptr = side.allocate(bytes);
      escape(ptr);
    }
    for (void* ptr : ptrs) side.deallocate(ptr);
  };
  body();  // warm
  return time_iterations(
             config, [&] { side.synchronize(); }, body) /
         kLiveCount;
}

// N threads, each with its own side (its own stream), run pairs until the main thread says
// stop; returns aggregate ns per pair (wall time / all pairs of all threads), median of `trials`
// trials (config's by default). Streams are synchronized before each trial, outside the clock
// (S12). Warm pairs run before the first trial unless `warm` is false.
template <class Side>
double threaded_ns(const settings& config, const std::vector<Side>& sides, std::size_t bytes,
                   int trials = 0, bool warm = true) {
  const double ns = soma_bench::threaded_pairs_ns(
      static_cast<int>(sides.size()), trials > 0 ? trials : config.trials, config.trial_seconds, 16,
      [&](int t, int trial) {
        const Side& side = sides[static_cast<std::size_t>(t)];
        if (warm && trial == 0) {
          for (int i = 0; i < side.warm_pairs(); ++i) side.deallocate(side.allocate(bytes));
        }
      },
      [&](int t) {
        const Side& side = sides[static_cast<std::size_t>(t)];
        void* ptr = side.allocate(bytes);
        escape(ptr);
        side.deallocate(ptr);
      },
      [&] {
        for (const Side& side : sides) side.synchronize();
      });
  for (const Side& side : sides) side.synchronize();
  return ns;
}

// ---- report ---------------------------------------------------------------------------------

std::string number_or_dash(double value, const char* format) {
  if (std::isnan(value)) return "-";
  char text[32];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

constexpr double kNone = std::numeric_limits<double>::quiet_NaN();

void print_time_header() {
  std::printf("%-46s %10s %10s %11s %9s %9s  %-12s\n", "scenario (us per op, host time)", "soma",
              "driver", "cudaMalloc", "drv/soma", "cM/soma", "soma goal");
  std::printf("%s\n", std::string(116, '-').c_str());
}

// Times in ns; printed in µs. Ratios: how many times faster soma is than the other.
void print_time_row(const std::string& scenario, double soma_ns, double driver_ns,
                    double cuda_malloc_ns, double goal_us) {
  std::string goal = "-";
  if (!std::isnan(goal_us)) {
    char text[48];
    std::snprintf(text, sizeof text, "<= %.3g %s", goal_us,
                  soma_ns / 1e3 <= goal_us ? "met" : "MISSED");
    goal = text;
  }
  std::printf("%-46s %10s %10s %11s %9s %9s  %-12s\n", scenario.c_str(),
              number_or_dash(soma_ns / 1e3, "%.3f").c_str(),
              number_or_dash(driver_ns / 1e3, "%.3f").c_str(),
              number_or_dash(cuda_malloc_ns / 1e3, "%.2f").c_str(),
              number_or_dash(driver_ns / soma_ns, "%.2fx").c_str(),
              number_or_dash(cuda_malloc_ns / soma_ns, "%.1fx").c_str(), goal.c_str());
  std::fflush(stdout);
}

void print_rate_header() {
  std::printf("\n%-46s %10s %10s %11s %9s %9s  %-12s\n", "scenario (M pairs/s, aggregate)", "soma",
              "driver", "cudaMalloc", "soma/drv", "soma/cM", "soma goal");
  std::printf("%s\n", std::string(116, '-').c_str());
}

void print_rate_row(const std::string& scenario, double soma_ns, double driver_ns,
                    double cuda_malloc_ns, double goal_mps) {
  const double soma = 1e3 / soma_ns;
  const double driver = 1e3 / driver_ns;
  const double cuda_malloc = 1e3 / cuda_malloc_ns;
  std::string goal = "-";
  if (!std::isnan(goal_mps)) {
    char text[48];
    std::snprintf(text, sizeof text, ">= %.3g %s", goal_mps, soma >= goal_mps ? "met" : "MISSED");
    goal = text;
  }
  std::printf("%-46s %10s %10s %11s %9s %9s  %-12s\n", scenario.c_str(),
              number_or_dash(soma, "%.3f").c_str(), number_or_dash(driver, "%.3f").c_str(),
              number_or_dash(cuda_malloc, "%.4f").c_str(),
              number_or_dash(soma / driver, "%.2fx").c_str(),
              number_or_dash(soma / cuda_malloc, "%.1fx").c_str(), goal.c_str());
  std::fflush(stdout);
}

std::string first_line_of(const char* path) {
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  return line;
}

std::string version_text(int version) {  // 13000 -> "13.0"
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

void print_machine(const settings& config) {
  const std::string date = soma_bench::utc_date_text();
  cudaDeviceProp properties{};
  CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
  int driver_version = 0;
  int runtime_version = 0;
  CUDA_CHECK(cudaDriverGetVersion(&driver_version));
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime_version));
  std::string kernel_module = first_line_of("/proc/driver/nvidia/version");
  if (kernel_module.empty()) kernel_module = "(no /proc/driver/nvidia/version)";
  const char* backend = "?";
  SOMA_CHECK(somaGetBackendName(&backend));
  int granularity_kib = 0;
  SOMA_CHECK(somaDeviceGetAttribute(&granularity_kib, somaDevAttrAllocationGranularityKiB, 0));

  std::printf(
      "vs_driver — soma vs the driver's cudaMallocAsync vs cudaMalloc, one GPU, one "
      "process\n");
  std::printf("date        %s\n", date.c_str());
  std::printf("gpu         %s (sm_%d%d, %.1f GiB)\n", properties.name, properties.major,
              properties.minor, static_cast<double>(properties.totalGlobalMem) / (1024.0 * MiB));
  std::printf("driver      CUDA %s; %s\n", version_text(driver_version).c_str(),
              kernel_module.c_str());
  std::printf("runtime     CUDA %s (cudart, static)\n", version_text(runtime_version).c_str());
  soma_bench::print_cpu_and_kernel();
  std::printf("build       %s%s\n", __VERSION__,
#ifdef NDEBUG
              ", NDEBUG"
#else
              ", assertions ON (not a release build: figures are pessimistic)"
#endif
  );
  std::printf("soma        backend %s, granularity %d KiB, default pool\n", backend,
              granularity_kib);
  std::printf("driver side cudaMallocAsync/cudaFreeAsync on the device's default pool\n");
  std::printf(
      "method      median of %d trials of ~%.0f ms; host time; warm pools with release\n"
      "            threshold UINT64_MAX (both pools) except (e); streams synchronized\n"
      "            before each trial, outside the timing (S12); soma's 16, 32 and 64\n"
      "            threads: %d trials each, taken in turn\n\n",
      config.trials, config.trial_seconds * 1e3, 3 * config.trials);
}

// ---- scenarios -----------------------------------------------------------------------------

void set_release_thresholds(somaMemPool_t soma_pool, cudaMemPool_t driver_pool,
                            std::uint64_t threshold) {
  SOMA_CHECK(somaMemPoolSetAttribute(soma_pool, somaMemPoolAttrReleaseThreshold, &threshold));
  CUDA_CHECK(cudaMemPoolSetAttribute(driver_pool, cudaMemPoolAttrReleaseThreshold, &threshold));
}

template <class Side, class Stream>
std::vector<Side> sides_for_threads(int count, std::vector<Stream>& streams) {
  std::vector<Side> sides(static_cast<std::size_t>(count));
  for (int t = 0; t < count; ++t) {
    streams.push_back(Side::new_stream());
    sides[static_cast<std::size_t>(t)].stream = streams.back();
  }
  return sides;
}

// Prints the row of thread_count threads; soma's figure is measured here unless given
// (soma_ns, from interleaved_soma_ns). goal_mps: NaN for none.
void run_threads(const settings& config, int thread_count, double goal_mps,
                 double soma_ns = kNone) {
  std::vector<somaStream_t> soma_streams;
  std::vector<cudaStream_t> driver_streams;
  if (std::isnan(soma_ns)) {
    const std::vector<soma_side> soma = sides_for_threads<soma_side>(thread_count, soma_streams);
    soma_ns = threaded_ns(config, soma, kThreadPairBytes);
  }
  const std::vector<driver_side> driver =
      sides_for_threads<driver_side>(thread_count, driver_streams);
  const std::vector<cuda_malloc_side> cuda_malloc(static_cast<std::size_t>(thread_count));
  const double driver_ns = threaded_ns(config, driver, kThreadPairBytes);
  const double cuda_malloc_ns = threaded_ns(config, cuda_malloc, kThreadPairBytes);
  print_rate_row("(c) " + std::to_string(thread_count) + " thread(s), own stream each, " +
                     size_name(kThreadPairBytes),
                 soma_ns, driver_ns, cuda_malloc_ns, goal_mps);
  for (somaStream_t stream : soma_streams) soma_side::destroy_stream(stream);
  for (cudaStream_t stream : driver_streams) driver_side::destroy_stream(stream);
}

// soma's aggregate ns per pair for each thread count, the trials taken in rounds (one trial of
// each count in turn, soma_bench::interleaved_medians): rows that are compared with each other
// (32 and 64 threads against 16) then meet the host's slow and fast phases alike. Measured one
// row after another, a phase of the host between them decided which came out ahead. Three times
// the trials of a row: where the host's threads are all busy the rows are one figure give or take
// its noise, and the verdict compares medians.
std::vector<double> interleaved_soma_ns(const settings& config, const std::vector<int>& counts) {
  std::vector<somaStream_t> streams;
  std::vector<std::vector<soma_side>> sides;
  for (int count : counts) sides.push_back(sides_for_threads<soma_side>(count, streams));
  const std::vector<double> ns = soma_bench::interleaved_medians(
      counts.size(), 3 * config.trials, [&](std::size_t c, int round) {
        return threaded_ns(config, sides[c], kThreadPairBytes, 1, round == 0);
      });
  for (somaStream_t stream : streams) soma_side::destroy_stream(stream);
  return ns;
}

// (d): returns ns per iteration (2 pairs + 2 records + 2 waits), or with allocate == false the
// 4 event calls alone.
double soma_ping_pong_ns(const settings& config, bool allocate) {
  const somaStream_t a = soma_side::new_stream();
  const somaStream_t b = soma_side::new_stream();
  somaEvent_t on_a = nullptr;
  somaEvent_t on_b = nullptr;
  SOMA_CHECK(somaEventCreateWithFlags(&on_a, somaEventDisableTiming));
  SOMA_CHECK(somaEventCreateWithFlags(&on_b, somaEventDisableTiming));
  auto body = [&] {
    void* ptr = nullptr;
    if (allocate) SOMA_CHECK(somaMallocAsync(&ptr, kPingPongBytes, a));
    SOMA_CHECK(somaEventRecord(on_a, a));
    SOMA_CHECK(somaStreamWaitEvent(b, on_a, 0));
    if (allocate) {
      SOMA_CHECK(somaFreeAsync(ptr, b));
      SOMA_CHECK(somaMallocAsync(&ptr, kPingPongBytes, b));
    }
    SOMA_CHECK(somaEventRecord(on_b, b));
    SOMA_CHECK(somaStreamWaitEvent(a, on_b, 0));
    if (allocate) SOMA_CHECK(somaFreeAsync(ptr, a));
  };
  for (int i = 0; i < 100; ++i) body();
  const double ns = time_iterations(
      config,
      [&] {
        SOMA_CHECK(somaStreamSynchronize(a));
        SOMA_CHECK(somaStreamSynchronize(b));
      },
      body);
  SOMA_CHECK(somaEventDestroy(on_a));
  SOMA_CHECK(somaEventDestroy(on_b));
  soma_side::destroy_stream(a);
  soma_side::destroy_stream(b);
  return ns;
}

// The context check soma makes on each event call (backend/cuda context_scope): four
// cuCtxGetCurrent alone, to split (d)'s gap between the driver's calls and soma's own work
// (bench/event_calls measures the latter without a GPU).
double context_queries_ns(const settings& config) {
  using get_current_fn = CUresult (*)(CUcontext*);
  void* pointer = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &pointer, 12000, cudaEnableDefault,
                                       &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess)
    return kNone;
  const auto get_current = reinterpret_cast<get_current_fn>(pointer);
  CUcontext current = nullptr;
  return time_iterations(
      config, [] {},
      [&] {
        for (int i = 0; i < 4; ++i) (void)get_current(&current);
      });
}

double driver_ping_pong_ns(const settings& config, bool allocate) {
  const cudaStream_t a = driver_side::new_stream();
  const cudaStream_t b = driver_side::new_stream();
  cudaEvent_t on_a = nullptr;
  cudaEvent_t on_b = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&on_a, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&on_b, cudaEventDisableTiming));
  auto body = [&] {
    void* ptr = nullptr;
    if (allocate) CUDA_CHECK(cudaMallocAsync(&ptr, kPingPongBytes, a));
    CUDA_CHECK(cudaEventRecord(on_a, a));
    CUDA_CHECK(cudaStreamWaitEvent(b, on_a, 0));
    if (allocate) {
      CUDA_CHECK(cudaFreeAsync(ptr, b));
      CUDA_CHECK(cudaMallocAsync(&ptr, kPingPongBytes, b));
    }
    CUDA_CHECK(cudaEventRecord(on_b, b));
    CUDA_CHECK(cudaStreamWaitEvent(a, on_b, 0));
    if (allocate) CUDA_CHECK(cudaFreeAsync(ptr, a));
  };
  for (int i = 0; i < 100; ++i) body();
  const double ns = time_iterations(
      config,
      [&] {
        CUDA_CHECK(cudaStreamSynchronize(a));
        CUDA_CHECK(cudaStreamSynchronize(b));
      },
      body);
  CUDA_CHECK(cudaEventDestroy(on_a));
  CUDA_CHECK(cudaEventDestroy(on_b));
  driver_side::destroy_stream(a);
  driver_side::destroy_stream(b);
  return ns;
}

// (e): alloc + free + synchronize of the freeing stream, on pools with threshold 0.
template <class Side>
double threshold_zero_ns(const settings& config, const Side& side) {
  return time_iterations(
      config, [&] { side.synchronize(); },
      [&] {
        void* ptr = side.allocate(kThresholdZeroBytes);
        escape(ptr);
        side.deallocate(ptr);
        side.synchronize();
      });
}

}  // namespace

int main(int argc, char** argv) {
  settings config;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      config.trial_seconds = 0.01;
      config.trials = 3;
    } else {
      std::fprintf(stderr, "usage: vs_driver [--quick]\n");
      return 2;
    }
  }
  ::setenv("SOMA_BACKEND", "cuda", /*overwrite=*/0);

  int devices = 0;
  const cudaError_t device_status = cudaGetDeviceCount(&devices);
  if (device_status != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "vs_driver: no CUDA device (%s)\n", cudaGetErrorString(device_status));
    return 2;
  }
  CUDA_CHECK(cudaSetDevice(0));
  CUDA_CHECK(cudaFree(nullptr));  // the primary context exists before soma starts
  const char* backend = nullptr;
  const somaError_t backend_status = somaGetBackendName(&backend);
  if (backend_status != somaSuccess || backend == nullptr || std::strcmp(backend, "cuda") != 0) {
    std::fprintf(stderr, "vs_driver: soma's backend is %s, not cuda (%s%s%s)\n",
                 backend != nullptr ? backend : "not started",
                 backend_status == somaSuccess ? "" : somaGetErrorName(backend_status),
                 backend_status == somaSuccess ? "" : ": ", somaGetLastErrorMessage());
    return 2;
  }
  print_machine(config);

  somaMemPool_t soma_pool = nullptr;
  SOMA_CHECK(somaDeviceGetDefaultMemPool(&soma_pool, 0));
  cudaMemPool_t driver_pool = nullptr;
  CUDA_CHECK(cudaDeviceGetDefaultMemPool(&driver_pool, 0));
  set_release_thresholds(soma_pool, driver_pool, UINT64_MAX);

  soma_side soma{soma_side::new_stream()};
  driver_side driver{driver_side::new_stream()};
  cuda_malloc_side cuda_malloc{};

  // One discarded round, so that the first row does not pay for the CPU's ramp-up.
  (void)pair_ns(config, soma, 256);
  (void)pair_ns(config, driver, 256);

  print_time_header();
  for (std::size_t bytes : {std::size_t{256}, 4 * KiB, 64 * KiB, 1 * MiB, 64 * MiB}) {
    const double soma_ns = pair_ns(config, soma, bytes);
    const double driver_ns = pair_ns(config, driver, bytes);
    const double cuda_malloc_ns = pair_ns(config, cuda_malloc, bytes);
    print_time_row("(a) pair, same stream, " + size_name(bytes), soma_ns, driver_ns, cuda_malloc_ns,
                   0.05);
  }
  for (std::size_t bytes : {std::size_t{256}, 4 * KiB, 64 * KiB, 1 * MiB}) {
    const double soma_ns = live_ns(config, soma, bytes);
    const double driver_ns = live_ns(config, driver, bytes);
    const double cuda_malloc_ns = live_ns(config, cuda_malloc, bytes);
    print_time_row("(b) 64 live then 64 frees, " + size_name(bytes) + ", per pair", soma_ns,
                   driver_ns, cuda_malloc_ns, 0.06);
  }
  // Memory history (docs/observability.md): soma's pairs with recording off and on.
  soma_bench::print_history_header();
  // Rounds of 3 trials each way (print_history_cost), in place of one 7-trial measure.
  const auto record = [](std::size_t events) { SOMA_CHECK(somaMemRecordHistory(events)); };
  settings round_config = config;
  round_config.trials = std::min(config.trials, 3);
  for (std::size_t bytes : {std::size_t{256}, 4 * KiB}) {
    soma_bench::print_history_cost(
        "(h) soma pair, same stream, " + size_name(bytes),
        [&] { return pair_ns(round_config, soma, bytes); }, record);
  }
  soma_bench::print_history_cost(
      "(h) soma 64 live then 64 frees, 4 KiB, per pair",
      [&] { return live_ns(round_config, soma, 4 * KiB); }, record);
  print_time_header();
  {
    const double soma_ns = soma_ping_pong_ns(config, true);
    const double driver_ns = driver_ping_pong_ns(config, true);
    print_time_row("(d) ping-pong A<->B, " + size_name(kPingPongBytes) + ", per iteration", soma_ns,
                   driver_ns, kNone, 1.2);
    const double soma_events_ns = soma_ping_pong_ns(config, false);
    const double driver_events_ns = driver_ping_pong_ns(config, false);
    print_time_row("(d) the same 2 records + 2 waits alone", soma_events_ns, driver_events_ns,
                   kNone, kNone);
    print_time_row("(d) 4 cuCtxGetCurrent alone (driver column)", kNone, context_queries_ns(config),
                   kNone, kNone);
  }

  set_release_thresholds(soma_pool, driver_pool, 0);
  soma.synchronize();
  driver.synchronize();
  {
    const double soma_ns = threshold_zero_ns(config, soma);
    const double driver_ns = threshold_zero_ns(config, driver);
    const double cuda_malloc_ns = threshold_zero_ns(config, cuda_malloc);
    print_time_row("(e) threshold 0: 64 MiB alloc+free+stream sync", soma_ns, driver_ns,
                   cuda_malloc_ns, driver_ns / 1e3);
  }
  set_release_thresholds(soma_pool, driver_pool, UINT64_MAX);

  print_rate_header();
  // Goals: 100 M pairs/s at 16 threads; more threads than cores must not fall below that row.
  for (int thread_count : {1, 2, 4, 8}) run_threads(config, thread_count, kNone);
  const std::vector<double> many = interleaved_soma_ns(config, {16, 32, 64});
  const double sixteen = 1e3 / many[0];
  run_threads(config, 16, 100.0, many[0]);
  run_threads(config, 32, sixteen, many[1]);
  run_threads(config, 64, sixteen, many[2]);

  std::printf(
      "\ndriver = cudaMallocAsync/cudaFreeAsync (device default pool); cudaMalloc = "
      "cudaMalloc/cudaFree.\ndrv/soma, cM/soma: how many times faster soma is (time ratio); "
      "soma/drv, soma/cM: throughput ratio.\n(e)'s goal is the driver's figure of this run. "
      "(c)'s goal: 100 M/s at 16 threads; 32 and 64 threads\nat least the 16-thread figure "
      "of this run (the host's hardware threads are on the cpu line).\n");

  set_release_thresholds(soma_pool, driver_pool, 0);
  soma_side::destroy_stream(soma.stream);
  driver_side::destroy_stream(driver.stream);
  SOMA_CHECK(somaDeviceSynchronize());
  CUDA_CHECK(cudaDeviceSynchronize());
  return 0;
}
