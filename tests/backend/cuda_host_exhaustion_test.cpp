// The cuda backend's memory calls where host memory runs out inside soma (api-behaviour.md, "Host
// memory exhausted inside soma"), over the fake driver: a pool over backend_memory_provider takes
// each step (growth, a remap, a small block, release) with the first, second, ... host allocation
// failing. Whatever fails, soma's records and the driver's state stay one: once everything is
// freed and given back, nothing is left created or mapped, and no later call finds an address
// mapped that soma took for free (the driver would refuse cuMemMap there). This binary replaces
// the global operator new (failing_operator_new.hpp); the fake driver's own bookkeeping runs with
// the countdown paused, as a real driver's host memory is not soma's.
#include <gtest/gtest.h>

#include <memory>
#include <new>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "core/pool.hpp"
#include "failing_operator_new.hpp"
#include "fake_cuda_driver.hpp"
#include "runtime/backend_memory_provider.hpp"

namespace {

namespace cuda = soma::detail::backend::cuda;
using soma::detail::block;
using soma::detail::pool;
using soma::detail::pool_config;
using soma::detail::remap_mode;
using soma::detail::stream_timeline;
using soma_test::allocations_until_failure;

constexpr std::size_t MiB = std::size_t{1} << 20;

/// A driver call with the failure countdown paused.
template <auto Fn>
struct paused_call;
template <typename R, typename... A, R (*Fn)(A...)>
struct paused_call<Fn> {
  static R call(A... arguments) {
    const int saved = allocations_until_failure;
    allocations_until_failure = 0;
    const R r = Fn(arguments...);
    allocations_until_failure = saved;
    return r;
  }
};

cuda::driver_api sparing_driver() {
  cuda::driver_api d = fake_cuda::make_driver();
  d.cuMemGetInfo = &paused_call<fake_cuda::mem_info>::call;
  d.cuMemAddressReserve = &paused_call<fake_cuda::reserve>::call;
  d.cuMemAddressFree = &paused_call<fake_cuda::address_free>::call;
  d.cuMemCreate = &paused_call<fake_cuda::create>::call;
  d.cuMemRelease = &paused_call<fake_cuda::release>::call;
  d.cuMemMap = &paused_call<fake_cuda::map>::call;
  d.cuMemUnmap = &paused_call<fake_cuda::unmap>::call;
  d.cuMemSetAccess = &paused_call<fake_cuda::set_access>::call;
  d.cuEventCreate = &paused_call<fake_cuda::event_create>::call;
  d.cuEventDestroy = &paused_call<fake_cuda::event_destroy>::call;
  d.cuEventRecord = &paused_call<fake_cuda::event_record>::call;
  d.cuEventQuery = &paused_call<fake_cuda::event_query>::call;
  d.cuEventSynchronize = &paused_call<fake_cuda::event_synchronize>::call;
  d.cuStreamSynchronize = &paused_call<fake_cuda::stream_synchronize>::call;
  d.cuStreamQuery = &paused_call<fake_cuda::stream_query>::call;
  d.cuMemsetD8Async = &paused_call<fake_cuda::memset_async>::call;
  return d;
}

/// Runs the steps on a fresh backend and pool with the `failing`th host allocation failing;
/// true if that allocation was reached.
bool run_steps(int failing, bool granule_commits) {
  SCOPED_TRACE(testing::Message() << "allocation " << failing << " of the steps fails, "
                                  << (granule_commits ? "granule" : "whole") << " commits");
  fake_cuda::driver_state gpu;
  gpu.device_memory_bytes = 256 * MiB;
  fake_cuda::state = &gpu;
  fake_cuda::current_context = nullptr;
  const cuda::driver_api driver = sparing_driver();
  bool reached = false;
  {
    auto created = cuda::cuda_backend::create(driver);
    EXPECT_TRUE(created.ok());
    if (!created.ok()) return false;
    std::unique_ptr<cuda::cuda_backend> backend = std::move(created.value());
    {
      pool_config config;
      config.name = "exhaustion";
      config.max_size_bytes = 128 * MiB;
      config.reservation_bytes = 32 * MiB;
      auto provider = std::make_unique<soma::detail::backend_memory_provider>(*backend, 0, 0);
      provider->set_granule_commits(granule_commits);
      stream_timeline a(0);
      pool p(config, std::move(provider));
      p.set_remap_free_memory(remap_mode::before_growth);
      std::vector<block*> live;
      live.reserve(16);
      auto allocate = [&](std::size_t bytes) {
        auto taken = p.allocate(bytes, a);
        EXPECT_TRUE(taken.ok()) << taken.error().message();
        if (taken.ok()) live.push_back(taken.value());
      };
      auto free_pending = [&](block* b) {
        std::erase(live, b);
        a.note_enqueued();
        p.free(b, a);
      };
      auto prove = [&] {
        const std::uint64_t position = a.note_enqueued();
        a.note_completed(position);
        a.prove_completed(position);
      };
      for (int i = 0; i < 4; ++i) allocate(4 * MiB);
      block* first = live[0];
      block* third = live[2];
      free_pending(first);
      free_pending(third);

      allocations_until_failure = failing;
      for (int attempt = 0; attempt < 2; ++attempt) {
        try {
          // A remap (granule commits) or growth, a small block, growth, then release.
          allocate(8 * MiB);
          allocate(512);
          allocate(6 * MiB);
          prove();
          p.trim_to(0);
          break;
        } catch (const std::bad_alloc&) {
          reached = true;
          allocations_until_failure = 0;  // host memory is back: the steps go on
        }
      }
      reached = reached || allocations_until_failure == 0;
      allocations_until_failure = 0;

      for (block* b : std::vector<block*>(live)) free_pending(b);
      prove();
      EXPECT_TRUE(p.try_release_everything()) << "free memory was lost";
      EXPECT_EQ(p.statistics().reserved_bytes, 0u);
      EXPECT_TRUE(gpu.mappings.empty()) << gpu.mappings.size() << " mappings left";
      EXPECT_TRUE(gpu.allocations.empty()) << gpu.allocations.size() << " allocations left";
    }
    EXPECT_TRUE(gpu.reservations.empty()) << gpu.reservations.size() << " reservations left";
  }
  fake_cuda::state = nullptr;
  return reached;
}

void sweep(bool granule_commits) {
  int reached = 0;
  for (int failing = 1; failing <= 300; ++failing) {
    if (!run_steps(failing, granule_commits)) break;
    ++reached;
    if (testing::Test::HasFailure()) break;  // one failing case tells; the rest repeat it
  }
  EXPECT_GT(reached, 0) << "the steps allocated nothing: no case was reached";
}

TEST(cuda_host_exhaustion, PoolMemoryOfWholeCommitsStaysOneWithTheDriver) { sweep(false); }

TEST(cuda_host_exhaustion, PoolMemoryOfGranuleCommitsStaysOneWithTheDriver) { sweep(true); }

// Completion is learned from a stream's markers, whose events are kept for later markers. Where
// host memory for that list runs out, the event goes instead: learning completion neither fails
// nor leaks an event. (It threw std::bad_alloc out of a completion query before.)
TEST(cuda_host_exhaustion, LearningCompletionNeverFailsForHostMemory) {
  int reached = 0;
  for (int failing = 1; failing <= 50; ++failing) {
    SCOPED_TRACE(testing::Message() << "allocation " << failing << " of the query fails");
    fake_cuda::driver_state gpu;
    fake_cuda::state = &gpu;
    fake_cuda::current_context = nullptr;
    const cuda::driver_api driver = sparing_driver();
    bool was_reached = false;
    {
      auto created = cuda::cuda_backend::create(driver);
      ASSERT_TRUE(created.ok());
      std::unique_ptr<cuda::cuda_backend> backend = std::move(created.value());
      stream_timeline timeline(0);
      auto made = backend->create_stream(0, timeline);
      ASSERT_TRUE(made.ok());
      auto stream = std::move(made.value());
      int x = 0;
      for (int i = 0; i < 3; ++i) ASSERT_TRUE(stream->enqueue_memset(&x, 0, sizeof x).ok());
      EXPECT_FALSE(timeline.has_completed(3));  // records a marker
      EXPECT_EQ(gpu.event_records, 1);
      gpu.run_all();
      allocations_until_failure = failing;
      bool completed = false;
      try {
        completed = timeline.has_completed(3);
      } catch (const std::bad_alloc&) {
        ADD_FAILURE() << "learning completion threw std::bad_alloc";
      }
      was_reached = allocations_until_failure == 0;
      allocations_until_failure = 0;
      EXPECT_TRUE(completed);
      EXPECT_TRUE(stream->synchronize().ok());
    }
    EXPECT_EQ(gpu.live_events, 0) << "an event was neither kept nor destroyed";
    fake_cuda::state = nullptr;
    if (!was_reached) break;
    ++reached;
  }
  EXPECT_GT(reached, 0) << "the query allocated nothing: no case was reached";
}

}  // namespace
