// The cuda backend on a real GPU, against the contract of backend.hpp. Every test reports
// SKIPPED, with the reason, where no driver or device is present (CTest label `gpu`).
#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/driver_api.hpp"
#include "work_nodes.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using soma::detail::error_code;
using soma::detail::status;
using soma::detail::stream_timeline;
using ::testing::HasSubstr;
namespace be = soma::detail::backend;
namespace cuda = soma::detail::backend::cuda;

class cuda_gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (status usable = cuda::probe(); !usable.ok()) GTEST_SKIP() << usable.message();
    auto opened = cuda::open_backend();
    ASSERT_TRUE(opened.ok()) << opened.error().message();
    backend_ = std::move(opened.value());
    granule_bytes_ = backend_->properties(0).granularity_bytes;
  }

  /// Reserves and maps `granules` granules of device 0; unmapped and freed by TearDown.
  std::uintptr_t mapped(std::size_t granules, unsigned handle_types = 0) {
    const std::size_t bytes = granules * granule_bytes_;
    auto base = backend_->reserve_address(0, bytes);
    EXPECT_TRUE(base.ok()) << base.error().message();
    auto handle = backend_->create_physical(0, bytes, handle_types);
    EXPECT_TRUE(handle.ok()) << handle.error().message();
    status m = backend_->map(base.value(), bytes, handle.value(), 0);
    EXPECT_TRUE(m.ok()) << m.message();
    regions_.push_back({base.value(), bytes, handle.value()});
    return base.value();
  }
  std::uint64_t handle_of(std::uintptr_t base) const {
    for (const region& r : regions_)
      if (r.base == base) return r.handle;
    return 0;
  }

  /// Enqueues on s a host task that holds the stream until `release` turns true: work after it
  /// waits, so a test can see what is ordered after what.
  static status enqueue_gate(be::stream& s, const std::atomic<bool>& release) {
    return s.enqueue_host_task([&release] {
      while (!release.load()) std::this_thread::yield();
      return status::success();
    });
  }

  /// Checks that work enqueued on b now waits for the gate holding another stream (what b was
  /// ordered after), then opens the gate and sees b's work run.
  static void expect_held_by_gate(be::stream& b, std::atomic<bool>& release) {
    std::atomic<bool> b_ran{false};
    ASSERT_TRUE(b.enqueue_host_task([&b_ran] {
                   b_ran = true;
                   return status::success();
                 }).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(b_ran.load()) << "b ran before the work it was ordered after";
    release = true;
    ASSERT_TRUE(b.synchronize().ok());
    EXPECT_TRUE(b_ran.load());
  }

  void TearDown() override {
    for (const region& r : regions_) {
      backend_->unmap(r.base, r.bytes);
      backend_->release_physical(r.handle);
      backend_->free_address(r.base, r.bytes);
    }
  }

  struct region {
    std::uintptr_t base;
    std::size_t bytes;
    std::uint64_t handle;
  };
  std::unique_ptr<be::backend> backend_;
  std::size_t granule_bytes_ = 0;
  std::vector<region> regions_;
};

TEST_F(cuda_gpu, DevicePropertiesAreTheDrivers) {
  const be::device_properties p = backend_->properties(0);
  EXPECT_FALSE(p.name.empty());
  EXPECT_GT(p.total_memory_bytes, std::size_t{1} << 30);
  EXPECT_GT(p.granularity_bytes, 0u);
  EXPECT_EQ(p.granularity_bytes & (p.granularity_bytes - 1), 0u) << "a power of two";
  EXPECT_TRUE(p.memory_pools_supported);
  EXPECT_EQ(backend_->name(), "cuda");
}

TEST_F(cuda_gpu, MemsetAndMemcpyReachMappedMemory) {
  const std::uintptr_t base = mapped(1);
  stream_timeline timeline(0);
  auto s = backend_->create_stream(0, timeline);
  ASSERT_TRUE(s.ok()) << s.error().message();
  auto* device = reinterpret_cast<unsigned char*>(base);
  const std::size_t half = granule_bytes_ / 2;
  ASSERT_TRUE(s.value()->enqueue_memset(device, 0xAB, half).ok());
  ASSERT_TRUE(s.value()->enqueue_memcpy(device + half, device, half).ok());
  std::vector<unsigned char> host(granule_bytes_, 0);
  ASSERT_TRUE(s.value()->enqueue_memcpy(host.data(), device, granule_bytes_).ok());
  ASSERT_TRUE(s.value()->synchronize().ok());
  EXPECT_EQ(timeline.completed_position(), 3u);
  EXPECT_EQ(host.front(), 0xAB);
  EXPECT_EQ(host.back(), 0xAB);
  EXPECT_EQ(backend_->committed_bytes(0), granule_bytes_);
}

TEST_F(cuda_gpu, MarkersLearnCompletionWithoutBlocking) {
  const std::uintptr_t base = mapped(1);
  stream_timeline timeline(0);
  auto s = backend_->create_stream(0, timeline);
  ASSERT_TRUE(s.ok());
  std::atomic<bool> release{false};
  ASSERT_TRUE(enqueue_gate(*s.value(), release).ok());
  ASSERT_TRUE(s.value()->enqueue_memset(reinterpret_cast<void*>(base), 0, granule_bytes_).ok());
  EXPECT_FALSE(timeline.has_completed(2));  // records a marker behind the memset
  EXPECT_EQ(s.value()->query().code(), error_code::not_ready);
  release = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!timeline.has_completed(2) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  EXPECT_TRUE(timeline.has_completed(2));
}

TEST_F(cuda_gpu, DestroyedStreamStillReachesItsFinalPosition) {
  const std::uintptr_t base = mapped(4);
  stream_timeline timeline(0);
  {
    auto s = backend_->create_stream(0, timeline);
    ASSERT_TRUE(s.ok());
    for (int i = 0; i < 8; ++i)
      ASSERT_TRUE(
          s.value()->enqueue_memset(reinterpret_cast<void*>(base), i, 4 * granule_bytes_).ok());
  }  // destroyed with work pending: returns at once
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!timeline.has_completed(8) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  EXPECT_TRUE(timeline.has_completed(8));
}

TEST_F(cuda_gpu, FailedHostTaskIsSticky) {
  stream_timeline timeline(0);
  auto s = backend_->create_stream(0, timeline);
  ASSERT_TRUE(s.ok());
  std::atomic<bool> later_ran{false};
  ASSERT_TRUE(
      s.value()->enqueue_host_task([] { return status(error_code::invalid_value, "no"); }).ok());
  // The first task may have failed already: then the enqueue itself reports the sticky error.
  (void)(s.value()
             ->enqueue_host_task([&] {
               later_ran = true;
               return status::success();
             })
             .ok());
  EXPECT_EQ(s.value()->synchronize().code(), error_code::launch_failure);
  EXPECT_FALSE(later_ran.load());
  EXPECT_EQ(s.value()->sticky_error().code(), error_code::launch_failure);
}

TEST_F(cuda_gpu, WaitForOrdersOneStreamAfterAnother) {
  const std::uintptr_t base = mapped(1);
  stream_timeline a_line(0), b_line(1);
  auto a = backend_->create_stream(0, a_line);
  auto b = backend_->create_stream(0, b_line);
  ASSERT_TRUE(a.ok() && b.ok());
  std::atomic<bool> release{false};
  ASSERT_TRUE(enqueue_gate(*a.value(), release).ok());
  ASSERT_TRUE(a.value()->enqueue_memset(reinterpret_cast<void*>(base), 1, granule_bytes_).ok());
  ASSERT_TRUE(b.value()->enqueue_wait_for(*a.value(), 2).ok());
  expect_held_by_gate(*b.value(), release);
  EXPECT_TRUE(a_line.has_completed(2));
}

TEST_F(cuda_gpu, EventsRecordQueryAndSynchronize) {
  stream_timeline timeline(0);
  auto s = backend_->create_stream(0, timeline);
  auto e = backend_->create_event();
  ASSERT_TRUE(s.ok() && e.ok());
  EXPECT_TRUE(e.value()->query().ok());  // never recorded
  std::atomic<bool> release{false};
  ASSERT_TRUE(enqueue_gate(*s.value(), release).ok());
  ASSERT_TRUE(e.value()->record(*s.value()).ok());
  EXPECT_EQ(e.value()->query().code(), error_code::not_ready);
  release = true;
  EXPECT_TRUE(e.value()->synchronize().ok());
  EXPECT_TRUE(e.value()->query().ok());
}

// S12 whatever context the application's thread has current, another or none: a record and a
// wait still order one stream after the other, and leave the thread's context as it was. They
// ask the driver for no context first (call_in_stream_context): this shows the driver takes the
// stream's, or that soma makes the call again within it.
TEST_F(cuda_gpu, S12_RecordAndWaitOrderStreamsWhateverContextIsCurrent) {
  const cuda::driver_api& driver = *cuda::process_driver().value();
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(library, nullptr);
  using create_fn = cuda::CUresult (*)(cuda::CUcontext*, unsigned, int);
  using destroy_fn = cuda::CUresult (*)(cuda::CUcontext);
  const auto create = reinterpret_cast<create_fn>(dlsym(library, "cuCtxCreate_v2"));
  const auto destroy = reinterpret_cast<destroy_fn>(dlsym(library, "cuCtxDestroy_v2"));
  ASSERT_TRUE(create != nullptr && destroy != nullptr);
  stream_timeline a_line(0), b_line(1);
  auto a = backend_->create_stream(0, a_line);
  auto b = backend_->create_stream(0, b_line);
  auto e = backend_->create_event();
  ASSERT_TRUE(a.ok() && b.ok() && e.ok());
  ASSERT_TRUE(e.value()->record(*a.value()).ok());  // its CUevent, made in a's context
  cuda::CUcontext before = nullptr;
  ASSERT_EQ(driver.cuCtxGetCurrent(&before), cuda::CUDA_SUCCESS);
  cuda::CUcontext other = nullptr;
  ASSERT_EQ(create(&other, 0, 0), cuda::CUDA_SUCCESS);  // a second context of device 0
  for (cuda::CUcontext current : {other, cuda::CUcontext{nullptr}}) {
    ASSERT_EQ(driver.cuCtxSetCurrent(current), cuda::CUDA_SUCCESS);
    std::atomic<bool> release{false};
    ASSERT_TRUE(enqueue_gate(*a.value(), release).ok());
    status recorded = e.value()->record(*a.value());
    ASSERT_TRUE(recorded.ok()) << recorded.message();
    status waited = b.value()->enqueue_wait(*e.value());
    ASSERT_TRUE(waited.ok()) << waited.message();
    expect_held_by_gate(*b.value(), release);
    cuda::CUcontext after = nullptr;
    ASSERT_EQ(driver.cuCtxGetCurrent(&after), cuda::CUDA_SUCCESS);
    EXPECT_EQ(after, current);
  }
  EXPECT_EQ(destroy(other), cuda::CUDA_SUCCESS);
  EXPECT_EQ(driver.cuCtxSetCurrent(before), cuda::CUDA_SUCCESS);
}

TEST_F(cuda_gpu, ExportedMemoryImportsIntoASecondMapping) {
  if ((backend_->properties(0).supported_handle_types & be::handle_type_posix_fd) == 0)
    GTEST_SKIP() << "device 0 cannot export POSIX file descriptors";
  const std::uintptr_t first = mapped(1, be::handle_type_posix_fd);
  auto fd = backend_->export_physical(handle_of(first));
  ASSERT_TRUE(fd.ok()) << fd.error().message();
  auto imported = backend_->import_physical(0, fd.value(), granule_bytes_);
  ::close(fd.value());
  ASSERT_TRUE(imported.ok()) << imported.error().message();
  auto second = backend_->reserve_address(0, granule_bytes_);
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(backend_->map(second.value(), granule_bytes_, imported.value(), 0).ok());
  stream_timeline timeline(0);
  auto s = backend_->create_stream(0, timeline);
  ASSERT_TRUE(s.value()->enqueue_memset(reinterpret_cast<void*>(first), 0x5A, granule_bytes_).ok());
  unsigned char seen = 0;
  ASSERT_TRUE(s.value()->enqueue_memcpy(&seen, reinterpret_cast<void*>(second.value()), 1).ok());
  ASSERT_TRUE(s.value()->synchronize().ok());
  EXPECT_EQ(seen, 0x5A);
  backend_->unmap(second.value(), granule_bytes_);
  backend_->release_physical(imported.value());
  backend_->free_address(second.value(), granule_bytes_);
}

TEST_F(cuda_gpu, OutOfMemoryIsReportedAtCreation) {
  const std::size_t total = backend_->properties(0).total_memory_bytes;
  const std::size_t too_much = (2 * total + granule_bytes_ - 1) / granule_bytes_ * granule_bytes_;
  auto created = backend_->create_physical(0, too_much, 0);
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(created.error().code(), error_code::out_of_memory);
  EXPECT_THAT(created.error().message(), HasSubstr("free of"));
  EXPECT_EQ(backend_->committed_bytes(0), 0u);
}

TEST_F(cuda_gpu, AdoptedStreamIsUsedAndLeftAlive) {
  stream_timeline owner_line(0), adopted_line(1);
  auto owner = backend_->create_stream(0, owner_line);
  ASSERT_TRUE(owner.ok());
  void* native = owner.value()->native_handle();
  ASSERT_NE(native, nullptr);
  {
    auto adopted = backend_->adopt_stream(0, native, adopted_line, false);
    ASSERT_TRUE(adopted.ok()) << adopted.error().message();
    ASSERT_TRUE(adopted.value()->enqueue_host_task([] { return status::success(); }).ok());
    ASSERT_TRUE(adopted.value()->synchronize().ok());
  }
  // The adopted wrapper is gone; the CUstream still works.
  ASSERT_TRUE(owner.value()->enqueue_host_task([] { return status::success(); }).ok());
  EXPECT_TRUE(owner.value()->synchronize().ok());
}

// ---- graphs (S15) and map_part ---------------------------------------------------------------

/// Reads bytes at a device address through a stream, synchronously.
std::vector<unsigned char> read_back(be::stream& s, std::uintptr_t address, std::size_t bytes) {
  std::vector<unsigned char> host(bytes, 0);
  EXPECT_TRUE(s.enqueue_memcpy(host.data(), reinterpret_cast<void*>(address), bytes).ok());
  EXPECT_TRUE(s.synchronize().ok());
  return host;
}

TEST_F(cuda_gpu, GraphMemsetAndMemcpyFillMemoryMappedWithMapPart) {
  const std::size_t bytes = granule_bytes_;
  auto base = backend_->reserve_address(0, bytes);
  auto handle = backend_->create_physical(0, bytes, 0);
  ASSERT_TRUE(base.ok() && handle.ok());
  ASSERT_TRUE(backend_->map_part(base.value(), bytes, handle.value(), 0, 0).ok());
  auto* device = reinterpret_cast<unsigned char*>(base.value());
  const std::size_t half = bytes / 2;

  stream_timeline timeline(0);
  auto s = backend_->create_stream(0, timeline);
  auto e = backend_->create_event();
  auto graph = backend_->create_work_graph(0);
  ASSERT_TRUE(s.ok() && e.ok());
  ASSERT_TRUE(graph.ok()) << graph.error().message();
  std::vector<unsigned char> host(bytes, 0);
  auto set = graph.value()->add({}, soma_backend_test::memset_node(device, 0x3C, half));
  ASSERT_TRUE(set.ok()) << set.error().message();
  const std::size_t after_set[] = {set.value()};
  auto copy =
      graph.value()->add(after_set, soma_backend_test::memcpy_node(device + half, device, half));
  ASSERT_TRUE(copy.ok()) << copy.error().message();
  const std::size_t after_copy[] = {copy.value()};
  auto out =
      graph.value()->add(after_copy, soma_backend_test::memcpy_node(host.data(), device, bytes));
  ASSERT_TRUE(out.ok()) << out.error().message();
  const std::size_t after_out[] = {out.value()};
  ASSERT_TRUE(graph.value()->add(after_out, soma_backend_test::event_record_node(*e.value())).ok());
  auto exec = graph.value()->instantiate();
  ASSERT_TRUE(exec.ok()) << exec.error().message();
  ASSERT_TRUE(exec.value()->upload(*s.value()).ok());
  ASSERT_TRUE(exec.value()->launch(*s.value()).ok());
  EXPECT_EQ(timeline.enqueued_position(), 1u);
  ASSERT_TRUE(e.value()->synchronize().ok());  // the launch's record node
  EXPECT_EQ(host.front(), 0x3C);
  EXPECT_EQ(host[half - 1], 0x3C);
  EXPECT_EQ(host[half], 0x3C);
  EXPECT_EQ(host.back(), 0x3C);

  ASSERT_TRUE(exec.value()->set_memset(set.value(), device, 0xA7, half).ok());
  ASSERT_TRUE(exec.value()->launch(*s.value()).ok());
  ASSERT_TRUE(s.value()->synchronize().ok());
  EXPECT_EQ(timeline.completed_position(), 2u);
  EXPECT_EQ(host.front(), 0xA7);
  EXPECT_EQ(host.back(), 0xA7);
  EXPECT_TRUE(e.value()->query().ok());

  exec.value().reset();
  graph.value().reset();
  backend_->unmap(base.value(), bytes);
  backend_->release_physical(handle.value());
  backend_->free_address(base.value(), bytes);
}

TEST_F(cuda_gpu, NativeCaptureBecomesAChildGraph) {
  const std::uintptr_t base = mapped(1);
  stream_timeline captured_line(0), launch_line(1);
  auto captured = backend_->create_stream(0, captured_line);
  auto launcher = backend_->create_stream(0, launch_line);
  ASSERT_TRUE(captured.ok() && launcher.ok());
  auto native = static_cast<cuda::CUstream>(captured.value()->native_handle());
  const cuda::driver_api& driver = *cuda::process_driver().value();
  cuda::CUcontext context = nullptr;
  ASSERT_EQ(driver.cuStreamGetCtx(native, &context), cuda::CUDA_SUCCESS);

  // Nothing recorded: no graph.
  ASSERT_TRUE(backend_->begin_native_capture(*captured.value()).ok());
  auto nothing = backend_->end_native_capture(*captured.value());
  ASSERT_TRUE(nothing.ok()) << nothing.error().message();
  EXPECT_EQ(nothing.value(), nullptr);

  // The application's work on the stream lands in the graph, not on the GPU.
  ASSERT_TRUE(backend_->begin_native_capture(*captured.value()).ok());
  {
    cuda::context_scope scope(driver, context);
    ASSERT_EQ(
        driver.cuMemsetD8Async(static_cast<cuda::CUdeviceptr>(base), 0x77, granule_bytes_, native),
        cuda::CUDA_SUCCESS);
  }
  EXPECT_FALSE(captured_line.has_completed(1));  // nothing enqueued: a poll asks nothing
  auto graph_of_capture = backend_->end_native_capture(*captured.value());
  ASSERT_TRUE(graph_of_capture.ok()) << graph_of_capture.error().message();
  ASSERT_NE(graph_of_capture.value(), nullptr);
  EXPECT_EQ(read_back(*captured.value(), base, 1).front(), 0) << "captured work ran";

  auto graph = backend_->create_work_graph(0);
  ASSERT_TRUE(graph.ok());
  auto child =
      graph.value()->add({}, soma_backend_test::native_child_node(graph_of_capture.value()));
  ASSERT_TRUE(child.ok()) << child.error().message();
  backend_->destroy_native_graph(graph_of_capture.value());  // the node holds a copy
  std::vector<unsigned char> host(granule_bytes_, 0);
  const std::size_t after_child[] = {child.value()};
  ASSERT_TRUE(
      graph.value()
          ->add(after_child, soma_backend_test::memcpy_node(
                                 host.data(), reinterpret_cast<void*>(base), granule_bytes_))
          .ok());
  auto exec = graph.value()->instantiate();
  ASSERT_TRUE(exec.ok()) << exec.error().message();
  ASSERT_TRUE(exec.value()->launch(*launcher.value()).ok());
  ASSERT_TRUE(launcher.value()->synchronize().ok());
  EXPECT_EQ(host.front(), 0x77);
  EXPECT_EQ(host.back(), 0x77);
}

TEST_F(cuda_gpu, OnePhysicalAllocationMapsAtTwoAddressesButOnlyFromItsStart) {
  // cuMemMap maps from offset 0 only: map_part refuses another offset (graph memory then comes
  // in granule-sized allocations). Two whole mappings of one allocation alias.
  const std::size_t g = granule_bytes_;
  auto handle = backend_->create_physical(0, 2 * g, 0);
  auto first = backend_->reserve_address(0, 2 * g);
  auto second = backend_->reserve_address(0, 2 * g);
  ASSERT_TRUE(handle.ok() && first.ok() && second.ok());
  status refused = backend_->map_part(first.value(), g, handle.value(), g, 0);
  EXPECT_EQ(refused.code(), error_code::not_supported) << refused.message();
  ASSERT_TRUE(backend_->map_part(first.value(), 2 * g, handle.value(), 0, 0).ok());
  ASSERT_TRUE(backend_->map_part(second.value(), 2 * g, handle.value(), 0, 0).ok());
  stream_timeline timeline(0);
  auto s = backend_->create_stream(0, timeline);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s.value()->enqueue_memset(reinterpret_cast<void*>(first.value()), 0x01, 2 * g).ok());
  ASSERT_TRUE(s.value()->enqueue_memset(reinterpret_cast<void*>(second.value() + g), 0x5A, g).ok());
  std::vector<unsigned char> seen = read_back(*s.value(), first.value(), 2 * g);
  EXPECT_EQ(seen.front(), 0x01);
  EXPECT_EQ(seen[g - 1], 0x01);
  EXPECT_EQ(seen[g], 0x5A);
  EXPECT_EQ(seen.back(), 0x5A);
  backend_->unmap(first.value(), 2 * g);
  backend_->unmap(second.value(), 2 * g);
  backend_->release_physical(handle.value());
  backend_->free_address(first.value(), 2 * g);
  backend_->free_address(second.value(), 2 * g);
}

// Release and remap unmap in batches: the driver takes one cuMemUnmap over several mappings end
// to end (the backend falls back to a call a mapping where it would not, and counts that).
TEST_F(cuda_gpu, SeveralMappingsUnmapInOneDriverCall) {
  const std::size_t g = granule_bytes_;
  auto base = backend_->reserve_address(0, 4 * g);
  ASSERT_TRUE(base.ok()) << base.error().message();
  std::vector<be::backend::mapping_part> parts;
  for (int i = 0; i < 4; ++i) {
    auto handle = backend_->create_physical(0, g, 0);
    ASSERT_TRUE(handle.ok()) << handle.error().message();
    parts.push_back({handle.value(), 0, g});
  }
  stream_timeline timeline(0);
  auto s = backend_->create_stream(0, timeline);
  ASSERT_TRUE(s.ok());
  for (unsigned char fill : {0x11, 0x22}) {  // mapped, written and read twice: unmapped between
    ASSERT_TRUE(backend_->map_parts(base.value(), parts, 0).ok());
    ASSERT_TRUE(s.value()->enqueue_memset(reinterpret_cast<void*>(base.value()), fill, 4 * g).ok());
    std::vector<unsigned char> seen = read_back(*s.value(), base.value(), 4 * g);
    EXPECT_EQ(seen.front(), fill);
    EXPECT_EQ(seen.back(), fill);
    backend_->unmap(base.value(), 4 * g);
  }
  auto* cuda_backend = dynamic_cast<cuda::cuda_backend*>(backend_.get());
  ASSERT_NE(cuda_backend, nullptr);
  EXPECT_EQ(cuda_backend->unmap_fallbacks(), 0u) << "the driver refused a range of mappings";
  for (const auto& part : parts) backend_->release_physical(part.handle);
  backend_->free_address(base.value(), 4 * g);
}

}  // namespace
