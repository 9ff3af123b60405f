// Tests of the C++ API (include/soma/soma.hpp): RAII objects release what they own, failures
// become exceptions with the right code and message, the memory resource and the owning
// pointer round-trip through the pool, and a host task that throws poisons its stream.
// Test suites carry the contract clause they prove (docs/design.md §1).
//
// Every test runs on every backend: pool memory (device memory on cuda) is reached only by
// stream operations (memset, memcpy into somaMallocHost memory), host tasks touch host memory
// only and never block. Figures of the cpu test configuration (cpu_test_config.hpp, included
// through backend_under_test.hpp) are checked only where it is in force.
#include <soma/soma.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include <unistd.h>

#include "backend_under_test.hpp"
#include "host_words.hpp"

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

soma::pool make_pool(std::uint64_t release_threshold_bytes = 0, std::string name = {}) {
  soma::pool_options options;
  options.device = 0;
  options.release_threshold_bytes = release_threshold_bytes;
  options.name = std::move(name);
  return soma::pool(options);
}

somaError_t g_skipped_task_ran = somaSuccess;
void mark_ran(void*) { g_skipped_task_ran = somaErrorUnknown; }

}  // namespace

// ---- S1: allocation --------------------------------------------------------------------------

TEST(S1_CxxApi, StreamAndEventOrderWorkAcrossStreams) {
  soma::stream producer;
  soma::stream consumer;
  soma::event produced;
  std::atomic<int> value{0};
  int seen = -1;
  producer.launch([&value] { value.store(42); });
  produced.record(producer);
  consumer.wait(produced);
  consumer.launch([&value, &seen] { seen = value.load(); });
  consumer.synchronize();
  EXPECT_EQ(seen, 42);
  EXPECT_TRUE(consumer.query());
  EXPECT_TRUE(produced.query());
  produced.synchronize();
}

TEST(S1_CxxApi, MovedStreamAndEventKeepWorking) {
  soma::stream first;
  const somaStream_t handle = first.handle();
  soma::stream second(std::move(first));
  EXPECT_EQ(second.handle(), handle);
  EXPECT_EQ(first.handle(), nullptr);  // NOLINT: moved-from state is specified
  soma::stream third;
  third = std::move(second);
  EXPECT_EQ(third.handle(), handle);
  int ran = 0;
  third.launch([&ran] { ran = 1; });
  third.synchronize();
  EXPECT_EQ(ran, 1);

  soma::event e;
  soma::event moved(std::move(e));
  moved.record(third);
  moved.synchronize();
  EXPECT_EQ(e.handle(), nullptr);  // NOLINT

  auto maybe = soma::stream::try_create();
  ASSERT_TRUE(maybe.has_value());
  maybe->synchronize();
}

TEST(S1_CxxApi, HugeAllocationThrowsSomaBadAllocWithCodeAndMessage) {
  soma::stream s;
  const std::size_t huge = std::size_t{1} << 50;
  try {
    (void)soma::malloc_async(huge, s);
    FAIL() << "a 1 PiB allocation succeeded";
  } catch (const soma::bad_alloc& e) {
    EXPECT_EQ(e.code(), somaErrorMemoryAllocation);
    EXPECT_NE(std::string(e.what()).find("somaErrorMemoryAllocation"), std::string::npos)
        << e.what();
    EXPECT_GT(std::strlen(e.detail()), 0u);
  }
  // Also catchable as std::bad_alloc, as C++ code expects of an allocator.
  EXPECT_THROW((void)soma::make_unique_async<char>(huge, s), std::bad_alloc);
  // Element count overflow is out of memory too, caught before the C call.
  EXPECT_THROW((void)soma::make_unique_async<std::uint64_t>(huge << 10, s), soma::bad_alloc);
  // Non-throwing forms.
  EXPECT_FALSE(soma::try_make_unique_async<char>(huge, s));
  soma::pool p = make_pool();
  soma::memory_resource resource(p);
  EXPECT_EQ(resource.try_allocate(s, huge), nullptr);
  EXPECT_EQ(p.used_bytes(), 0u) << "a failed call changes nothing in the pool";
}

TEST(S1_CxxApi, ZeroBytesGivesNullAndSucceeds) {
  soma::stream s;
  EXPECT_EQ(soma::malloc_async(0, s), nullptr);
  soma::free_async(nullptr, s);
}

TEST(S1_CxxApi, MemoryResourceRoundTrip) {
  soma::pool p = make_pool();
  soma::memory_resource resource(p);
  soma::stream s;
  constexpr std::size_t bytes = 4096;
  void* ptr = resource.allocate(s, bytes);
  ASSERT_NE(ptr, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(ptr) % soma::memory_resource::default_alignment, 0u);

  const somaPointerAttributes attributes = soma::pointer_attributes(ptr);
  EXPECT_EQ(attributes.isLiveAllocation, 1);
  EXPECT_EQ(attributes.pool, p.handle());
  EXPECT_EQ(attributes.base, ptr);
  EXPECT_EQ(attributes.size, bytes);
  EXPECT_EQ(attributes.device, 0);
  EXPECT_EQ(p.used_bytes(), bytes);

  // The memory is usable on the stream: written and read back by stream operations (the host
  // never touches pool memory, which is device memory on cuda). The copy lands in
  // somaMallocHost memory, so it stays asynchronous and in stream order.
  soma_test::host_buffer copy(bytes);
  s.memset_async(ptr, 0xab, bytes);
  s.memcpy_async(copy.data(), ptr, bytes);
  resource.deallocate(s, ptr, bytes);
  s.synchronize();
  EXPECT_TRUE(copy.all(0xab)) << "memset + memcpy did not read back what was written";
  EXPECT_EQ(p.used_bytes(), 0u);
  EXPECT_EQ(soma::pointer_attributes(ptr).isLiveAllocation, 0);

  // Synchronous forms: usable by any stream at return.
  void* sync_ptr = resource.allocate_sync(bytes, 128);
  ASSERT_NE(sync_ptr, nullptr);
  EXPECT_EQ(p.used_bytes(), bytes);
  resource.deallocate_sync(sync_ptr, bytes, 128);
  EXPECT_EQ(p.used_bytes(), 0u);

  // Equality: same pool.
  soma::pool other = make_pool();
  EXPECT_TRUE(resource == soma::memory_resource(p.handle()));
  EXPECT_FALSE(resource == soma::memory_resource(other));
}

TEST(S12_CxxApi, HostMemoryAndValueOperationsOrderStreams) {
  soma::stream held;
  soma::stream writer;
  auto* words = static_cast<std::uint32_t*>(soma::malloc_host(2 * sizeof(std::uint32_t)));
  ASSERT_NE(words, nullptr);
  words[0] = 0;
  words[1] = 0;
  held.wait_value32(&words[0], 1);  // held until writer sets word 0
  held.write_value32(&words[1], 7);
  EXPECT_FALSE(held.query());
  writer.write_value32(&words[0], 1);
  held.synchronize();
  EXPECT_EQ(std::atomic_ref<std::uint32_t>(words[1]).load(), 7u);
  EXPECT_THROW(held.wait_value32(nullptr, 1), soma::error);
  soma::free_host(words);
  soma::free_host(words);  // refused, never throws
  EXPECT_EQ(somaGetLastError(), somaErrorInvalidValue);
  EXPECT_EQ(soma::malloc_host(0), nullptr);
}

TEST(S6_CxxApi, PoolAccessIsGrantedAndReported) {
  if (soma::device_count() < 2) GTEST_SKIP() << "needs 2 devices";
  soma::pool p = make_pool();
  EXPECT_EQ(p.access(0), somaMemAccessFlagsProtReadWrite);
  EXPECT_EQ(p.access(1), somaMemAccessFlagsProtNone);
  p.set_access(1, somaMemAccessFlagsProtRead);
  EXPECT_EQ(p.access(1), somaMemAccessFlagsProtRead);
  try {
    p.set_access(0, somaMemAccessFlagsProtNone);
    ADD_FAILURE() << "the owner cannot lose access";
  } catch (const soma::error& e) {
    EXPECT_EQ(e.code(), somaErrorInvalidDevice);
  }
  const std::size_t before = soma::committed_bytes(0);
  soma::stream s;
  void* ptr = soma::malloc_async(1 << 20, p, s);
  EXPECT_GE(soma::committed_bytes(0), before + (1 << 20));
  soma::free_async(ptr, s);
  s.synchronize();
}

TEST(S1_CxxApi, MemoryResourceRejectsAlignmentItCannotGive) {
  soma::pool p = make_pool();
  soma::memory_resource resource(p);
  soma::stream s;
  try {
    (void)resource.allocate(s, 64, 512);
    FAIL() << "alignment 512 accepted";
  } catch (const soma::error& e) {
    EXPECT_EQ(e.code(), somaErrorInvalidValue);
  }
  EXPECT_THROW((void)resource.allocate(s, 64, 3), soma::error);
  EXPECT_EQ(resource.try_allocate(s, 64, 1024), nullptr);
  EXPECT_EQ(p.used_bytes(), 0u);
}

// ---- S2: free ------------------------------------------------------------------------------

TEST(S2_CxxApi, DoubleFreeThroughCAndCxxThrowsInvalidValue) {
  soma::stream s;
  void* ptr = soma::malloc_async(1024, s);
  ASSERT_NE(ptr, nullptr);
  ASSERT_EQ(somaFreeAsync(ptr, s.handle()), somaSuccess);  // the raw C call frees it
  try {
    soma::free_async(ptr, s);
    FAIL() << "second free accepted";
  } catch (const soma::bad_alloc& e) {
    FAIL() << "double free reported as out of memory: " << e.what();
  } catch (const soma::error& e) {
    EXPECT_EQ(e.code(), somaErrorInvalidValue);
    EXPECT_STREQ(e.name(), "somaErrorInvalidValue");
    EXPECT_GT(std::strlen(e.detail()), 0u) << "the message should say what was freed twice";
  }
  // check() on the raw C result throws the same way.
  EXPECT_THROW(soma::check(somaFreeAsync(ptr, s.handle())), soma::error);
  s.synchronize();  // a bad free is not an asynchronous error: the stream stays healthy
}

TEST(S2_CxxApi, UniqueAsyncPtrFreesOnItsStream) {
  soma::pool p = make_pool();
  soma::stream s;
  {
    auto buffer = soma::make_unique_async<std::uint32_t>(1000, s, p);
    ASSERT_TRUE(buffer);
    EXPECT_EQ(buffer.size(), 1000u);
    EXPECT_EQ(buffer.size_bytes(), 4000u);
    EXPECT_EQ(buffer.stream(), s);
    EXPECT_EQ(p.used_bytes(), 4000u);
    EXPECT_EQ(soma::pointer_attributes(buffer.get()).pool, p.handle());
  }
  s.synchronize();
  EXPECT_EQ(p.used_bytes(), 0u) << "the destructor did not free";

  // Move transfers ownership: one free only.
  auto a = soma::make_unique_async<char>(256, s, p);
  char* raw = a.get();
  soma::unique_async_ptr<char> b(std::move(a));
  EXPECT_FALSE(a);  // NOLINT
  EXPECT_EQ(b.get(), raw);
  b = soma::make_unique_async<char>(512, s, p);  // frees the first
  s.synchronize();
  EXPECT_EQ(p.used_bytes(), 512u);
  EXPECT_EQ(soma::pointer_attributes(raw).isLiveAllocation, 0);

  // reset(stream) frees on another stream, ordered after the first one's work.
  soma::stream other;
  soma::event done;
  done.record(s);
  other.wait(done);
  b.reset(other);
  EXPECT_FALSE(b);
  other.synchronize();
  EXPECT_EQ(p.used_bytes(), 0u);

  // release() hands the pointer back: the owner no longer frees.
  auto c = soma::make_unique_async<char>(64, s, p);
  char* released = c.release();
  c.reset();
  s.synchronize();
  EXPECT_EQ(p.used_bytes(), 64u);
  soma::free_async(released, s);
  s.synchronize();
  EXPECT_EQ(p.used_bytes(), 0u);
}

// ---- S4, S5: pools -----------------------------------------------------------------------

TEST(S4_CxxApi, DefaultPoolViewDoesNotDestroyAndCurrentPoolFollowsMakeCurrent) {
  const somaMemPool_t default_handle = soma::pool::default_for(0).handle();  // view dies here
  EXPECT_NE(default_handle, nullptr);
  EXPECT_EQ(soma::device(0).default_pool().handle(), default_handle);
  EXPECT_FALSE(soma::pool::default_for(0).is_owning());

  soma::stream s;
  {
    soma::pool p = make_pool();
    p.make_current();
    EXPECT_EQ(soma::pool::current_for(0).handle(), p.handle());
    void* ptr = soma::malloc_async(100, s);
    EXPECT_EQ(soma::pointer_attributes(ptr).pool, p.handle());
    soma::free_async(ptr, s);
    s.synchronize();
    soma::pool::default_for(0).make_current();
  }
  EXPECT_EQ(soma::pool::current_for(0).handle(), default_handle);
  void* ptr = soma::malloc_async(100, s);  // the default pool still works
  EXPECT_EQ(soma::pointer_attributes(ptr).pool, default_handle);
  soma::free_async(ptr, s);
  s.synchronize();
}

TEST(S5_CxxApi, PoolOptionsBecomeAttributes) {
  soma::pool p = make_pool(64 * kMiB, "cxx-test");
  EXPECT_TRUE(p.is_owning());
  EXPECT_EQ(p.device(), 0);
  EXPECT_EQ(p.release_threshold(), 64 * kMiB);
  p.set_release_threshold(UINT64_MAX);
  EXPECT_EQ(p.release_threshold(), UINT64_MAX);

  EXPECT_TRUE(p.reuse_follow_event_dependencies());
  EXPECT_TRUE(p.reuse_allow_opportunistic());
  EXPECT_TRUE(p.reuse_allow_internal_dependencies());
  p.set_reuse_allow_opportunistic(false);
  EXPECT_FALSE(p.reuse_allow_opportunistic());
  p.set_reuse_allow_opportunistic(true);

  soma::pool moved(std::move(p));
  EXPECT_FALSE(p.is_owning());  // NOLINT
  EXPECT_EQ(moved.release_threshold(), UINT64_MAX);
}

TEST(S5_CxxApi, BadPoolOptionsThrowOrGiveNothing) {
  soma::pool_options options;
  options.device = 1000;
  try {
    soma::pool p(options);
    FAIL() << "a pool on device 1000 was created";
  } catch (const soma::error& e) {
    EXPECT_EQ(e.code(), somaErrorInvalidValue);  // as CUDA, for a nonexistent device id
  }
  EXPECT_FALSE(soma::pool::try_create(options).has_value());
  options.device = 0;
  auto made = soma::pool::try_create(options);
  ASSERT_TRUE(made.has_value());
  EXPECT_TRUE(made->is_owning());
}

TEST(S5_CxxApi, DestroyingPoolWithLiveAllocationDefersRelease) {
  soma::stream s;
  auto p = std::make_unique<soma::pool>(make_pool());
  void* ptr = soma::malloc_async(4096, *p, s);
  p.reset();                 // returns at once (S5)
  soma::free_async(ptr, s);  // the live allocation can still be freed
  s.synchronize();
}

// ---- S8: capabilities ---------------------------------------------------------------------

TEST(S8_CxxApi, DeviceQueriesMatchConfiguration) {
  EXPECT_GE(soma::device_count(), 1);
  const soma::device d0(0);
  EXPECT_TRUE(d0.memory_pools_supported());
  EXPECT_GT(d0.total_memory_bytes(), 0u);
  EXPECT_GT(d0.granularity_bytes(), 0u);
  if (soma_test::on_cpu_backend()) {
    EXPECT_STREQ(soma::backend_name(), "cpu");
    EXPECT_NE(d0.supported_handle_types() & somaMemHandleTypePosixFileDescriptor, 0u);
  }
  if (soma_test::exact_test_config()) {
    ASSERT_EQ(soma_test::detail::cpu_test_config_status, somaSuccess)
        << "the cpu test configuration was set after the runtime started";
    EXPECT_EQ(soma::device_count(), soma_test::kTestDeviceCount);
    EXPECT_EQ(d0.total_memory_bytes(), soma_test::kTestDeviceMemoryBytes);
    EXPECT_EQ(d0.granularity_bytes(), soma_test::kTestGranularityBytes);
  }
  try {
    (void)soma::device(1000).attribute(somaDevAttrMemoryPoolsSupported);
    FAIL() << "device 1000 answered";
  } catch (const soma::error& e) {
    EXPECT_EQ(e.code(), somaErrorInvalidDevice);
  }
  EXPECT_EQ(soma::device::current().ordinal(), 0);
  const soma::memory_info info = soma::get_memory_info();
  EXPECT_LE(info.free_bytes, info.total_bytes);
}

// ---- S9, S10: release and statistics -------------------------------------------------------

TEST(S9_CxxApi, ThresholdDecidesWhatSynchronizeReleasesAndTrimReleasesTheRest) {
  soma::stream s;
  soma::pool small = make_pool(0);
  soma::pool kept = make_pool(UINT64_MAX);
  const std::size_t bytes = 4 * kMiB;

  soma::free_async(soma::malloc_async(bytes, small, s), s);
  soma::free_async(soma::malloc_async(bytes, kept, s), s);
  s.synchronize();
  EXPECT_EQ(small.reserved_bytes(), 0u) << "threshold 0 keeps nothing after synchronize";
  EXPECT_GE(kept.reserved_bytes(), bytes) << "threshold max keeps the memory";

  kept.trim_to(0);
  EXPECT_EQ(kept.reserved_bytes(), 0u) << "nothing is live, so trim releases everything";
}

TEST(S10_CxxApi, StatisticsAndHighWatermarks) {
  soma::stream s;
  soma::pool p = make_pool(UINT64_MAX);
  void* a = soma::malloc_async(3 * kMiB, p, s);
  void* b = soma::malloc_async(1000, p, s);
  EXPECT_EQ(p.used_bytes(), 3 * kMiB + 1000);
  EXPECT_GE(p.reserved_bytes(), p.used_bytes());
  EXPECT_EQ(p.reserved_bytes() % soma::device(0).granularity_bytes(), 0u);
  soma::free_async(a, s);
  s.synchronize();
  EXPECT_EQ(p.used_bytes(), 1000u);
  EXPECT_EQ(p.used_high_bytes(), 3 * kMiB + 1000);
  const std::uint64_t reserved = p.reserved_bytes();
  p.reset_high_watermarks();
  EXPECT_EQ(p.used_high_bytes(), 1000u);
  EXPECT_EQ(p.reserved_high_bytes(), reserved);
  soma::free_async(b, s);
  s.synchronize();
}

// ---- errors of asynchronous work (design.md §2 "Errors") -----------------------------------

TEST(Errors_CxxApi, ThrowingHostTaskBecomesStickyStreamError) {
  soma::stream s;
  s.launch([] { throw std::runtime_error("task failed"); });
  // Later work on the stream is skipped. A plain C task, so that a skipped task leaks nothing.
  g_skipped_task_ran = somaSuccess;
  const somaError_t enqueued = somaLaunchHostFunc(s.handle(), &mark_ran, nullptr);
  EXPECT_TRUE(enqueued == somaSuccess || enqueued == somaErrorLaunchFailure);
  try {
    s.synchronize();
    FAIL() << "synchronize did not report the failed task";
  } catch (const soma::error& e) {
    EXPECT_EQ(e.code(), somaErrorLaunchFailure) << e.what();
  }
  EXPECT_EQ(g_skipped_task_ran, somaSuccess) << "work after the failure ran";
  // Sticky: every observer sees it again.
  EXPECT_THROW(s.synchronize(), soma::error);
  EXPECT_THROW((void)s.query(), soma::error);
  int ran = 0;
  try {
    s.launch([&ran] { ran = 1; });
    FAIL() << "launch on a failed stream succeeded";
  } catch (const soma::error& e) {
    EXPECT_EQ(e.code(), somaErrorLaunchFailure);
  }
  EXPECT_EQ(s.try_launch([&ran] { ran = 1; }), somaErrorLaunchFailure);
  EXPECT_EQ(ran, 0);
  // Allocation and free still work, so memory can be given back.
  void* ptr = soma::malloc_async(128, s);
  EXPECT_NE(ptr, nullptr);
  soma::free_async(ptr, s);

  // Other streams are not affected.
  soma::stream healthy;
  healthy.synchronize();
}

TEST(Errors_CxxApi, TaskStatusesAndSomaExceptionsAlsoFailTheStream) {
  soma::stream returns_status;
  returns_status.launch([] { return somaErrorInvalidValue; });
  EXPECT_THROW(returns_status.synchronize(), soma::error);

  soma::stream throws_soma;
  throws_soma.launch([] { soma::throw_error(somaErrorNotSupported, "inside a task"); });
  EXPECT_THROW(throws_soma.synchronize(), soma::error);

  soma::stream returns_success;
  returns_success.launch([] { return somaSuccess; });
  returns_success.synchronize();

  soma::stream s;
  soma::event recorded_after_failure;
  s.launch([] { throw 7; });
  // The record itself fails if the task has already failed; otherwise the event reports it.
  bool record_failed = false;
  try {
    recorded_after_failure.record(s);
  } catch (const soma::error& e) {
    EXPECT_EQ(e.code(), somaErrorLaunchFailure);
    record_failed = true;
  }
  if (!record_failed) {
    EXPECT_THROW(recorded_after_failure.synchronize(), soma::error);
  }
  EXPECT_THROW(s.synchronize(), soma::error);
}

// ---- S15: graphs ------------------------------------------------------------------------------

TEST(S15_CxxApi, GraphBuiltNodeByNodeRunsAtEveryLaunch) {
  soma::stream s;
  auto* host = static_cast<unsigned char*>(soma::malloc_host(4096));
  soma::graph g;
  void* memory = nullptr;
  const soma::graph_node alloc = g.add_alloc(4096, &memory);
  const soma::graph_node set = g.add_memset(memory, 0x3c, 4096, {alloc});
  const soma::graph_node copy = g.add_memcpy(host, memory, 4096, {set});
  g.add_free(memory, {copy});
  soma::graph_exec exec(g);
  for (int i = 0; i < 2; ++i) {
    std::memset(host, 0, 4096);
    exec.launch(s);
    s.synchronize();
    EXPECT_EQ(host[0], 0x3c);
    EXPECT_EQ(host[4095], 0x3c);
  }
  try {
    soma::graph_exec second(g);
    ADD_FAILURE() << "a graph with memory nodes has one executable at a time";
  } catch (const soma::error& e) {
    EXPECT_EQ(e.code(), somaErrorNotSupported);
  }
  soma::free_host(host);
}

TEST(S15_CxxApi, CaptureScopeRecordsInsteadOfRunning) {
  soma::stream s;
  std::atomic<int> runs{0};
  soma::graph g = [&] {
    soma::capture_scope capture(s);
    somaHostFn_t count = [](void* data) { static_cast<std::atomic<int>*>(data)->fetch_add(1); };
    EXPECT_EQ(somaLaunchHostFunc(s.handle(), count, &runs), somaSuccess);
    return capture.end();
  }();
  s.synchronize();
  EXPECT_EQ(runs.load(), 0) << "captured work does not run";
  soma::graph_exec exec(g);
  exec.launch(s);
  exec.launch(s);
  s.synchronize();
  EXPECT_EQ(runs.load(), 2);
}

TEST(S15_CxxApi, LeavingACaptureScopeWithoutEndStopsTheCapture) {
  soma::stream s;
  { soma::capture_scope capture(s); }
  somaStreamCaptureStatus state = somaStreamCaptureStatusActive;
  ASSERT_EQ(somaStreamIsCapturing(s.handle(), &state), somaSuccess);
  EXPECT_EQ(state, somaStreamCaptureStatusNone);
}

TEST(S8_CxxApi, DeviceGuardSwitchesAndRestoresTheCurrentDevice) {
  ASSERT_EQ(soma::device::current().ordinal(), 0);
  const int last = soma::device_count() - 1;
  {
    const soma::device_guard on(last);
    EXPECT_EQ(on.status(), somaSuccess);
    EXPECT_EQ(soma::device::current().ordinal(), last);
    soma::synchronize_device(0);  // by number: the current device stays `last`
    EXPECT_EQ(soma::device::current().ordinal(), last);
  }
  EXPECT_EQ(soma::device::current().ordinal(), 0);
  {
    const soma::device_guard refused(1000);
    EXPECT_EQ(refused.status(), somaErrorInvalidDevice);
    EXPECT_EQ(soma::device::current().ordinal(), 0);
  }
  EXPECT_EQ(soma::device::current().ordinal(), 0);
  try {
    soma::synchronize_device(1000);
    FAIL() << "device 1000 was synchronized";
  } catch (const soma::error& e) {
    EXPECT_EQ(e.code(), somaErrorInvalidDevice);
  }
  EXPECT_EQ(soma::device::current().ordinal(), 0);
}

TEST(S5_CxxApi, PoolPropsDescribeThePoolOptions) {
  soma::pool_options options;
  options.device = 0;
  options.max_size_bytes = 64 << 20;
  options.exportable = true;
  const somaMemPoolProps props = soma::pool_props(options);
  EXPECT_EQ(props.allocType, somaMemAllocationTypePinned);
  EXPECT_EQ(props.location.type, somaMemLocationTypeDevice);
  EXPECT_EQ(props.location.id, 0);
  EXPECT_EQ(props.maxSize, std::size_t{64} << 20);
  EXPECT_EQ(props.handleTypes, somaMemHandleTypePosixFileDescriptor);
  options.exportable = false;
  EXPECT_EQ(soma::pool_props(options).handleTypes, somaMemHandleTypeNone);
  const soma::pool made(props);  // what the props describe, somaMemPoolCreate makes
  EXPECT_EQ(made.device(), 0);
}

TEST(S10_CxxApi, HistoryRecordsScopesAndExportsATrace) {
  soma::history::record(1024);
  const soma::stream s;
  {
    const soma::memory_scope scope("optimizer");
    auto buffer = soma::make_unique_async<char>(4096, s);
  }
  const std::string path = "/tmp/soma_cxx_history_" + std::to_string(getpid()) + ".json";
  soma::history::export_trace(path);
  soma::history::stop();
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path.c_str());
  EXPECT_NE(text.find("\"scope\":\"optimizer\""), std::string::npos) << text;
  try {
    const soma::memory_scope empty("");
    FAIL() << "an empty scope label was taken";
  } catch (const soma::error& e) {
    EXPECT_EQ(e.code(), somaErrorInvalidValue);
  }
}

TEST(S10_CxxApi, SnapshotShowsLiveBlocksAndMovesOwnership) {
  soma::pool p = make_pool(0, "cxx-snapshot");
  soma::stream s;
  void* live = soma::malloc_async(3000, p, s);
  soma::snapshot taken = soma::snapshot::of(p);
  ASSERT_EQ(taken.pools().size(), 1u);
  const somaMemPoolSnapshot& only = taken.pools()[0];
  EXPECT_EQ(std::string(only.name), "cxx-snapshot");
  EXPECT_EQ(only.usedBytes, 3000u);
  bool found = false;
  for (const somaMemBlockInfo& b : soma::snapshot::blocks(only)) {
    if (b.address == live) {
      found = true;
      EXPECT_EQ(b.state, somaMemBlockLive);
      EXPECT_EQ(b.requestedBytes, 3000u);
    }
  }
  EXPECT_TRUE(found);
  soma::snapshot moved(std::move(taken));
  EXPECT_EQ(moved.pools().size(), 1u);
  EXPECT_TRUE(taken.pools().empty());  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_GE(soma::snapshot::all().pools().size(), 2u) << "the default pools and this one";
  soma::free_async(live, s);
  s.synchronize();
}

TEST(S3_CxxApi, TheLastOutOfMemoryOfAPoolIsData) {
  soma::pool p = make_pool();
  EXPECT_EQ(p.last_out_of_memory().change, somaOomChangeNone);
  soma::stream s;
  EXPECT_THROW((void)soma::malloc_async(std::size_t{1} << 50, p, s), soma::bad_alloc);
  const somaOutOfMemoryReport report = p.last_out_of_memory();
  EXPECT_EQ(report.change, somaOomChangeLargerMaxSize);
  EXPECT_EQ(report.requestedBytes, std::size_t{1} << 50);
}
