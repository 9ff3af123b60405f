// The cuda backend without a GPU: the loader and SOMA_BACKEND when no driver is usable, and
// the backend's own logic (contexts, memory bookkeeping, positions, completion markers,
// sticky errors) over a fake driver (fake_cuda_driver.hpp). Runs everywhere.
#include "backend/cuda/cuda_backend.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/completion_tracker.hpp"
#include "runtime/backend_memory_provider.hpp"
#include "fake_cuda_driver.hpp"
#include "run_in_child.hpp"
#include "work_nodes.hpp"

namespace {

using soma::detail::error_code;
using soma::detail::status;
using soma::detail::stream_timeline;
using ::testing::HasSubstr;
namespace be = soma::detail::backend;
namespace cuda = soma::detail::backend::cuda;

constexpr std::size_t MiB = std::size_t{1} << 20;

/// Sets SOMA_BACKEND for one test and restores it afterwards.
class backend_choice {
 public:
  explicit backend_choice(const char* value) {
    if (const char* old = std::getenv("SOMA_BACKEND")) saved_ = old;
    ::setenv("SOMA_BACKEND", value, 1);
  }
  ~backend_choice() {
    if (saved_)
      ::setenv("SOMA_BACKEND", saved_->c_str(), 1);
    else
      ::unsetenv("SOMA_BACKEND");
  }

 private:
  std::optional<std::string> saved_;
};

// ---- loader and factory ----------------------------------------------------------------

TEST(cuda_loader, MissingLibraryIsNoDeviceWithTheReason) {
  auto loaded = cuda::load_driver("libsoma-no-such-cuda-driver.so.1");
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.error().code(), error_code::no_device);
  EXPECT_THAT(loaded.error().message(), HasSubstr("libsoma-no-such-cuda-driver.so.1 not found: "));
}

TEST(cuda_loader, StubLibraryFailsCuInitCleanly) {
  const char* stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (::access(stub, R_OK) != 0) GTEST_SKIP() << "no CUDA toolkit stub at " << stub;
  auto loaded = cuda::load_driver(stub);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.error().code(), error_code::no_device);
  EXPECT_THAT(loaded.error().message(), HasSubstr("cuInit failed: CUDA_ERROR_STUB_LIBRARY"));
}

TEST(cuda_factory, CudaWithoutUsableDriverIsAClearError) {
  if (cuda::probe().ok()) GTEST_SKIP() << "a CUDA driver and device are present";
  backend_choice choice("cuda");
  auto created = be::create_backend({});
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(created.error().code(), error_code::no_device);
  EXPECT_THAT(created.error().message(), HasSubstr("SOMA_BACKEND=cuda: "));
  EXPECT_THAT(created.error().message(), HasSubstr(cuda::probe().message()));
}

TEST(cuda_factory, AutoFallsBackToCpuWithoutADriver) {
  if (cuda::probe().ok()) GTEST_SKIP() << "a CUDA driver and device are present";
  backend_choice choice("auto");
  auto created = be::create_backend({});
  ASSERT_TRUE(created.ok()) << created.error().message();
  EXPECT_EQ(created.value()->name(), "cpu");
}

TEST(cuda_factory, UnknownChoiceIsAnInitializationError) {
  backend_choice choice("gpu");
  auto created = be::create_backend({});
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(created.error().code(), error_code::initialization_error);
}

TEST(cuda_driver_api, TranslatesResultsAndNamesThemWhenTheDriverCannot) {
  fake_cuda::driver_state gpu;
  gpu.error_names_known = false;
  fake_cuda::state = &gpu;
  const cuda::driver_api driver = fake_cuda::make_driver();
  EXPECT_EQ(driver.describe(cuda::CUDA_ERROR_OUT_OF_MEMORY),
            "CUDA_ERROR_OUT_OF_MEMORY: out of memory");
  EXPECT_EQ(driver.describe(12345), "CUresult 12345");
  const status failed =
      driver.check(cuda::CUDA_ERROR_ILLEGAL_ADDRESS, "cuStreamSynchronize", "stream 1");
  EXPECT_EQ(failed.code(), error_code::illegal_address);
  EXPECT_THAT(failed.message(),
              HasSubstr("cuStreamSynchronize failed (CUDA_ERROR_ILLEGAL_ADDRESS"));
  EXPECT_THAT(failed.message(), HasSubstr("): stream 1"));
  EXPECT_TRUE(driver.check(cuda::CUDA_SUCCESS, "cuInit").ok());
  EXPECT_EQ(cuda::translate(cuda::CUDA_ERROR_NOT_READY), error_code::not_ready);
  EXPECT_EQ(cuda::translate(cuda::CUDA_ERROR_MISALIGNED_ADDRESS), error_code::launch_failure);
  EXPECT_EQ(cuda::translate(cuda::CUDA_ERROR_STUB_LIBRARY), error_code::no_device);
  EXPECT_EQ(cuda::translate(cuda::CUDA_ERROR_OPERATING_SYSTEM), error_code::operating_system);
  EXPECT_EQ(cuda::translate(cuda::CUDA_ERROR_CONTEXT_IS_DESTROYED), error_code::invalid_handle);
  EXPECT_EQ(cuda::translate(cuda::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH),
            error_code::initialization_error);
  EXPECT_EQ(cuda::translate(cuda::CUDA_SUCCESS), error_code::success);
  EXPECT_EQ(cuda::translate(424242), error_code::unknown);
  fake_cuda::state = nullptr;
}

// ---- the backend over the fake driver ------------------------------------------------------

class cuda_fake_driver : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_cuda::state = &gpu_;
    fake_cuda::current_context = nullptr;
    driver_ = fake_cuda::make_driver();
  }
  void TearDown() override {
    EXPECT_EQ(gpu_.context_errors, 0) << "a driver call ran without the context it needs";
    EXPECT_EQ(gpu_.destroyed_stream_calls, 0) << "a driver call named a destroyed CUstream";
    fake_cuda::state = nullptr;
  }
  std::unique_ptr<cuda::cuda_backend> open() {
    auto created = cuda::cuda_backend::create(driver_);
    EXPECT_TRUE(created.ok()) << created.error().message();
    return created.ok() ? std::move(created.value()) : nullptr;
  }
  std::unique_ptr<be::stream> stream_on(cuda::cuda_backend& backend, int device,
                                        stream_timeline& timeline) {
    auto created = backend.create_stream(device, timeline);
    EXPECT_TRUE(created.ok()) << created.error().message();
    return std::move(created.value());
  }
  /// What the event tests start from: a backend, stream a on device 0, stream b on b_device,
  /// and one event. Members go in reverse order: the event and streams before their timelines
  /// and the backend.
  struct event_setup {
    std::unique_ptr<cuda::cuda_backend> backend;
    stream_timeline a_line{0}, b_line{1};
    std::unique_ptr<be::stream> a, b;
    std::unique_ptr<be::event> e;
  };
  void set_up_events(event_setup& s, int b_device) {
    s.backend = open();
    ASSERT_NE(s.backend, nullptr);
    s.a = stream_on(*s.backend, 0, s.a_line);
    s.b = stream_on(*s.backend, b_device, s.b_line);
    auto made = s.backend->create_event();
    ASSERT_TRUE(made.ok()) << made.error().message();
    s.e = std::move(made.value());
  }
  /// A CUstream the application made on device (for adoption), as the fake driver sees it.
  static cuda::CUstream native_stream(int device) {
    cuda::CUstream native = nullptr;
    fake_cuda::current_context = fake_cuda::context_of(device);
    EXPECT_EQ(fake_cuda::stream_create(&native, 0), cuda::CUDA_SUCCESS);
    fake_cuda::current_context = nullptr;
    return native;
  }
  /// n physical allocations of one 2 MiB granule each on device 0, as parts to map end to end.
  static std::vector<be::backend::mapping_part> granules(cuda::cuda_backend& backend, int n) {
    std::vector<be::backend::mapping_part> parts;
    for (int i = 0; i < n; ++i) {
      auto handle = backend.create_physical(0, 2 * MiB, 0);
      EXPECT_TRUE(handle.ok()) << handle.error().message();
      if (handle.ok()) parts.push_back({handle.value(), 0, 2 * MiB});
    }
    return parts;
  }
  fake_cuda::stream_state* fake_stream(const be::stream& s) const {
    return fake_cuda::as_stream(static_cast<cuda::CUstream>(s.native_handle()));
  }

  fake_cuda::driver_state gpu_;
  cuda::driver_api driver_;
};

TEST_F(cuda_fake_driver, DevicesUsePrimaryContextsAndReportProperties) {
  auto backend = open();
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->name(), "cuda");
  EXPECT_EQ(backend->device_count(), 2);
  EXPECT_EQ(gpu_.retained_contexts, 2);
  const be::device_properties p = backend->properties(1);
  EXPECT_EQ(p.name, "Fake GPU 1");
  EXPECT_EQ(p.total_memory_bytes, 64 * MiB);
  EXPECT_EQ(p.granularity_bytes, 2 * MiB);
  EXPECT_EQ(p.supported_handle_types, be::handle_type_posix_fd);  // fabric is masked off
  EXPECT_TRUE(p.memory_pools_supported);
  EXPECT_TRUE(backend->can_access_peer(0, 1));
  EXPECT_FALSE(backend->can_access_peer(0, 0));
  EXPECT_FALSE(backend->can_access_peer(0, 7));
  backend.reset();
  EXPECT_EQ(gpu_.retained_contexts, 0);
}

TEST_F(cuda_fake_driver, GranularityAlsoServesExportableMemory) {
  gpu_.exportable_granularity_bytes = 4 * MiB;
  auto backend = open();
  EXPECT_EQ(backend->properties(0).granularity_bytes, 4 * MiB);
}

TEST_F(cuda_fake_driver, CallsRestoreTheCallersContext) {
  auto backend = open();
  fake_cuda::current_context = fake_cuda::context_of(1);  // the application works on device 1
  stream_timeline timeline(0);
  auto s = stream_on(*backend, 0, timeline);
  auto base = backend->reserve_address(0, 4 * MiB);
  ASSERT_TRUE(base.ok());
  auto handle = backend->create_physical(0, 2 * MiB, 0);
  ASSERT_TRUE(handle.ok());
  ASSERT_TRUE(backend->map(base.value(), 2 * MiB, handle.value(), 0).ok());
  ASSERT_TRUE(s->enqueue_memset(reinterpret_cast<void*>(base.value()), 0, 64).ok());
  EXPECT_FALSE(timeline.has_completed(1));
  ASSERT_TRUE(s->synchronize().ok());
  EXPECT_EQ(fake_cuda::current_context, fake_cuda::context_of(1));
  EXPECT_EQ(fake_stream(*s)->device, 0);
  backend->unmap(base.value(), 2 * MiB);
  backend->release_physical(handle.value());
  backend->free_address(base.value(), 4 * MiB);
  EXPECT_EQ(fake_cuda::current_context, fake_cuda::context_of(1));
}

TEST_F(cuda_fake_driver, ReserveCommitMapAndReleaseKeepTheBooks) {
  auto backend = open();
  auto base = backend->reserve_address(0, 3 * MiB);  // rounded up to whole granules
  ASSERT_TRUE(base.ok()) << base.error().message();
  EXPECT_EQ(base.value() % (2 * MiB), 0u);
  EXPECT_EQ(gpu_.reservations.at(base.value()), 4 * MiB);
  auto handle = backend->create_physical(0, 2 * MiB, 0);
  ASSERT_TRUE(handle.ok()) << handle.error().message();
  EXPECT_EQ(backend->committed_bytes(0), 2 * MiB);
  EXPECT_EQ(backend->committed_bytes(1), 0u);
  ASSERT_TRUE(backend->map(base.value() + 2 * MiB, 2 * MiB, handle.value(), 0).ok());
  const auto& mapped = gpu_.mappings.at(base.value() + 2 * MiB);
  EXPECT_EQ(mapped.access.at(0), cuda::CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  EXPECT_EQ(mapped.access.size(), 1u);
  EXPECT_EQ(backend->map(base.value() + 8 * MiB, 2 * MiB, handle.value(), 0).code(),
            error_code::invalid_value);  // outside the reservation
  backend->unmap(base.value() + 2 * MiB, 2 * MiB);
  EXPECT_TRUE(gpu_.mappings.empty());
  backend->release_physical(handle.value());
  EXPECT_EQ(backend->committed_bytes(0), 0u);
  EXPECT_TRUE(gpu_.allocations.empty());
  backend->free_address(base.value(), 3 * MiB);  // the caller's size; the backend knows 4 MiB
  EXPECT_TRUE(gpu_.reservations.empty());
  EXPECT_FALSE(backend->can_discard_physical_part());
}

// Release and remap unmap in batches (shared/targets.md: cuMemUnmap costs 16-27 us a call):
// a range of several mappings, end to end, goes in one driver call.
TEST_F(cuda_fake_driver, UnmapOfSeveralMappingsIsOneDriverCall) {
  auto backend = open();
  auto base = backend->reserve_address(0, 8 * MiB);
  ASSERT_TRUE(base.ok()) << base.error().message();
  const std::vector<be::backend::mapping_part> parts = granules(*backend, 4);
  ASSERT_TRUE(backend->map_parts(base.value(), parts, 0).ok());
  ASSERT_EQ(gpu_.mappings.size(), 4u);
  gpu_.unmap_calls = 0;
  backend->unmap(base.value(), 8 * MiB);
  EXPECT_EQ(gpu_.unmap_calls, 1);
  EXPECT_TRUE(gpu_.mappings.empty());
  EXPECT_EQ(backend->unmap_fallbacks(), 0u);
  // The range is a reservation again: the same memory maps there anew.
  ASSERT_TRUE(backend->map_parts(base.value(), parts, 0).ok());
  backend->unmap(base.value(), 8 * MiB);
  for (const auto& part : parts) backend->release_physical(part.handle);
  backend->free_address(base.value(), 8 * MiB);
  EXPECT_TRUE(gpu_.allocations.empty());
}

TEST_F(cuda_fake_driver, UnmapTakesACallAMappingWhereTheDriverRefusesARangeOfSeveral) {
  gpu_.unmap_one_mapping_only = true;
  auto backend = open();
  auto base = backend->reserve_address(0, 6 * MiB);
  ASSERT_TRUE(base.ok()) << base.error().message();
  const std::vector<be::backend::mapping_part> parts = granules(*backend, 3);
  ASSERT_TRUE(backend->map_parts(base.value(), parts, 0).ok());
  gpu_.unmap_calls = 0;
  backend->unmap(base.value(), 6 * MiB);
  EXPECT_EQ(gpu_.unmap_calls, 1 + 3);  // the range refused, then each mapping
  EXPECT_TRUE(gpu_.mappings.empty());
  EXPECT_EQ(backend->unmap_fallbacks(), 1u);
  // One mapping is one call, as before.
  ASSERT_TRUE(backend->map_parts(base.value(), std::span(parts).first(1), 0).ok());
  gpu_.unmap_calls = 0;
  backend->unmap(base.value(), 2 * MiB);
  EXPECT_EQ(gpu_.unmap_calls, 1);
  EXPECT_EQ(backend->unmap_fallbacks(), 1u);
  for (const auto& part : parts) backend->release_physical(part.handle);
  backend->free_address(base.value(), 6 * MiB);
}

// A pool's memory on cuda with granule commits (remap, compaction): the old addresses of
// remapped granules, and granules given back, are unmapped a range at a time, not a granule at
// a time (design §3 "Remapping").
TEST_F(cuda_fake_driver, PoolMemoryUnmapsRemappedAndReleasedGranulesARangeAtATime) {
  auto backend = open();
  soma::detail::backend_memory_provider memory(*backend, 0, 0);
  memory.set_granule_commits(true);
  auto base = memory.reserve(32 * MiB);
  ASSERT_TRUE(base.ok()) << base.error().message();
  auto token = memory.commit(base.value(), 8 * MiB);  // four granules, four allocations
  ASSERT_TRUE(token.ok()) << token.error().message();
  EXPECT_EQ(gpu_.allocations.size(), 4u);
  ASSERT_TRUE(memory.can_map_again(token.value()));
  // Granules 1-3 mapped again at base + 16 MiB, then their old addresses go.
  const std::uintptr_t alias = base.value() + 16 * MiB;
  const soma::detail::physical_piece piece{alias, 6 * MiB, token.value(), 2 * MiB};
  ASSERT_TRUE(memory.map_again(std::span(&piece, 1)).ok());
  EXPECT_EQ(gpu_.mappings.size(), 4u + 3u);
  gpu_.unmap_calls = 0;
  // The old addresses as the pool retires them: a piece per commit part, end to end.
  const soma::detail::physical_piece old_pieces[] = {
      {base.value() + 2 * MiB, 2 * MiB, token.value(), 2 * MiB},
      {base.value() + 4 * MiB, 4 * MiB, token.value(), 4 * MiB}};
  memory.unmap_alias(old_pieces);
  EXPECT_EQ(gpu_.unmap_calls, 1);
  EXPECT_EQ(gpu_.mappings.size(), 1u + 3u);
  EXPECT_EQ(gpu_.allocations.size(), 4u);  // the memory stays, mapped at its new address
  // Given back: each run of granules still committed is one unmap, then each allocation goes.
  gpu_.unmap_calls = 0;
  memory.decommit(alias, 6 * MiB, token.value(), 2 * MiB);
  EXPECT_EQ(gpu_.unmap_calls, 1);
  EXPECT_EQ(gpu_.allocations.size(), 1u);
  gpu_.unmap_calls = 0;
  memory.decommit(base.value(), 8 * MiB, token.value(), 0);  // granules 1-3 went already
  EXPECT_EQ(gpu_.unmap_calls, 1);
  EXPECT_TRUE(gpu_.allocations.empty());
  EXPECT_TRUE(gpu_.mappings.empty());
  memory.free_reservation(base.value(), 32 * MiB);
  EXPECT_EQ(backend->unmap_fallbacks(), 0u);
}

TEST_F(cuda_fake_driver, OutOfMemoryNamesTheDevicesFigures) {
  auto backend = open();
  auto all = backend->create_physical(0, 64 * MiB, 0);
  ASSERT_TRUE(all.ok());
  auto more = backend->create_physical(0, 2 * MiB, 0);
  ASSERT_FALSE(more.ok());
  EXPECT_EQ(more.error().code(), error_code::out_of_memory);
  EXPECT_THAT(more.error().message(), HasSubstr("cuMemCreate failed (CUDA_ERROR_OUT_OF_MEMORY"));
  EXPECT_THAT(more.error().message(), HasSubstr("the device has 0 B free of 64.0 MiB"));
  EXPECT_THAT(more.error().message(), HasSubstr("soma's pools in this process hold 64.0 MiB"));
  EXPECT_EQ(backend->committed_bytes(0), 64 * MiB);
  backend->release_physical(all.value());
}

TEST_F(cuda_fake_driver, ReservationFailureIsAddressSpaceExhausted) {
  auto backend = open();
  auto huge = backend->reserve_address(0, std::size_t{2} << 40);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.error().code(), error_code::address_space_exhausted);
  EXPECT_THAT(huge.error().message(),
              HasSubstr("cuMemAddressReserve failed (CUDA_ERROR_OUT_OF_MEMORY"));
}

TEST_F(cuda_fake_driver, PeerAccessCoversMappedAndLaterMappedMemory) {
  auto backend = open();
  auto base = backend->reserve_address(0, 8 * MiB);
  ASSERT_TRUE(base.ok());
  auto first = backend->create_physical(0, 2 * MiB, 0);
  ASSERT_TRUE(backend->map(base.value(), 2 * MiB, first.value(), 0).ok());
  ASSERT_TRUE(backend->set_access(base.value(), 8 * MiB, 1, be::access_flags::read_write).ok());
  EXPECT_EQ(gpu_.mappings.at(base.value()).access.at(1), cuda::CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  auto second = backend->create_physical(0, 2 * MiB, 0);
  ASSERT_TRUE(backend->map(base.value() + 4 * MiB, 2 * MiB, second.value(), 0).ok());
  EXPECT_EQ(gpu_.mappings.at(base.value() + 4 * MiB).access.at(1),
            cuda::CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  ASSERT_TRUE(backend->set_access(base.value(), 8 * MiB, 1, be::access_flags::none).ok());
  EXPECT_EQ(gpu_.mappings.at(base.value()).access.at(1), cuda::CU_MEM_ACCESS_FLAGS_PROT_NONE);
  auto third = backend->create_physical(0, 2 * MiB, 0);
  ASSERT_TRUE(backend->map(base.value() + 6 * MiB, 2 * MiB, third.value(), 0).ok());
  EXPECT_EQ(gpu_.mappings.at(base.value() + 6 * MiB).access.count(1), 0u);
  // The owner keeps read-write; a device that cannot reach the memory is refused.
  EXPECT_EQ(backend->set_access(base.value(), 8 * MiB, 0, be::access_flags::read).code(),
            error_code::invalid_value);
  EXPECT_TRUE(backend->set_access(base.value(), 8 * MiB, 0, be::access_flags::read_write).ok());
  EXPECT_EQ(backend->set_access(base.value(), 8 * MiB, 5, be::access_flags::read).code(),
            error_code::invalid_device);
}

TEST_F(cuda_fake_driver, UnreachablePeerIsRefused) {
  gpu_.peers_can_access = false;
  auto backend = open();
  auto base = backend->reserve_address(0, 2 * MiB);
  const status refused = backend->set_access(base.value(), 2 * MiB, 1, be::access_flags::read);
  EXPECT_EQ(refused.code(), error_code::invalid_device);
  EXPECT_THAT(refused.message(), HasSubstr("cuDeviceCanAccessPeer"));
}

TEST_F(cuda_fake_driver, ExportAndImportShareOnePhysicalAllocation) {
  auto backend = open();
  auto plain = backend->create_physical(0, 2 * MiB, 0);
  auto refused = backend->export_physical(plain.value());
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.error().message(), HasSubstr("somaMemHandleTypePosixFileDescriptor"));
  auto exportable = backend->create_physical(0, 2 * MiB, be::handle_type_posix_fd);
  ASSERT_TRUE(exportable.ok());
  auto fd = backend->export_physical(exportable.value());
  ASSERT_TRUE(fd.ok()) << fd.error().message();
  auto imported = backend->import_physical(0, fd.value(), 2 * MiB);
  ASSERT_TRUE(imported.ok()) << imported.error().message();
  EXPECT_EQ(imported.value(), exportable.value());  // the driver hands out one handle
  EXPECT_EQ(backend->committed_bytes(0), 4 * MiB);  // an import costs this device nothing
  backend->release_physical(imported.value());
  EXPECT_EQ(backend->committed_bytes(0), 4 * MiB);
  backend->release_physical(exportable.value());
  EXPECT_EQ(backend->committed_bytes(0), 2 * MiB);
  backend->release_physical(plain.value());
  ::close(fd.value());
}

TEST_F(cuda_fake_driver, EveryEnqueueTakesExactlyOnePosition) {
  auto backend = open();
  stream_timeline a_line(0), b_line(1);
  auto a = stream_on(*backend, 0, a_line);
  auto b = stream_on(*backend, 1, b_line);
  auto e = backend->create_event();
  int x = 0;
  ASSERT_TRUE(a->enqueue_memset(&x, 0, sizeof x).ok());
  ASSERT_TRUE(a->enqueue_memcpy(&x, &x, sizeof x).ok());
  ASSERT_TRUE(a->enqueue_host_task([] { return status::success(); }).ok());
  EXPECT_EQ(a_line.enqueued_position(), 3u);
  ASSERT_TRUE(e.value()->record(*b).ok());  // a record takes no position
  EXPECT_EQ(b_line.enqueued_position(), 0u);
  ASSERT_TRUE(a->enqueue_wait(*e.value()).ok());
  ASSERT_TRUE(b->enqueue_memset(&x, 0, sizeof x).ok());
  ASSERT_TRUE(a->enqueue_wait_for(*b, 1).ok());
  EXPECT_EQ(a_line.enqueued_position(), 5u);
  ASSERT_TRUE(a->enqueue_wait_for(*a, 5).ok());  // its own stream: in order already
  EXPECT_EQ(a_line.enqueued_position(), 5u);
  ASSERT_TRUE(a->synchronize().ok());
  EXPECT_EQ(a_line.completed_position(), 5u);
}

TEST_F(cuda_fake_driver, HostTaskCompletesItsPosition) {
  auto backend = open();
  stream_timeline timeline(0);
  auto s = stream_on(*backend, 0, timeline);
  int x = 0;
  ASSERT_TRUE(s->enqueue_memset(&x, 0, sizeof x).ok());
  bool ran = false;
  ASSERT_TRUE(s->enqueue_host_task([&] {
                 ran = true;
                 return status::success();
               }).ok());
  EXPECT_EQ(timeline.completed_position(), 0u);
  gpu_.run_all();
  EXPECT_TRUE(ran);
  EXPECT_EQ(timeline.completed_position(), 2u);
  EXPECT_EQ(gpu_.event_records, 0);  // learned without a marker
}

TEST_F(cuda_fake_driver, FailedHostTaskIsStickyAndSkipsLaterHostTasks) {
  auto backend = open();
  stream_timeline timeline(0);
  auto s = stream_on(*backend, 0, timeline);
  bool later_ran = false;
  ASSERT_TRUE(
      s->enqueue_host_task([] { return status(error_code::invalid_value, "bad input"); }).ok());
  ASSERT_TRUE(s->enqueue_host_task([&] {
                 later_ran = true;
                 return status::success();
               }).ok());
  ASSERT_TRUE(s->enqueue_host_task([]() -> status { throw 42; }).ok());
  gpu_.run_all();
  EXPECT_FALSE(later_ran);
  EXPECT_EQ(timeline.completed_position(), 3u);  // skipped tasks still complete their position
  const status sticky = s->sticky_error();
  EXPECT_EQ(sticky.code(), error_code::launch_failure);
  EXPECT_THAT(sticky.message(), HasSubstr("position 1"));
  EXPECT_THAT(sticky.message(), HasSubstr("bad input"));
  int x = 0;
  EXPECT_EQ(s->enqueue_memset(&x, 0, sizeof x).code(), error_code::launch_failure);
  EXPECT_EQ(timeline.enqueued_position(), 3u);
  EXPECT_EQ(s->synchronize().code(), error_code::launch_failure);
  EXPECT_EQ(s->query().code(), error_code::launch_failure);
}

TEST_F(cuda_fake_driver, PollRecordsOneMarkerPerBatchOfFrees) {
  auto backend = open();
  stream_timeline timeline(0);
  auto s = stream_on(*backend, 0, timeline);
  int x = 0;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s->enqueue_memset(&x, 0, sizeof x).ok());
  EXPECT_FALSE(timeline.has_completed(1));
  EXPECT_EQ(gpu_.event_records, 1);  // one marker at position 3 covers 1, 2 and 3
  EXPECT_FALSE(timeline.has_completed(2));
  EXPECT_FALSE(timeline.has_completed(3));
  EXPECT_EQ(gpu_.event_records, 1);
  ASSERT_TRUE(s->enqueue_memset(&x, 0, sizeof x).ok());  // later work needs no new marker
  EXPECT_FALSE(timeline.has_completed(2));
  EXPECT_EQ(gpu_.event_records, 1);
  gpu_.run(fake_stream(*s), 2);  // the GPU is not at the marker yet
  EXPECT_FALSE(timeline.has_completed(1));
  gpu_.run_all();
  EXPECT_TRUE(timeline.has_completed(3));
  EXPECT_EQ(gpu_.event_records, 1);
  ASSERT_TRUE(s->enqueue_memset(&x, 0, sizeof x).ok());
  EXPECT_FALSE(timeline.has_completed(5));
  EXPECT_EQ(gpu_.event_records, 2);
  EXPECT_EQ(gpu_.live_events, 1);  // the first marker's event was reused
  gpu_.run_all();
  EXPECT_TRUE(timeline.has_completed(5));
}

TEST_F(cuda_fake_driver, IdleStreamIsAnsweredWithoutAMarker) {
  auto backend = open();
  stream_timeline timeline(0);
  auto s = stream_on(*backend, 0, timeline);
  int x = 0;
  ASSERT_TRUE(s->enqueue_memset(&x, 0, sizeof x).ok());
  gpu_.run_all();
  EXPECT_TRUE(timeline.has_completed(1));
  EXPECT_EQ(gpu_.event_records, 0);
  EXPECT_GE(gpu_.stream_queries, 1);
}

TEST_F(cuda_fake_driver, MarkersInFlightAreBounded) {
  auto backend = open();
  stream_timeline timeline(0);
  auto s = stream_on(*backend, 0, timeline);
  int x = 0;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(s->enqueue_memset(&x, 0, sizeof x).ok());
    EXPECT_FALSE(timeline.has_completed(timeline.enqueued_position()));
  }
  EXPECT_EQ(gpu_.event_records, static_cast<int>(cuda::completion_tracker::max_pending_markers));
  gpu_.run_all();
  EXPECT_TRUE(timeline.has_completed(100));
}

TEST_F(cuda_fake_driver, ReleasingFinishedStreamsLetsGoOfTheirTimelines) {
  // A destroyed stream's tracker polls its timeline until released; released only when a new
  // stream took a tracker, a program that stops making streams kept every one of them (and the
  // runtime their records) however long ago their work ran.
  auto backend = open();
  stream_timeline line(0);
  auto s = stream_on(*backend, 0, line);
  int x = 0;
  ASSERT_TRUE(s->enqueue_memset(&x, 0, sizeof x).ok());
  s.reset();
  backend->release_finished_streams();  // the work is still queued: nothing to let go
  EXPECT_TRUE(line.has_poller());
  EXPECT_EQ(backend->busy_trackers(), 1u);
  gpu_.run_all();
  backend->release_finished_streams();
  EXPECT_FALSE(line.has_poller());
  EXPECT_EQ(backend->busy_trackers(), 0u);
  EXPECT_TRUE(line.has_completed(1));
}

TEST_F(cuda_fake_driver, DestroyedStreamKeepsItsTimelineLearning) {
  auto backend = open();
  stream_timeline old_line(0), new_line(1);
  auto s = stream_on(*backend, 0, old_line);
  fake_cuda::stream_state* native = fake_stream(*s);
  int x = 0;
  ASSERT_TRUE(s->enqueue_memset(&x, 0, sizeof x).ok());
  s.reset();  // returns at once; the work is still queued
  EXPECT_EQ(gpu_.destroyed_streams.count(native), 1u);
  EXPECT_EQ(gpu_.event_records, 1);  // the final marker
  EXPECT_FALSE(old_line.has_completed(1));
  EXPECT_EQ(backend->busy_trackers(), 1u);
  gpu_.run_all();
  EXPECT_TRUE(old_line.has_completed(1));
  // The drained tracker serves the next stream of the device, with its pooled event.
  auto next = stream_on(*backend, 0, new_line);
  EXPECT_EQ(backend->busy_trackers(), 1u);
  ASSERT_TRUE(next->enqueue_memset(&x, 0, sizeof x).ok());
  EXPECT_FALSE(new_line.has_completed(1));
  EXPECT_EQ(gpu_.live_events, 1);
  EXPECT_TRUE(old_line.has_completed(1));
  gpu_.run_all();
  EXPECT_TRUE(new_line.has_completed(1));
}

TEST_F(cuda_fake_driver, DestroyingAFinishedStreamRecordsNothing) {
  auto backend = open();
  stream_timeline timeline(0);
  auto s = stream_on(*backend, 0, timeline);
  int x = 0;
  ASSERT_TRUE(s->enqueue_memset(&x, 0, sizeof x).ok());
  ASSERT_TRUE(s->synchronize().ok());
  s.reset();
  EXPECT_EQ(gpu_.event_records, 0);
  EXPECT_TRUE(timeline.has_completed(1));
}

TEST_F(cuda_fake_driver, WaitForOrdersAfterAMarkerOfTheOtherStream) {
  auto backend = open();
  stream_timeline a_line(0), b_line(1);
  auto a = stream_on(*backend, 0, a_line);
  auto b = stream_on(*backend, 1, b_line);  // another device: the marker is a's device's
  int x = 0;
  ASSERT_TRUE(a->enqueue_memset(&x, 0, sizeof x).ok());
  ASSERT_TRUE(a->enqueue_memset(&x, 0, sizeof x).ok());
  ASSERT_TRUE(b->enqueue_wait_for(*a, 2).ok());
  EXPECT_EQ(gpu_.event_records, 1);
  ASSERT_TRUE(b->enqueue_memset(&x, 0, sizeof x).ok());
  EXPECT_EQ(gpu_.run(fake_stream(*b)), 0);  // b waits for a
  EXPECT_FALSE(a_line.has_completed(2));    // a poll reuses the marker the wait made
  EXPECT_EQ(gpu_.event_records, 1);
  gpu_.run(fake_stream(*a));
  EXPECT_EQ(gpu_.run(fake_stream(*b)), 2);
  EXPECT_TRUE(a_line.has_completed(2));
  ASSERT_TRUE(b->enqueue_wait_for(*a, 2).ok());  // known complete: nothing to wait for
  EXPECT_EQ(b_line.enqueued_position(), 2u);
}

TEST_F(cuda_fake_driver, EventsLiveOnTheRecordingStreamsDevice) {
  event_setup s;
  set_up_events(s, 1);
  auto& [backend, a_line, b_line, a, b, e] = s;
  EXPECT_TRUE(e->query().ok());  // never recorded
  EXPECT_TRUE(e->synchronize().ok());
  int x = 0;
  ASSERT_TRUE(b->enqueue_memset(&x, 0, sizeof x).ok());
  ASSERT_TRUE(e->record(*b).ok());
  EXPECT_EQ(e->query().code(), error_code::not_ready);
  gpu_.run_all();
  EXPECT_TRUE(e->query().ok());
  ASSERT_TRUE(a->enqueue_memset(&x, 0, sizeof x).ok());
  ASSERT_TRUE(e->record(*a).ok());  // another device: a new CUevent there
  EXPECT_EQ(e->query().code(), error_code::not_ready);
  EXPECT_TRUE(e->synchronize().ok());
  EXPECT_EQ(gpu_.live_events, 2);
  ASSERT_TRUE(e->record(*b).ok());  // back on device 1: its CUevent again
  EXPECT_EQ(e->query().code(), error_code::not_ready);
  EXPECT_TRUE(e->synchronize().ok());
  EXPECT_EQ(gpu_.live_events, 2);
  e.reset();
  EXPECT_EQ(gpu_.live_events, 0);
}

// S12: a record and a wait name their stream, whose context the driver uses, so neither asks
// which context is current (a cuCtxGetCurrent each, 16 ns on an H200 host) and neither changes
// the application's.
TEST_F(cuda_fake_driver, S12_RecordAndWaitAskNoContextWhereTheDriverNeedsNone) {
  event_setup s;
  set_up_events(s, 0);
  auto& [backend, a_line, b_line, a, b, e] = s;
  ASSERT_TRUE(e->record(*a).ok());  // the first record makes the CUevent: in context
  fake_cuda::current_context = fake_cuda::context_of(1);  // the application works on device 1
  const int queries = gpu_.context_queries;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(e->record(*a).ok());
    ASSERT_TRUE(b->enqueue_wait(*e).ok());
  }
  EXPECT_EQ(gpu_.context_queries, queries);
  EXPECT_EQ(fake_cuda::current_context, fake_cuda::context_of(1));
  EXPECT_EQ(b_line.enqueued_position(), 3u);
  EXPECT_EQ(gpu_.run(fake_stream(*b)), 0);  // b waits for a's records
  gpu_.run_all();
  EXPECT_TRUE(e->query().ok());
}

// A driver that wanted the stream's context current would refuse the call: it is made again
// with the context current, and the application's context is restored.
TEST_F(cuda_fake_driver, S12_ARecordOrWaitRefusedWithoutItsContextIsMadeAgainInIt) {
  event_setup s;
  set_up_events(s, 0);
  auto& [backend, a_line, b_line, a, b, e] = s;
  gpu_.records_need_current_context = true;
  for (cuda::CUcontext application : {cuda::CUcontext{nullptr}, fake_cuda::context_of(1)}) {
    fake_cuda::current_context = application;
    const int records = gpu_.event_records;
    ASSERT_TRUE(e->record(*a).ok());
    ASSERT_TRUE(b->enqueue_wait(*e).ok());
    EXPECT_EQ(gpu_.event_records, records + 1);
    EXPECT_EQ(fake_cuda::current_context, application);
    EXPECT_EQ(gpu_.run(fake_stream(*b)), 0);  // the wait is there: b waits for a
    gpu_.run_all();
    EXPECT_TRUE(e->query().ok());
  }
  // The first record made the CUevent in context; the later record and both waits were
  // refused once each.
  EXPECT_EQ(gpu_.refused_without_context, 3);
  // With the context current, a refusal is the driver's answer: it stands, not made again.
  fake_cuda::current_context = fake_cuda::context_of(0);
  gpu_.failing_event_records = 1;
  const int records = gpu_.event_records;
  EXPECT_EQ(e->record(*a).code(), error_code::launch_failure);
  EXPECT_EQ(gpu_.event_records, records);
  EXPECT_EQ(gpu_.failing_event_records, 0);
  fake_cuda::current_context = nullptr;
}

TEST_F(cuda_fake_driver, AdoptedStreamMustBeOfTheDevicesPrimaryContextAndIsNeverDestroyed) {
  auto backend = open();
  fake_cuda::current_context = fake_cuda::context_of(1);
  cuda::CUstream native = nullptr;
  ASSERT_EQ(fake_cuda::stream_create(&native, 0), cuda::CUDA_SUCCESS);
  fake_cuda::current_context = nullptr;
  stream_timeline timeline(0);
  auto wrong = backend->adopt_stream(0, native, timeline, false);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().code(), error_code::invalid_value);
  int not_a_stream = 0;
  EXPECT_EQ(backend->adopt_stream(1, &not_a_stream, timeline, false).error().code(),
            error_code::invalid_handle);
  auto adopted = backend->adopt_stream(1, native, timeline, false);
  ASSERT_TRUE(adopted.ok()) << adopted.error().message();
  EXPECT_EQ(adopted.value()->native_handle(), static_cast<void*>(native));
  int x = 0;
  ASSERT_TRUE(adopted.value()->enqueue_memset(&x, 0, sizeof x).ok());
  adopted.value().reset();
  EXPECT_TRUE(gpu_.destroyed_streams.empty());
  gpu_.run_all();
  EXPECT_TRUE(timeline.has_completed(1));
}

// S2 with a native stream whose owner may destroy it first (CuPy's, collected by Python): each
// free takes a position and a marker at once, so nothing needs the CUstream afterwards.
TEST_F(cuda_fake_driver, StreamThatMayEndFirstIsCoveredAtEveryFreeAndNeverTouchedAfter) {
  auto backend = open();
  cuda::CUstream native = native_stream(0);
  stream_timeline timeline(0);
  auto adopted = backend->adopt_stream(0, native, timeline, /*may_end_first=*/true);
  ASSERT_TRUE(adopted.ok()) << adopted.error().message();
  int x = 0;
  ASSERT_TRUE(adopted.value()->enqueue_memset(&x, 0, sizeof x).ok());
  adopted.value()->note_free();
  adopted.value()->note_free();
  EXPECT_EQ(timeline.enqueued_position(), 3u);
  EXPECT_EQ(gpu_.event_records, 3);         // one marker per position, as each is taken
  fake_cuda::stream_destroy(native);        // the owner goes first
  EXPECT_FALSE(timeline.has_completed(3));  // learned from the markers alone
  adopted.value().reset();                  // records nothing on the destroyed CUstream
  EXPECT_EQ(gpu_.event_records, 3);
  gpu_.run_all();
  EXPECT_TRUE(timeline.has_completed(3));
}

// A stream that may end first is waited for through its markers alone. Where a marker could
// not be recorded, its synchronize says so instead of answering for work no marker covers (a
// caller that then waited for that position spun for good); a later marker covers it again.
TEST_F(cuda_fake_driver, SynchronizeOfAStreamThatMayEndFirstSaysWhenNoMarkerCoversItsWork) {
  auto backend = open();
  cuda::CUstream native = native_stream(0);
  stream_timeline timeline(0);
  auto adopted = backend->adopt_stream(0, native, timeline, /*may_end_first=*/true);
  ASSERT_TRUE(adopted.ok()) << adopted.error().message();
  adopted.value()->note_free();
  gpu_.failing_event_records = 1;
  adopted.value()->note_free();  // its marker fails
  const status waited = adopted.value()->synchronize();
  EXPECT_FALSE(waited.ok()) << "position 2 has no marker: its completion cannot be learned";
  EXPECT_NE(waited.message().find("position 2"), std::string::npos) << waited.message();
  EXPECT_TRUE(timeline.has_completed(1));
  EXPECT_FALSE(timeline.has_completed(2));
  adopted.value()->note_free();  // this marker covers positions 2 and 3
  EXPECT_TRUE(adopted.value()->synchronize().ok());
  EXPECT_TRUE(timeline.has_completed(3));
}

TEST_F(cuda_fake_driver, MarkersOfAStreamCoveringEveryPositionAreBounded) {
  auto backend = open();
  cuda::CUstream native = native_stream(0);
  stream_timeline timeline(0);
  auto adopted = backend->adopt_stream(0, native, timeline, true);
  ASSERT_TRUE(adopted.ok());
  for (int i = 0; i < 100; ++i) adopted.value()->note_free();  // behind a long kernel
  EXPECT_EQ(gpu_.event_records, 100);
  EXPECT_LE(gpu_.live_events, static_cast<int>(cuda::completion_tracker::max_pending_markers));
  gpu_.run(fake_cuda::as_stream(native), 50);
  EXPECT_FALSE(timeline.has_completed(100));
  gpu_.run_all();
  EXPECT_TRUE(timeline.has_completed(100));
}

// A destroyed stream with its final marker learns from it; settling blocks on nothing there (a
// wait for one stream must not wait for the whole context, which may hold a gated stream).
TEST_F(cuda_fake_driver, SettlingLeavesADestroyedStreamWithAFinalMarkerToIt) {
  auto backend = open();
  stream_timeline timeline(0);
  auto s = stream_on(*backend, 0, timeline);
  int x = 0;
  ASSERT_TRUE(s->enqueue_memset(&x, 0, sizeof x).ok());
  s.reset();
  ASSERT_TRUE(backend->settle_unmarked_streams(0).ok());
  EXPECT_EQ(gpu_.context_synchronizes, 0);
  EXPECT_FALSE(timeline.has_completed(1));
  gpu_.run_all();
  EXPECT_TRUE(timeline.has_completed(1));
}

// A native stream destroyed by its owner before soma's stream (breaking
// somaStreamCreateFromNative's contract) leaves no final marker: waiting for it synchronizes the
// context instead of spinning.
TEST_F(cuda_fake_driver, WaitingForAStreamWithoutAFinalMarkerSynchronizesTheContext) {
  auto backend = open();
  cuda::CUstream native = native_stream(1);
  stream_timeline timeline(0);
  auto adopted = backend->adopt_stream(1, native, timeline, false);
  ASSERT_TRUE(adopted.ok());
  adopted.value()->note_free();
  fake_cuda::stream_destroy(native);
  adopted.value().reset();  // its final marker cannot be recorded
  EXPECT_EQ(gpu_.destroyed_stream_calls, 1);
  gpu_.destroyed_stream_calls = 0;
  EXPECT_FALSE(timeline.has_completed(1));
  ASSERT_TRUE(backend->settle_unmarked_streams(0).ok());  // another device: not this one
  EXPECT_EQ(gpu_.context_synchronizes, 0);
  ASSERT_TRUE(backend->settle_unmarked_streams(1).ok());
  EXPECT_EQ(gpu_.context_synchronizes, 1);
  EXPECT_TRUE(timeline.has_completed(1));
  EXPECT_EQ(gpu_.destroyed_stream_calls, 0);
}

TEST_F(cuda_fake_driver, SynchronizeAndQueryAdvanceTheTimeline) {
  auto backend = open();
  stream_timeline timeline(0);
  auto s = stream_on(*backend, 0, timeline);
  EXPECT_TRUE(s->query().ok());
  int x = 0;
  ASSERT_TRUE(s->enqueue_memset(&x, 0, sizeof x).ok());
  EXPECT_EQ(s->query().code(), error_code::not_ready);
  gpu_.run_all();
  EXPECT_TRUE(s->query().ok());
  EXPECT_EQ(timeline.completed_position(), 1u);
  ASSERT_TRUE(s->enqueue_memset(&x, 0, sizeof x).ok());
  ASSERT_TRUE(s->synchronize().ok());
  EXPECT_EQ(timeline.completed_position(), 2u);
}

// ---- graphs (S15) -----------------------------------------------------------------------------

void count_call(void* data) { ++*static_cast<int*>(data); }

TEST_F(cuda_fake_driver, GraphNodesCarryTheirDependenciesAndParameters) {
  auto backend = open();
  auto created = backend->create_work_graph(1);
  ASSERT_TRUE(created.ok()) << created.error().message();
  be::work_graph& graph = *created.value();
  ASSERT_EQ(gpu_.graphs.size(), 1u);
  const fake_cuda::graph_state& native = *gpu_.graphs.front();
  EXPECT_EQ(native.device, 1);  // made in device 1's context
  auto* destination = reinterpret_cast<void*>(std::uintptr_t{0x7000'0020'0000});
  auto* source = reinterpret_cast<const void*>(std::uintptr_t{0x7000'0040'0000});
  int calls = 0;
  auto empty = graph.add({}, soma_backend_test::empty_node());
  ASSERT_TRUE(empty.ok());
  const std::size_t after_empty[] = {empty.value()};
  auto set = graph.add(after_empty,
                       soma_backend_test::memset_node(destination, 0x1AB, 100));  // a byte: 0xAB
  ASSERT_TRUE(set.ok()) << set.error().message();
  const std::size_t twice[] = {empty.value(), set.value(), set.value()};
  auto copy = graph.add(twice, soma_backend_test::memcpy_node(destination, source, 64));
  ASSERT_TRUE(copy.ok()) << copy.error().message();
  const std::size_t after_copy[] = {copy.value()};
  auto host = graph.add(after_copy, soma_backend_test::host_node(&count_call, &calls));
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(host.value(), 3u);
  ASSERT_EQ(native.nodes.size(), 4u);

  const fake_cuda::graph_node& m = *native.nodes[1];
  EXPECT_EQ(m.kind, fake_cuda::graph_node::memset_node);
  EXPECT_EQ(m.dependencies, std::vector<fake_cuda::graph_node*>{native.nodes[0].get()});
  EXPECT_EQ(m.memset.dst, reinterpret_cast<std::uintptr_t>(destination));
  EXPECT_EQ(m.memset.value, 0xABu);
  EXPECT_EQ(m.memset.elementSize, 1u);
  EXPECT_EQ(m.memset.width, 100u);
  EXPECT_EQ(m.memset.height, 1u);
  EXPECT_EQ(m.context, fake_cuda::context_of(1));

  const fake_cuda::graph_node& c = *native.nodes[2];
  EXPECT_EQ(c.kind, fake_cuda::graph_node::memcpy_node);
  EXPECT_EQ(c.dependencies,
            (std::vector<fake_cuda::graph_node*>{native.nodes[0].get(), native.nodes[1].get()}))
      << "a dependency named twice is passed once";
  EXPECT_EQ(c.memcpy.src.MemoryType, cuda::CU_MEMORYTYPE_UNIFIED);
  EXPECT_EQ(c.memcpy.dst.MemoryType, cuda::CU_MEMORYTYPE_UNIFIED);
  EXPECT_EQ(c.memcpy.src.Device, reinterpret_cast<std::uintptr_t>(source));
  EXPECT_EQ(c.memcpy.dst.Device, reinterpret_cast<std::uintptr_t>(destination));
  EXPECT_EQ(c.memcpy.WidthInBytes, 64u);
  EXPECT_EQ(c.memcpy.Height, 1u);
  EXPECT_EQ(c.memcpy.Depth, 1u);
  EXPECT_EQ(c.context, fake_cuda::context_of(1));

  const fake_cuda::graph_node& h = *native.nodes[3];
  EXPECT_EQ(h.kind, fake_cuda::graph_node::host_node);
  EXPECT_EQ(h.dependencies, std::vector<fake_cuda::graph_node*>{native.nodes[2].get()});
  EXPECT_EQ(h.host.fn, &count_call);
  EXPECT_EQ(h.host.userData, &calls);

  // A dependency that is no node yet is refused before the driver is asked.
  const std::size_t later[] = {4};
  const std::size_t calls_before = gpu_.graph_calls.size();
  auto refused = graph.add(later, soma_backend_test::empty_node());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code(), error_code::invalid_value);
  EXPECT_THAT(refused.error().message(), HasSubstr("dependency 4 is no node yet"));
  EXPECT_EQ(gpu_.graph_calls.size(), calls_before);
  EXPECT_EQ(native.nodes.size(), 4u);
  created.value().reset();
  EXPECT_EQ(gpu_.live_graphs(), 0);
  EXPECT_EQ(backend->create_work_graph(2).error().code(), error_code::invalid_device);
}

TEST_F(cuda_fake_driver, GraphLaunchIsOneStreamOperationAndRecordsItsEvents) {
  auto backend = open();
  stream_timeline a_line(0), b_line(1);
  auto a = stream_on(*backend, 0, a_line);
  auto b = stream_on(*backend, 0, b_line);
  auto e = backend->create_event();
  auto graph = backend->create_work_graph(0);
  ASSERT_TRUE(graph.ok() && e.ok());
  int calls = 0, x = 0;
  auto set = graph.value()->add({}, soma_backend_test::memset_node(&x, 0, sizeof x));
  const std::size_t after_set[] = {set.value()};
  auto host = graph.value()->add(after_set, soma_backend_test::host_node(&count_call, &calls));
  const std::size_t after_host[] = {host.value()};
  ASSERT_TRUE(
      graph.value()->add(after_host, soma_backend_test::event_record_node(*e.value())).ok());
  EXPECT_EQ(gpu_.live_events, 1);        // the event's CUevent in device 0's context
  EXPECT_TRUE(e.value()->query().ok());  // adding a record node records nothing

  auto exec = graph.value()->instantiate();
  ASSERT_TRUE(exec.ok()) << exec.error().message();
  ASSERT_TRUE(exec.value()->upload(*a).ok());
  EXPECT_EQ(a_line.enqueued_position(), 0u);  // an upload runs none of the graph's work
  ASSERT_TRUE(exec.value()->launch(*a).ok());
  EXPECT_EQ(a_line.enqueued_position(), 1u);
  const std::vector<std::string> order(gpu_.graph_calls.end() - 3, gpu_.graph_calls.end());
  EXPECT_EQ(order, (std::vector<std::string>{"cuGraphInstantiateWithFlags", "cuGraphUpload",
                                             "cuGraphLaunch"}));

  // The event stands for the launch's record: waits and queries use the graph's CUevent.
  EXPECT_EQ(e.value()->query().code(), error_code::not_ready);
  ASSERT_TRUE(b->enqueue_wait(*e.value()).ok());
  ASSERT_TRUE(b->enqueue_memset(&x, 0, sizeof x).ok());
  EXPECT_EQ(gpu_.run(fake_stream(*b)), 0);  // b waits for the launch
  EXPECT_FALSE(a_line.has_completed(1));    // a marker behind the launch
  gpu_.run(fake_stream(*a));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(gpu_.run(fake_stream(*b)), 2);  // the wait is satisfied
  EXPECT_TRUE(e.value()->query().ok());
  EXPECT_TRUE(e.value()->synchronize().ok());
  EXPECT_TRUE(a_line.has_completed(1));

  ASSERT_TRUE(exec.value()->launch(*a).ok());  // again: the event moves to the second launch
  EXPECT_EQ(e.value()->query().code(), error_code::not_ready);
  ASSERT_TRUE(a->synchronize().ok());
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(e.value()->query().ok());
  EXPECT_EQ(a_line.completed_position(), 2u);

  // The CUgraph lives as long as an exec made from it: set_memset names its nodes.
  graph.value().reset();
  EXPECT_EQ(gpu_.live_graphs(), 1);
  EXPECT_EQ(gpu_.live_execs(), 1);
  exec.value().reset();
  EXPECT_EQ(gpu_.live_graphs(), 0);
  EXPECT_EQ(gpu_.live_execs(), 0);
}

TEST_F(cuda_fake_driver, SetMemsetChangesTheInstantiatedNodeOnly) {
  auto backend = open();
  auto graph = backend->create_work_graph(0);
  int x = 0, y = 0;
  auto empty = graph.value()->add({}, soma_backend_test::empty_node());
  auto set = graph.value()->add({}, soma_backend_test::memset_node(&x, 1, sizeof x));
  ASSERT_TRUE(empty.ok() && set.ok());
  auto exec = graph.value()->instantiate();
  ASSERT_TRUE(exec.ok());
  ASSERT_TRUE(exec.value()->set_memset(set.value(), &y, 0x2CD, 2).ok());
  const fake_cuda::exec_state& native = *gpu_.execs.front();
  EXPECT_EQ(native.nodes[1].memset.dst, reinterpret_cast<std::uintptr_t>(&y));
  EXPECT_EQ(native.nodes[1].memset.value, 0xCDu);
  EXPECT_EQ(native.nodes[1].memset.width, 2u);
  EXPECT_EQ(native.nodes[1].memset.elementSize, 1u);
  EXPECT_EQ(native.nodes[1].context, fake_cuda::context_of(0));
  EXPECT_EQ(gpu_.graphs.front()->nodes[1]->memset.dst, reinterpret_cast<std::uintptr_t>(&x));
  const status not_memset = exec.value()->set_memset(empty.value(), &y, 0, 4);
  EXPECT_EQ(not_memset.code(), error_code::invalid_value);
  EXPECT_THAT(not_memset.message(), HasSubstr("node 0 is no memset node"));
  EXPECT_EQ(exec.value()->set_memset(7, &y, 0, 4).code(), error_code::invalid_value);
}

TEST_F(cuda_fake_driver, GraphDriverErrorsAreTranslatedAndNamed) {
  auto backend = open();
  stream_timeline timeline(0);
  auto s = stream_on(*backend, 0, timeline);
  gpu_.fail_graph_call = cuda::CUDA_ERROR_OUT_OF_MEMORY;
  auto no_graph = backend->create_work_graph(0);
  ASSERT_FALSE(no_graph.ok());
  EXPECT_EQ(no_graph.error().code(), error_code::out_of_memory);
  EXPECT_THAT(no_graph.error().message(),
              HasSubstr("cuGraphCreate failed (CUDA_ERROR_OUT_OF_MEMORY"));

  auto graph = backend->create_work_graph(0);
  ASSERT_TRUE(graph.ok());
  int x = 0;
  gpu_.fail_graph_call = cuda::CUDA_ERROR_INVALID_VALUE;
  auto set = graph.value()->add({}, soma_backend_test::memset_node(&x, 7, sizeof x));
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.error().code(), error_code::invalid_value);
  EXPECT_THAT(set.error().message(),
              HasSubstr("cuGraphAddMemsetNode failed (CUDA_ERROR_INVALID_VALUE"));
  EXPECT_THAT(set.error().message(), HasSubstr("memset of 4 B at 0x"));
  auto e = backend->create_event();
  ASSERT_TRUE(graph.value()
                  ->add({}, soma_backend_test::event_record_node(*e.value()))
                  .ok());  // node 0: refused adds leave no index
  auto exec = graph.value()->instantiate();
  ASSERT_TRUE(exec.ok());
  gpu_.fail_graph_call = cuda::CUDA_ERROR_LAUNCH_FAILED;
  const status launched = exec.value()->launch(*s);
  EXPECT_EQ(launched.code(), error_code::launch_failure);
  EXPECT_THAT(launched.message(), HasSubstr("cuGraphLaunch failed"));
  EXPECT_TRUE(e.value()->query().ok());  // a refused launch records nothing
  gpu_.fail_graph_call = cuda::CUDA_ERROR_NOT_SUPPORTED;
  auto no_exec = graph.value()->instantiate();
  ASSERT_FALSE(no_exec.ok());
  EXPECT_EQ(no_exec.error().code(), error_code::not_supported);
  EXPECT_THAT(no_exec.error().message(), HasSubstr("cuGraphInstantiateWithFlags failed"));
  EXPECT_THAT(no_exec.error().message(), HasSubstr("a graph of 1 nodes on device 0"));
}

TEST_F(cuda_fake_driver, NativeCaptureNeitherRecordsNorQueriesOnTheCapturedStream) {
  auto backend = open();
  stream_timeline a_line(0), b_line(1);
  auto a = stream_on(*backend, 0, a_line);
  auto b = stream_on(*backend, 0, b_line);
  int x = 0;
  ASSERT_TRUE(a->enqueue_memset(&x, 0, sizeof x).ok());
  ASSERT_TRUE(backend->begin_native_capture(*a).ok());
  EXPECT_EQ(gpu_.event_records, 1);       // the marker covering position 1, before the capture
  EXPECT_FALSE(a_line.has_completed(1));  // polls learn from that marker only
  ASSERT_TRUE(b->enqueue_wait_for(*a, 1).ok());  // orders b after the same marker
  EXPECT_EQ(gpu_.event_records, 1);
  gpu_.run(fake_stream(*a));
  EXPECT_TRUE(a_line.has_completed(1));
  EXPECT_EQ(gpu_.capture_errors, 0);
  auto nothing = backend->end_native_capture(*a);
  ASSERT_TRUE(nothing.ok()) << nothing.error().message();
  EXPECT_EQ(nothing.value(), nullptr);
  EXPECT_EQ(gpu_.live_graphs(), 0);  // the empty capture is destroyed

  // A stream idle at the capture needs no marker; the application's work lands in the graph.
  const int records = gpu_.event_records;
  ASSERT_TRUE(backend->begin_native_capture(*a).ok());
  EXPECT_EQ(gpu_.event_records, records);
  auto native = static_cast<cuda::CUstream>(a->native_handle());
  ASSERT_EQ(driver_.cuMemsetD8Async(reinterpret_cast<std::uintptr_t>(&x), 5, sizeof x, native),
            cuda::CUDA_SUCCESS);
  auto captured = backend->end_native_capture(*a);
  ASSERT_TRUE(captured.ok()) << captured.error().message();
  ASSERT_NE(captured.value(), nullptr);
  EXPECT_EQ(gpu_.capture_errors, 0);
  auto graph = backend->create_work_graph(0);
  auto child = graph.value()->add({}, soma_backend_test::native_child_node(captured.value()));
  ASSERT_TRUE(child.ok()) << child.error().message();
  backend->destroy_native_graph(captured.value());  // the node holds a copy
  EXPECT_EQ(graph.value()->add({}, soma_backend_test::native_child_node(nullptr)).error().code(),
            error_code::invalid_value);
  auto exec = graph.value()->instantiate();
  ASSERT_TRUE(exec.ok());
  ASSERT_TRUE(exec.value()->launch(*a).ok());
  EXPECT_EQ(fake_stream(*a)->queue.size(), 1u);  // the child's memset
  ASSERT_TRUE(a->synchronize().ok());
  EXPECT_EQ(a_line.completed_position(), 2u);

  gpu_.fail_graph_call = cuda::CUDA_ERROR_INVALID_VALUE;
  const status refused = backend->begin_native_capture(*a);
  EXPECT_EQ(refused.code(), error_code::invalid_value);
  EXPECT_THAT(refused.message(), HasSubstr("cuStreamBeginCapture failed"));
  ASSERT_TRUE(a->enqueue_memset(&x, 0, sizeof x).ok());
  EXPECT_FALSE(a_line.has_completed(3));  // not capturing: markers again
  EXPECT_EQ(gpu_.capture_errors, 0);
}

// ---- a child forked after the backend started -------------------------------------------------

/// CUDA cannot be used in a child forked after it started: the driver answers
/// CUDA_ERROR_NOT_INITIALIZED (cudaErrorInitializationError) there. The backend refuses in such
/// a child before it calls the driver (the fake would answer), with initialization_error and a
/// message saying why and what to do instead (S1: the call says what failed).
class S1_ForkedChild : public cuda_fake_driver {};

template <typename T>
status status_of(const soma::detail::result<T>& r) {
  return r.ok() ? status::success() : r.error();
}

TEST_F(S1_ForkedChild, CudaBackendRefusesBeforeCallingTheDriver) {
  auto backend = open();
  ASSERT_NE(backend, nullptr);
  stream_timeline timeline(0);
  auto s = stream_on(*backend, 0, timeline);
  auto base = backend->reserve_address(0, 2 * MiB);
  ASSERT_TRUE(base.ok()) << base.error().message();
  auto e = backend->create_event();
  ASSERT_TRUE(e.ok());

  const int result = soma_test::run_in_child([&] {
    const std::size_t reservations = gpu_.reservations.size();
    const std::size_t allocations = gpu_.allocations.size();
    const std::size_t streams = gpu_.streams.size();
    const int records = gpu_.event_records;
    int failures = 0;
    auto expect_refused = [&](const status& got, const char* call) {
      const std::string& message = got.message();
      if (got.code() == error_code::initialization_error &&
          message.find("forked") != std::string::npos &&
          message.find("CUDA cannot be used in a child forked after it started") !=
              std::string::npos &&
          message.find("spawn") != std::string::npos)
        return;
      std::fprintf(stderr, "child: %s: code %d, message '%s'\n", call, static_cast<int>(got.code()),
                   message.c_str());
      ++failures;
    };
    stream_timeline other(1);
    expect_refused(status_of(backend->create_stream(0, other)), "create_stream");
    expect_refused(status_of(backend->reserve_address(0, 2 * MiB)), "reserve_address");
    expect_refused(status_of(backend->create_physical(0, 2 * MiB, 0)), "create_physical");
    expect_refused(status_of(backend->allocate_host(4096)), "allocate_host");
    expect_refused(s->enqueue_memset(reinterpret_cast<void*>(base.value()), 0, 64),
                   "enqueue_memset");
    expect_refused(s->synchronize(), "stream synchronize");
    expect_refused(s->query(), "stream query");
    expect_refused(e.value()->record(*s), "event record");
    if (gpu_.reservations.size() != reservations || gpu_.allocations.size() != allocations ||
        gpu_.streams.size() != streams || gpu_.event_records != records) {
      std::fprintf(stderr, "child: the driver was called\n");
      ++failures;
    }
    return failures;
  });
  EXPECT_EQ(result, 0) << "calls in the child that were not refused (see stderr)";

  // The parent is untouched.
  ASSERT_TRUE(s->enqueue_memset(reinterpret_cast<void*>(base.value()), 0, 64).ok());
  EXPECT_TRUE(s->synchronize().ok());
  EXPECT_TRUE(e.value()->record(*s).ok());
  e.value().reset();
  s.reset();
  backend->free_address(base.value(), 2 * MiB);
}

}  // namespace
