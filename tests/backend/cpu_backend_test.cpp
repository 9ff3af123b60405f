// The cpu backend against the contract of backend.hpp: settings, address space, physical
// memory and its budget, export/import, streams, events, sticky errors, timelines.
#include "backend/cpu/cpu_backend.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <future>
#include <latch>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

using soma::detail::error_code;
using soma::detail::status;
using soma::detail::stream_timeline;
namespace be = soma::detail::backend;
namespace cpu = soma::detail::backend::cpu;

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;
constexpr std::size_t kGranule = 64 * KiB;
constexpr std::size_t kDeviceMemory = 64 * MiB;

const char* const kVariables[] = {"SOMA_CPU_DEVICES", "SOMA_CPU_DEVICE_MEMORY",
                                  "SOMA_CPU_GRANULARITY", "SOMA_BACKEND"};

/// Clears the SOMA_CPU_* variables for the test and restores them afterwards.
class environment_guard {
 public:
  environment_guard() {
    for (const char* name : kVariables) {
      const char* value = std::getenv(name);
      saved_.push_back(value ? std::optional<std::string>(value) : std::nullopt);
      ::unsetenv(name);
    }
  }
  ~environment_guard() {
    for (std::size_t i = 0; i < std::size(kVariables); ++i) {
      if (saved_[i]) {
        ::setenv(kVariables[i], saved_[i]->c_str(), 1);
      } else {
        ::unsetenv(kVariables[i]);
      }
    }
  }

 private:
  std::vector<std::optional<std::string>> saved_;
};

// ---- settings ------------------------------------------------------------------------------

class CpuSettings : public ::testing::Test {
 protected:
  environment_guard env_;
};

TEST_F(CpuSettings, DefaultsWithoutEnvironment) {
  auto r = cpu::resolve_settings({});
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r.value().device_count, 1);
  EXPECT_EQ(r.value().device_memory_bytes, std::size_t{4} << 30);
  EXPECT_EQ(r.value().granularity_bytes, std::size_t{2} << 20);
}

TEST_F(CpuSettings, ExplicitSettings) {
  be::cpu_settings given;
  given.device_count = 2;
  given.device_memory_bytes = kDeviceMemory;
  given.granularity_bytes = kGranule;
  auto r = cpu::resolve_settings(given);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r.value().device_count, 2);
  EXPECT_EQ(r.value().device_memory_bytes, kDeviceMemory);
  EXPECT_EQ(r.value().granularity_bytes, kGranule);
}

TEST_F(CpuSettings, EnvironmentFillsUnsetFields) {
  ::setenv("SOMA_CPU_DEVICES", "3", 1);
  ::setenv("SOMA_CPU_DEVICE_MEMORY", "64M", 1);
  ::setenv("SOMA_CPU_GRANULARITY", "64K", 1);
  auto r = cpu::resolve_settings({});
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r.value().device_count, 3);
  EXPECT_EQ(r.value().device_memory_bytes, kDeviceMemory);
  EXPECT_EQ(r.value().granularity_bytes, kGranule);

  ::setenv("SOMA_CPU_DEVICE_MEMORY", "1G", 1);
  ::setenv("SOMA_CPU_GRANULARITY", "64KiB", 1);
  r = cpu::resolve_settings({});
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r.value().device_memory_bytes, std::size_t{1} << 30);
  EXPECT_EQ(r.value().granularity_bytes, kGranule);

  ::setenv("SOMA_CPU_DEVICE_MEMORY", "67108864", 1);
  ::setenv("SOMA_CPU_GRANULARITY", "2MB", 1);
  r = cpu::resolve_settings({});
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r.value().device_memory_bytes, kDeviceMemory);
  EXPECT_EQ(r.value().granularity_bytes, std::size_t{2} << 20);
}

TEST_F(CpuSettings, ExplicitSettingsWinOverEnvironment) {
  ::setenv("SOMA_CPU_DEVICES", "5", 1);
  ::setenv("SOMA_CPU_DEVICE_MEMORY", "1G", 1);
  ::setenv("SOMA_CPU_GRANULARITY", "2M", 1);
  be::cpu_settings given;
  given.device_count = 2;
  given.granularity_bytes = kGranule;
  auto r = cpu::resolve_settings(given);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r.value().device_count, 2);
  EXPECT_EQ(r.value().device_memory_bytes, std::size_t{1} << 30);  // from the environment
  EXPECT_EQ(r.value().granularity_bytes, kGranule);
}

TEST_F(CpuSettings, DeviceMemoryIsRoundedDownToTheGranularity) {
  be::cpu_settings given;
  given.device_memory_bytes = kDeviceMemory + 1000;
  given.granularity_bytes = kGranule;
  auto r = cpu::resolve_settings(given);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r.value().device_memory_bytes, kDeviceMemory);
}

void expect_bad_variable(const char* variable, const char* value) {
  SCOPED_TRACE(std::string(variable) + "=" + value);
  ::setenv(variable, value, 1);
  auto r = cpu::resolve_settings({});
  ::unsetenv(variable);
  ASSERT_FALSE(r.ok()) << "accepted";
  EXPECT_EQ(r.error().code(), error_code::initialization_error);
  EXPECT_NE(r.error().message().find(variable), std::string::npos) << r.error().message();
  EXPECT_NE(r.error().message().find(value), std::string::npos) << r.error().message();
}

TEST_F(CpuSettings, BadValuesAreInitializationErrors) {
  for (const char* v : {"0", "-1", "65", "two", "2x", "1.5"})
    expect_bad_variable("SOMA_CPU_DEVICES", v);
  for (const char* v : {"lots", "0", "12T", "64MX", "99999999999999999999", "20000000000G"}) {
    expect_bad_variable("SOMA_CPU_DEVICE_MEMORY", v);
  }
  for (const char* v : {"big", "64Q", "99999999999999999999"}) {
    expect_bad_variable("SOMA_CPU_GRANULARITY", v);
  }
}

// S8: SOMA_CPU_DEVICES and cpu_settings::device_count (somaSetCpuBackendConfig) share one limit,
// and the message names it.
class S8_CpuDeviceLimit : public CpuSettings {};

TEST_F(S8_CpuDeviceLimit, IsTheSameForTheEnvironmentAndExplicitSettings) {
  constexpr int limit = 64;  // docs/api-behaviour.md
  for (const int count : {limit + 1, 5000}) {
    be::cpu_settings given;
    given.device_count = count;
    auto r = cpu::resolve_settings(given);
    ASSERT_FALSE(r.ok()) << count << " devices accepted";
    EXPECT_NE(r.error().message().find(std::to_string(limit)), std::string::npos)
        << r.error().message();
    const std::string text = std::to_string(count);
    expect_bad_variable("SOMA_CPU_DEVICES", text.c_str());
    ::setenv("SOMA_CPU_DEVICES", text.c_str(), 1);
    r = cpu::resolve_settings({});
    ::unsetenv("SOMA_CPU_DEVICES");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message().find(std::to_string(limit)), std::string::npos)
        << r.error().message();
  }
  be::cpu_settings at_limit;
  at_limit.device_count = limit;
  auto r = cpu::resolve_settings(at_limit);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r.value().device_count, limit);
  ::setenv("SOMA_CPU_DEVICES", "64", 1);
  r = cpu::resolve_settings({});
  ::unsetenv("SOMA_CPU_DEVICES");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r.value().device_count, limit);
}

// Regression (found by this test on fba5925, cpu_settings.cpp parse_bytes: strtoull negates
// a leading '-', so SOMA_CPU_DEVICE_MEMORY=-1 was accepted as 16 EiB).
TEST_F(CpuSettings, NegativeSizeIsRejected) {
  expect_bad_variable("SOMA_CPU_DEVICE_MEMORY", "-1");
  expect_bad_variable("SOMA_CPU_GRANULARITY", "-64K");
}

TEST_F(CpuSettings, GranularityMustBeAPowerOfTwoOfAtLeastAPage) {
  for (std::size_t g : {std::size_t{3000}, std::size_t{96} << 10, std::size_t{1024}}) {
    be::cpu_settings given;
    given.granularity_bytes = g;
    auto r = cpu::resolve_settings(given);
    ASSERT_FALSE(r.ok()) << g;
    EXPECT_EQ(r.error().code(), error_code::initialization_error);
    EXPECT_NE(r.error().message().find("granularity"), std::string::npos);
  }
}

TEST_F(CpuSettings, DeviceMemorySmallerThanGranularityIsRejected) {
  be::cpu_settings given;
  given.device_memory_bytes = 32 * KiB;
  given.granularity_bytes = kGranule;
  auto r = cpu::resolve_settings(given);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), error_code::initialization_error);
}

TEST_F(CpuSettings, FactoryHonoursSomaBackend) {
  be::cpu_settings given;
  given.device_count = 1;
  given.device_memory_bytes = kDeviceMemory;
  given.granularity_bytes = kGranule;
  ::setenv("SOMA_BACKEND", "cpu", 1);
  auto made = be::create_backend(given);
  ASSERT_TRUE(made.ok()) << made.error().message();
  EXPECT_EQ(made.value()->name(), "cpu");
  ::setenv("SOMA_BACKEND", "auto", 1);
  EXPECT_TRUE(be::create_backend(given).ok());
  ::setenv("SOMA_BACKEND", "opencl", 1);
  auto bad = be::create_backend(given);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code(), error_code::initialization_error);
  ::setenv("SOMA_BACKEND", "cpu", 1);
  ::setenv("SOMA_CPU_DEVICES", "zero", 1);
  given.device_count = 0;
  auto bad_settings = be::create_backend(given);
  ASSERT_FALSE(bad_settings.ok());
  EXPECT_EQ(bad_settings.error().code(), error_code::initialization_error);
}

// ---- memory ----------------------------------------------------------------------------------

class CpuBackend : public ::testing::Test {
 protected:
  CpuBackend() {
    cpu::resolved_settings settings;
    settings.device_count = 2;
    settings.device_memory_bytes = kDeviceMemory;
    settings.granularity_bytes = kGranule;
    backend_ = std::make_unique<cpu::cpu_backend>(settings);
  }
  ~CpuBackend() override {
    streams_.clear();
    // Let every worker finish with its timeline before the timelines go (the worker notes
    // completion into the timeline after the stream object is gone).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (auto& t : timelines_) {
      while (t.completed_position() < t.enqueued_position() &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      EXPECT_EQ(t.completed_position(), t.enqueued_position());
    }
  }

  be::stream& make_stream(int device = 0) {
    timelines_.emplace_back(static_cast<std::uint32_t>(timelines_.size()));
    auto made = backend_->create_stream(device, timelines_.back());
    EXPECT_TRUE(made.ok());
    streams_.push_back(std::move(made.value()));
    return *streams_.back();
  }
  stream_timeline& timeline_of(std::size_t i) { return timelines_[i]; }
  std::unique_ptr<be::event> make_event() {
    auto made = backend_->create_event();
    EXPECT_TRUE(made.ok());
    return std::move(made.value());
  }

  std::unique_ptr<cpu::cpu_backend> backend_;
  std::deque<stream_timeline> timelines_;
  std::vector<std::unique_ptr<be::stream>> streams_;
};

TEST_F(CpuBackend, DevicesAndProperties) {
  EXPECT_EQ(backend_->name(), "cpu");
  EXPECT_EQ(backend_->device_count(), 2);
  const be::device_properties p = backend_->properties(1);
  EXPECT_FALSE(p.name.empty());
  EXPECT_EQ(p.total_memory_bytes, kDeviceMemory);
  EXPECT_EQ(p.granularity_bytes, kGranule);
  EXPECT_TRUE(p.supported_handle_types & be::handle_type_posix_fd);
  EXPECT_TRUE(backend_->can_access_peer(0, 1));
  EXPECT_TRUE(backend_->can_access_peer(1, 0));
  EXPECT_FALSE(backend_->can_access_peer(0, 0));
  EXPECT_FALSE(backend_->can_access_peer(0, 2));
  EXPECT_EQ(backend_->committed_bytes(0), 0u);
}

TEST_F(CpuBackend, S3_ReserveCommitMapWriteReadUnmapRelease) {
  auto base = backend_->reserve_address(0, 1 * MiB);
  ASSERT_TRUE(base.ok()) << base.error().message();
  EXPECT_EQ(base.value() % kGranule, 0u);
  auto handle = backend_->create_physical(0, 2 * kGranule, 0);
  ASSERT_TRUE(handle.ok()) << handle.error().message();
  EXPECT_EQ(backend_->committed_bytes(0), 2 * kGranule);
  EXPECT_EQ(backend_->committed_bytes(1), 0u);

  const std::uintptr_t at = base.value() + kGranule;  // anywhere inside the reservation
  ASSERT_TRUE(backend_->map(at, 2 * kGranule, handle.value(), 0).ok());
  EXPECT_TRUE(backend_->set_access(at, 2 * kGranule, 1, be::access_flags::read_write).ok());
  auto* bytes = reinterpret_cast<unsigned char*>(at);
  for (std::size_t i = 0; i < 2 * kGranule; ++i) bytes[i] = static_cast<unsigned char>(i * 7);
  for (std::size_t i = 0; i < 2 * kGranule; i += 4099) {
    ASSERT_EQ(bytes[i], static_cast<unsigned char>(i * 7)) << i;
  }
  backend_->unmap(at, 2 * kGranule);
  EXPECT_EQ(backend_->committed_bytes(0), 2 * kGranule);  // unmapped, not released
  // The range stays reserved: mapping again at the same address works.
  ASSERT_TRUE(backend_->map(at, 2 * kGranule, handle.value(), 0).ok());
  EXPECT_EQ(bytes[4099], static_cast<unsigned char>(4099 * 7));  // same physical memory
  backend_->unmap(at, 2 * kGranule);
  backend_->release_physical(handle.value());
  EXPECT_EQ(backend_->committed_bytes(0), 0u);
  backend_->free_address(base.value(), 1 * MiB);
}

TEST_F(CpuBackend, ReservationsAreGranuleAligned) {
  std::vector<std::uintptr_t> bases;
  for (std::size_t bytes : {kGranule, 3 * kGranule, 5 * MiB}) {
    auto base = backend_->reserve_address(0, bytes);
    ASSERT_TRUE(base.ok());
    EXPECT_EQ(base.value() % kGranule, 0u);
    backend_->free_address(base.value(), bytes);
  }
}

TEST_F(CpuBackend, SetAccessRejectsUnknownDevice) {
  status s = backend_->set_access(0x100000, kGranule, 7, be::access_flags::read);
  EXPECT_EQ(s.code(), error_code::invalid_device);
}

TEST_F(CpuBackend, S3_DeviceBudgetExhaustionIsOutOfMemory) {
  std::vector<std::uint64_t> handles;
  for (std::size_t i = 0; i < kDeviceMemory / (4 * MiB); ++i) {
    auto h = backend_->create_physical(0, 4 * MiB, 0);
    ASSERT_TRUE(h.ok()) << i << ": " << h.error().message();
    handles.push_back(h.value());
  }
  EXPECT_EQ(backend_->committed_bytes(0), kDeviceMemory);
  auto over = backend_->create_physical(0, kGranule, 0);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().code(), error_code::out_of_memory);
  EXPECT_NE(over.error().message().find("device 0"), std::string::npos) << over.error().message();
  EXPECT_EQ(backend_->committed_bytes(0), kDeviceMemory);  // the failure took nothing
  // Devices have separate budgets.
  auto other = backend_->create_physical(1, kGranule, 0);
  ASSERT_TRUE(other.ok()) << other.error().message();
  EXPECT_EQ(backend_->committed_bytes(1), kGranule);
  backend_->release_physical(other.value());
  // A request that can never fit (and one that would wrap) fails too.
  for (auto& h : handles) backend_->release_physical(h);
  EXPECT_EQ(backend_->committed_bytes(0), 0u);
  EXPECT_EQ(backend_->create_physical(0, kDeviceMemory + kGranule, 0).error().code(),
            error_code::out_of_memory);
  EXPECT_EQ(backend_->create_physical(0, ~std::size_t{0} - kGranule + 1, 0).error().code(),
            error_code::out_of_memory);
  EXPECT_EQ(backend_->committed_bytes(0), 0u);
  EXPECT_EQ(backend_->committed_bytes(1), 0u);
}

TEST_F(CpuBackend, S7_ExportImportMapsTheSameBytes) {
  auto handle = backend_->create_physical(0, kGranule, be::handle_type_posix_fd);
  ASSERT_TRUE(handle.ok());
  auto a = backend_->reserve_address(0, kGranule);
  auto b = backend_->reserve_address(0, kGranule);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(backend_->map(a.value(), kGranule, handle.value(), 0).ok());
  auto* at_a = reinterpret_cast<char*>(a.value());
  std::strcpy(at_a + 100, "shared through a descriptor");

  auto fd = backend_->export_physical(handle.value());
  ASSERT_TRUE(fd.ok()) << fd.error().message();
  EXPECT_NE(static_cast<std::uint64_t>(fd.value()), handle.value());  // a new descriptor
  auto imported = backend_->import_physical(1, fd.value(), kGranule);
  ASSERT_TRUE(imported.ok()) << imported.error().message();
  ::close(fd.value());  // import takes no ownership
  // Imported memory counts against the exporter's budget only.
  EXPECT_EQ(backend_->committed_bytes(0), kGranule);
  EXPECT_EQ(backend_->committed_bytes(1), 0u);

  ASSERT_TRUE(backend_->map(b.value(), kGranule, imported.value(), 1).ok());
  auto* at_b = reinterpret_cast<char*>(b.value());
  EXPECT_STREQ(at_b + 100, "shared through a descriptor");
  at_b[5000] = 'x';
  EXPECT_EQ(at_a[5000], 'x');

  backend_->unmap(b.value(), kGranule);
  backend_->release_physical(imported.value());
  EXPECT_EQ(backend_->committed_bytes(0), kGranule);
  EXPECT_EQ(backend_->committed_bytes(1), 0u) << "releasing an import charged device 1";
  EXPECT_EQ(at_a[5000], 'x');  // the exporter's mapping is unaffected
  backend_->unmap(a.value(), kGranule);
  backend_->release_physical(handle.value());
  EXPECT_EQ(backend_->committed_bytes(0), 0u);
  backend_->free_address(a.value(), kGranule);
  backend_->free_address(b.value(), kGranule);
}

TEST_F(CpuBackend, S9_DiscardPhysicalPartReturnsGranules) {
  ASSERT_TRUE(backend_->can_discard_physical_part());
  auto base = backend_->reserve_address(0, 4 * kGranule);
  auto handle = backend_->create_physical(0, 4 * kGranule, 0);
  ASSERT_TRUE(base.ok() && handle.ok());
  ASSERT_TRUE(backend_->map(base.value(), 4 * kGranule, handle.value(), 0).ok());
  auto* bytes = reinterpret_cast<unsigned char*>(base.value());
  std::memset(bytes, 0x5A, 4 * kGranule);
  // Give back granule 2 only: unmap it, discard it; the other granules keep their bytes.
  backend_->unmap(base.value() + 2 * kGranule, kGranule);
  backend_->discard_physical_part(handle.value(), 2 * kGranule, kGranule);
  EXPECT_EQ(backend_->committed_bytes(0), 3 * kGranule);
  EXPECT_EQ(bytes[0], 0x5A);
  EXPECT_EQ(bytes[kGranule + 17], 0x5A);
  EXPECT_EQ(bytes[3 * kGranule + 17], 0x5A);
  backend_->unmap(base.value(), 2 * kGranule);
  backend_->unmap(base.value() + 3 * kGranule, kGranule);
  backend_->release_physical(handle.value());
  EXPECT_EQ(backend_->committed_bytes(0), 0u);
  backend_->free_address(base.value(), 4 * kGranule);
}

TEST_F(CpuBackend, S7_ImportOfTooSmallDescriptorIsInvalidValue) {
  auto handle = backend_->create_physical(0, kGranule, be::handle_type_posix_fd);
  ASSERT_TRUE(handle.ok());
  auto fd = backend_->export_physical(handle.value());
  ASSERT_TRUE(fd.ok());
  auto imported = backend_->import_physical(0, fd.value(), 2 * kGranule);
  EXPECT_FALSE(imported.ok());
  EXPECT_EQ(imported.error().code(), error_code::invalid_value);
  ::close(fd.value());
  backend_->release_physical(handle.value());
}

// ---- streams -------------------------------------------------------------------------------

TEST_F(CpuBackend, StreamRunsHostTasksInOrder) {
  be::stream& s = make_stream(1);
  EXPECT_EQ(s.device(), 1);
  std::vector<int> order;  // touched by the worker only, read after synchronize
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(s.enqueue_host_task([&order, i] {
                   order.push_back(i);
                   return status::success();
                 }).ok());
  }
  ASSERT_TRUE(s.synchronize().ok());
  ASSERT_EQ(order.size(), 200u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
  EXPECT_TRUE(s.query().ok());
}

TEST_F(CpuBackend, StreamMemsetAndMemcpyReachMappedMemory) {
  auto base = backend_->reserve_address(0, kGranule);
  auto handle = backend_->create_physical(0, kGranule, 0);
  ASSERT_TRUE(base.ok() && handle.ok());
  ASSERT_TRUE(backend_->map(base.value(), kGranule, handle.value(), 0).ok());
  auto* bytes = reinterpret_cast<unsigned char*>(base.value());
  be::stream& s = make_stream();
  ASSERT_TRUE(s.enqueue_memset(bytes, 0xAB, 1000).ok());
  ASSERT_TRUE(s.enqueue_memcpy(bytes + 2000, bytes, 500).ok());
  ASSERT_TRUE(s.enqueue_memset(bytes + 100, 0x11, 10).ok());
  ASSERT_TRUE(s.synchronize().ok());
  EXPECT_EQ(bytes[0], 0xAB);
  EXPECT_EQ(bytes[999], 0xAB);
  EXPECT_EQ(bytes[1000], 0x00);
  EXPECT_EQ(bytes[105], 0x11);
  EXPECT_EQ(bytes[2000 + 105], 0xAB);  // the copy ran before the later memset
  EXPECT_EQ(bytes[2499], 0xAB);
  EXPECT_EQ(bytes[2500], 0x00);
  backend_->unmap(base.value(), kGranule);
  backend_->release_physical(handle.value());
  backend_->free_address(base.value(), kGranule);
}

TEST_F(CpuBackend, S12_TimelineAdvancesAsWorkCompletes) {
  be::stream& s = make_stream();
  stream_timeline& t = timeline_of(0);
  std::latch gate(1);
  ASSERT_TRUE(s.enqueue_host_task([&] {
                 gate.wait();
                 return status::success();
               }).ok());
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(s.enqueue_host_task([] { return status::success(); }).ok());
  }
  EXPECT_EQ(t.enqueued_position(), 5u);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(t.completed_position(), 0u) << "completed leads the work";
  EXPECT_EQ(s.query().code(), error_code::not_ready);
  EXPECT_EQ(t.proven_position(), 0u);  // the backend never proves: the runtime does
  gate.count_down();
  ASSERT_TRUE(s.synchronize().ok());
  // completed may lag the stream's own bookkeeping briefly; it must reach the end.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (t.completed_position() < 5 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_EQ(t.completed_position(), 5u);
  EXPECT_EQ(t.proven_position(), 0u);
}

TEST_F(CpuBackend, EventQueryIsNotReadyWhileWorkIsHeld) {
  be::stream& s = make_stream();
  auto e = make_event();
  EXPECT_TRUE(e->query().ok());  // never recorded: nothing to wait for
  EXPECT_TRUE(e->synchronize().ok());
  std::latch gate(1);
  std::atomic<bool> ran{false};
  ASSERT_TRUE(s.enqueue_host_task([&] {
                 gate.wait();
                 ran = true;
                 return status::success();
               }).ok());
  ASSERT_TRUE(e->record(s).ok());
  EXPECT_EQ(e->query().code(), error_code::not_ready);
  EXPECT_EQ(s.query().code(), error_code::not_ready);
  EXPECT_FALSE(ran);
  gate.count_down();
  EXPECT_TRUE(e->synchronize().ok());
  EXPECT_TRUE(ran);
  EXPECT_TRUE(e->query().ok());
}

TEST_F(CpuBackend, EventCapturesOnlyEarlierWork) {
  be::stream& s = make_stream();
  auto e = make_event();
  std::latch gate(1);
  ASSERT_TRUE(s.enqueue_host_task([] { return status::success(); }).ok());
  ASSERT_TRUE(e->record(s).ok());
  ASSERT_TRUE(s.enqueue_host_task([&] {
                 gate.wait();
                 return status::success();
               }).ok());
  EXPECT_TRUE(e->synchronize().ok());  // returns although later work is held
  EXPECT_TRUE(e->query().ok());
  EXPECT_EQ(s.query().code(), error_code::not_ready);
  gate.count_down();
  EXPECT_TRUE(s.synchronize().ok());
}

TEST_F(CpuBackend, EnqueueWaitOrdersStreamBAfterStreamAsEvent) {
  be::stream& a = make_stream();
  be::stream& b = make_stream();
  auto e = make_event();
  std::latch gate(1);
  std::atomic<bool> a_done{false};
  std::atomic<bool> b_ran{false};
  std::atomic<bool> b_saw_a{false};
  ASSERT_TRUE(a.enqueue_host_task([&] {
                 gate.wait();
                 a_done = true;
                 return status::success();
               }).ok());
  ASSERT_TRUE(e->record(a).ok());
  ASSERT_TRUE(b.enqueue_wait(*e).ok());
  ASSERT_TRUE(b.enqueue_host_task([&] {
                 b_saw_a = a_done.load();
                 b_ran = true;
                 return status::success();
               }).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(b_ran) << "b ran past its wait on a's event";
  EXPECT_EQ(b.query().code(), error_code::not_ready);
  gate.count_down();
  ASSERT_TRUE(b.synchronize().ok());
  EXPECT_TRUE(b_ran);
  EXPECT_TRUE(b_saw_a);
}

TEST_F(CpuBackend, EnqueueWaitOnOwnStreamOrUnrecordedEventIsANoOp) {
  be::stream& a = make_stream();
  auto unrecorded = make_event();
  ASSERT_TRUE(a.enqueue_wait(*unrecorded).ok());
  auto own = make_event();
  ASSERT_TRUE(own->record(a).ok());
  ASSERT_TRUE(a.enqueue_wait(*own).ok());
  EXPECT_TRUE(a.synchronize().ok());
}

// S12: a wait for work already done orders nothing, so it takes no position and wakes no worker
// (it made a stream ping-pong cost tens of microseconds of thread switches per wait).
TEST_F(CpuBackend, EnqueueWaitForCompletedWorkTakesNoPosition) {
  be::stream& a = make_stream();
  be::stream& b = make_stream();
  auto e = make_event();
  ASSERT_TRUE(a.enqueue_host_task([] { return status::success(); }).ok());
  ASSERT_TRUE(e->record(a).ok());
  ASSERT_TRUE(a.synchronize().ok());
  const std::uint64_t before = timeline_of(1).enqueued_position();
  ASSERT_TRUE(b.enqueue_wait(*e).ok());
  EXPECT_EQ(timeline_of(1).enqueued_position(), before);
  // Work not yet done still becomes a wait on b's worker.
  std::latch gate(1);
  ASSERT_TRUE(a.enqueue_host_task([&] {
                 gate.wait();
                 return status::success();
               }).ok());
  ASSERT_TRUE(e->record(a).ok());
  ASSERT_TRUE(b.enqueue_wait(*e).ok());
  EXPECT_EQ(timeline_of(1).enqueued_position(), before + 1);
  EXPECT_EQ(b.query().code(), error_code::not_ready);
  gate.count_down();
  EXPECT_TRUE(b.synchronize().ok());
}

TEST_F(CpuBackend, FailingHostTaskBecomesTheStickyError) {
  be::stream& s = make_stream();
  auto before = make_event();
  auto after = make_event();
  std::latch gate(1);
  std::atomic<bool> later_ran{false};
  ASSERT_TRUE(s.enqueue_host_task([&] {
                 gate.wait();
                 return status::success();
               }).ok());
  ASSERT_TRUE(before->record(s).ok());
  ASSERT_TRUE(
      s.enqueue_host_task([] { return status(error_code::unknown, "host task exploded"); }).ok());
  ASSERT_TRUE(s.enqueue_host_task([&] {
                 later_ran = true;
                 return status::success();
               }).ok());
  ASSERT_TRUE(after->record(s).ok());
  EXPECT_TRUE(s.sticky_error().ok());  // nothing has failed yet
  gate.count_down();

  status synced = s.synchronize();
  EXPECT_EQ(synced.code(), error_code::launch_failure);
  EXPECT_NE(synced.message().find("host task exploded"), std::string::npos) << synced.message();
  EXPECT_FALSE(later_ran) << "work after the failure ran";
  EXPECT_EQ(s.sticky_error().code(), error_code::launch_failure);
  EXPECT_EQ(s.query().code(), error_code::launch_failure);
  EXPECT_TRUE(before->query().ok());  // captured work before the failure succeeded
  EXPECT_EQ(after->query().code(), error_code::launch_failure);
  EXPECT_EQ(after->synchronize().code(), error_code::launch_failure);
  // Sticky: later enqueues fail with the same error and never run.
  status refused = s.enqueue_host_task([&] {
    later_ran = true;
    return status::success();
  });
  EXPECT_EQ(refused.code(), error_code::launch_failure);
  EXPECT_EQ(s.synchronize().code(), error_code::launch_failure);
  EXPECT_FALSE(later_ran);
}

TEST_F(CpuBackend, FailureUpstreamDoesNotFailTheWaitingStream) {
  be::stream& a = make_stream();
  be::stream& b = make_stream();
  auto e = make_event();
  ASSERT_TRUE(a.enqueue_host_task([] { return status(error_code::unknown, "a failed"); }).ok());
  ASSERT_TRUE(e->record(a).ok());
  ASSERT_TRUE(b.enqueue_wait(*e).ok());
  std::atomic<bool> b_ran{false};
  ASSERT_TRUE(b.enqueue_host_task([&] {
                 b_ran = true;
                 return status::success();
               }).ok());
  EXPECT_TRUE(b.synchronize().ok());
  EXPECT_TRUE(b_ran);
  EXPECT_EQ(a.synchronize().code(), error_code::launch_failure);
}

TEST_F(CpuBackend, StreamDestructionReturnsWhileWorkIsQueuedAndTheWorkCompletes) {
  be::stream& s = make_stream();
  stream_timeline& t = timeline_of(0);
  auto e = make_event();
  std::latch gate(1);
  std::atomic<int> ran{0};
  ASSERT_TRUE(s.enqueue_host_task([&] {
                 gate.wait();
                 ++ran;
                 return status::success();
               }).ok());
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(s.enqueue_host_task([&] {
                   ++ran;
                   return status::success();
                 }).ok());
  }
  ASSERT_TRUE(e->record(s).ok());
  // Destroy the stream on another thread so a destructor that blocks fails the test instead
  // of hanging it.
  std::unique_ptr<be::stream> owned = std::move(streams_.back());
  streams_.pop_back();
  auto destroyed = std::async(std::launch::async, [&owned] { owned.reset(); });
  const bool returned = destroyed.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  EXPECT_TRUE(returned) << "stream destruction waited for queued work";
  EXPECT_EQ(ran.load(), 0);
  gate.count_down();
  destroyed.wait();
  // The event outlives the stream and sees the work finish.
  EXPECT_TRUE(e->synchronize().ok());
  EXPECT_EQ(ran.load(), 11);
  EXPECT_TRUE(e->query().ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (t.completed_position() < 11 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_EQ(t.completed_position(), 11u);
}

TEST_F(CpuBackend, ConcurrentEnqueuesAreAllRun) {
  be::stream& s = make_stream();
  std::atomic<int> ran{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 250; ++i) {
        (void)s.enqueue_host_task([&] {
          ran.fetch_add(1, std::memory_order_relaxed);
          return status::success();
        });
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE(s.synchronize().ok());
  EXPECT_EQ(ran.load(), 1000);
  EXPECT_EQ(timeline_of(0).enqueued_position(), 1000u);
}

}  // namespace
