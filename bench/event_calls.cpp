// event_calls: what soma adds to each event record and stream wait on the cuda backend, beside
// the same driver calls made raw, in one run. The driver is the tests' fake
// (tests/backend/fake_cuda_driver.hpp), whose calls cost a few nanoseconds, so the difference
// is soma's own work: handle lookups, locks, stream clocks (S11, S12). Issue 15's goal is that
// soma's 2 records + 2 waits of a ping-pong cost at most 0.1 us more than the driver's.
//
//   event_calls [--iterations N] [--repeats R]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "fake_cuda_driver.hpp"
#include "backend/process_barrier.hpp"
#include "core/biased_lock.hpp"
#include "runtime/device_table.hpp"
#include "runtime/pool_hazards.hpp"
#include "runtime/stream_registry.hpp"

namespace {

namespace sd = soma::detail;
namespace cu = soma::detail::backend::cuda;

struct quiet_listener final : sd::stream_listener {
  void stream_destroyed(const sd::stream_timeline&) override {}
  void timeline_forgotten(const sd::stream_timeline&, sd::free_stamp) override {}
  void synchronized() override {}
};

void check(const sd::status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "event_calls: %s: %s\n", what, s.message().c_str());
    std::exit(1);
  }
}
template <typename T>
T take(sd::result<T> r, const char* what) {
  if (!r.ok()) check(r.error(), what);
  return std::move(r.value());
}

constexpr int kDrainEvery = 64;  // the fake's queues are drained ("the GPU runs") this often

/// ns per ping-pong iteration (2 records + 2 waits), best of `repeats`.
template <typename Body>
double best_ns(int iterations, int repeats, fake_cuda::driver_state& gpu, Body&& body) {
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) {
      body();
      if (i % kDrainEvery == kDrainEvery - 1) gpu.run_all();
    }
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
    best = std::min(best, took.count() / iterations);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int iterations = 200000;
  int repeats = 7;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--iterations") == 0 && i + 1 < argc) {
      iterations = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) {
      repeats = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: event_calls [--iterations N] [--repeats R]\n");
      return 2;
    }
  }
  fake_cuda::driver_state gpu;
  fake_cuda::state = &gpu;
  // As the runtime sets it up (runtime::runtime): biased locks where the process barrier works.
  if (sd::pool_hazards::asymmetric())
    sd::biased_lock::use_process_barrier(&sd::backend::process_barrier);
  const cu::driver_api driver = fake_cuda::make_driver();
  std::unique_ptr<cu::cuda_backend> backend = take(cu::cuda_backend::create(driver), "backend");
  sd::device_table devices(*backend);
  quiet_listener listener;
  sd::stream_registry registry(*backend, devices, listener);
  check(registry.start(), "start");

  // soma: two streams, an event recorded on each and waited for by the other.
  const std::uintptr_t a = take(registry.create(0), "stream a");
  const std::uintptr_t b = take(registry.create(0), "stream b");
  const std::uintptr_t on_a = take(registry.create_event(0), "event on a");
  const std::uintptr_t on_b = take(registry.create_event(0), "event on b");
  auto soma_body = [&] {
    check(registry.record_event(on_a, a), "record a");
    check(registry.wait_event(b, on_a), "wait b");
    check(registry.record_event(on_b, b), "record b");
    check(registry.wait_event(a, on_b), "wait a");
  };

  // raw: the same four calls on the driver, with the device's context current.
  fake_cuda::current_context = fake_cuda::context_of(0);
  cu::CUstream raw_a = nullptr, raw_b = nullptr;
  cu::CUevent raw_on_a = nullptr, raw_on_b = nullptr;
  if (driver.cuStreamCreate(&raw_a, 0) != cu::CUDA_SUCCESS ||
      driver.cuStreamCreate(&raw_b, 0) != cu::CUDA_SUCCESS ||
      driver.cuEventCreate(&raw_on_a, cu::CU_EVENT_DISABLE_TIMING) != cu::CUDA_SUCCESS ||
      driver.cuEventCreate(&raw_on_b, cu::CU_EVENT_DISABLE_TIMING) != cu::CUDA_SUCCESS) {
    std::fprintf(stderr, "event_calls: raw streams and events\n");
    return 1;
  }
  auto raw_body = [&] {
    (void)driver.cuEventRecord(raw_on_a, raw_a);
    (void)driver.cuStreamWaitEvent(raw_b, raw_on_a, 0);
    (void)driver.cuEventRecord(raw_on_b, raw_b);
    (void)driver.cuStreamWaitEvent(raw_a, raw_on_b, 0);
  };

  for (int i = 0; i < 1000; ++i) {  // warm
    soma_body();
    raw_body();
    gpu.run_all();
  }
  double soma_ns = 0, raw_ns = 0;
  soma_ns = best_ns(iterations, repeats, gpu, soma_body);
  raw_ns = best_ns(iterations, repeats, gpu, raw_body);
  gpu.run_all();
  std::printf("event_calls: 2 records + 2 waits on the cuda backend over the fake driver\n");
  std::printf("  iterations %d, best of %d\n", iterations, repeats);
  std::printf("  %-34s %9.1f ns\n", "soma (stream_registry)", soma_ns);
  std::printf("  %-34s %9.1f ns\n", "the same driver calls, raw", raw_ns);
  std::printf("  %-34s %9.1f ns   (goal: <= 100 ns over raw)\n", "soma's own work",
              soma_ns - raw_ns);
  return 0;
}
