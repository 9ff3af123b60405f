// Shared helpers for tests of the C API: status assertions that print the thread's last
// message, pool statistics, RAII handles, device figures, message checks and the
// capi_test fixture that leaves the process as it found it.
//
// Requires: the including binary links `soma` and GoogleTest.
#pragma once

#include <soma/cxx/device.hpp>
#include <soma/cxx/pool.hpp>
#include <soma/soma.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

#include "backend_under_test.hpp"
#include "cpu_test_config.hpp"
#include "host_task.hpp"
#include "host_words.hpp"
#include "pool_attributes.hpp"
#include "soma_status.hpp"
#include "unique_handle.hpp"

namespace soma_test {

inline bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

inline bool contains_icase(std::string_view haystack, std::string_view needle) {
  auto lower = [](std::string_view text) {
    std::string result(text);
    std::transform(result.begin(), result.end(), result.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return result;
  };
  return lower(haystack).find(lower(needle)) != std::string::npos;
}

/// True if `message` holds `number` as a whole number (no digit right before or after it, no
/// '.' right before it) followed by `suffix` (checked after an optional ".0...", then an
/// optional space, when suffix is not empty).
inline bool mentions_number(std::string_view message, std::uint64_t number,
                            std::string_view suffix) {
  const std::string digits = std::to_string(number);
  auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  for (std::size_t at = message.find(digits); at != std::string_view::npos;
       at = message.find(digits, at + 1)) {
    if (at > 0 && (is_digit(message[at - 1]) || message[at - 1] == '.')) continue;
    std::size_t end = at + digits.size();
    if (end < message.size() && is_digit(message[end])) continue;
    if (suffix.empty()) return true;
    if (end + 1 < message.size() && message[end] == '.' && message[end + 1] == '0') {
      ++end;
      while (end < message.size() && message[end] == '0') ++end;
      if (end < message.size() && is_digit(message[end])) continue;
    }
    if (end < message.size() && message[end] == ' ') ++end;
    if (message.substr(end, suffix.size()) == suffix) return true;
  }
  return false;
}

/// True if `message` states the size `bytes`: as a decimal byte count ("13631488"), or in
/// MiB/KiB/GiB when bytes is a whole number of them ("13 MiB", "13.0 MiB", "13MiB").
inline bool mentions_size(std::string_view message, std::uint64_t bytes) {
  if (mentions_number(message, bytes, "")) return true;
  const struct {
    std::uint64_t unit;
    std::string_view name;
  } units[] = {{KiB, "KiB"}, {MiB, "MiB"}, {std::uint64_t{1} << 30, "GiB"}};
  for (const auto& [unit, name] : units) {
    if (bytes >= unit && bytes % unit == 0 && mentions_number(message, bytes / unit, name))
      return true;
  }
  return false;
}

// ---- pools ----------------------------------------------------------------------------

inline somaMemPool_t default_pool(int device) {
  somaMemPool_t pool = nullptr;
  const somaError_t status = somaDeviceGetDefaultMemPool(&pool, device);
  EXPECT_EQ(status, somaSuccess) << "somaDeviceGetDefaultMemPool: " << last_message();
  return pool;
}

inline somaMemPool_t current_pool(int device) {
  somaMemPool_t pool = nullptr;
  const somaError_t status = somaDeviceGetMemPool(&pool, device);
  EXPECT_EQ(status, somaSuccess) << "somaDeviceGetMemPool: " << last_message();
  return pool;
}

/// Valid properties of an explicit pool on `device` (Pinned, no export, cap `max_size_bytes`).
inline somaMemPoolProps pool_props(
    int device, std::size_t max_size_bytes = 0,
    somaMemAllocationHandleType handle_types = somaMemHandleTypeNone) {
  somaMemPoolProps props = soma::pool_props({.device = device, .max_size_bytes = max_size_bytes});
  props.handleTypes = handle_types;
  return props;
}

// ---- devices --------------------------------------------------------------------------

inline int device_count() {
  int count = 0;
  const somaError_t status = somaGetDeviceCount(&count);
  EXPECT_EQ(status, somaSuccess) << "somaGetDeviceCount: " << last_message();
  return count;
}

inline int device_attribute(somaDeviceAttr attr, int device) {
  int value = -1;
  const somaError_t status = somaDeviceGetAttribute(&value, attr, device);
  EXPECT_EQ(status, somaSuccess) << "somaDeviceGetAttribute(" << static_cast<int>(attr) << ", "
                                 << device << "): " << last_message();
  return value;
}

inline std::size_t device_memory_bytes(int device) {
  return static_cast<std::size_t>(device_attribute(somaDevAttrTotalMemoryMiB, device)) * MiB;
}

inline std::size_t granularity_bytes(int device) {
  return static_cast<std::size_t>(device_attribute(somaDevAttrAllocationGranularityKiB, device)) *
         KiB;
}

struct memory_info {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
};

/// somaMemGetInfo of `device` (switches the calling thread's device and back).
inline memory_info device_memory_info(int device) {
  int previous = 0;
  EXPECT_EQ(somaGetDevice(&previous), somaSuccess);
  EXPECT_EQ(somaSetDevice(device), somaSuccess);
  memory_info info;
  const somaError_t status = somaMemGetInfo(&info.free_bytes, &info.total_bytes);
  EXPECT_EQ(status, somaSuccess) << "somaMemGetInfo: " << last_message();
  EXPECT_EQ(somaSetDevice(previous), somaSuccess);
  return info;
}

/// somaDeviceGetCommittedBytes: what this process's pools hold on device. Tests compare it
/// rather than somaMemGetInfo's free figure, which on a GPU other processes move too.
inline std::size_t committed_bytes(int device) {
  std::size_t bytes = 0;
  const somaError_t status = somaDeviceGetCommittedBytes(&bytes, device);
  EXPECT_EQ(status, somaSuccess) << "somaDeviceGetCommittedBytes: " << last_message();
  return bytes;
}

/// somaDeviceSynchronize of `device` (the calling thread's current device stays as it was).
inline somaError_t synchronize_device(int device) {
  const soma::device_guard on(device);
  return on.status() != somaSuccess ? on.status() : somaDeviceSynchronize();
}

// ---- RAII handles (unique_handle.hpp), each made by its create call --------------------

/// Expects a create call to have succeeded, naming it and the last message if not.
inline void expect_created(somaError_t status, const char* call) {
  EXPECT_EQ(status, somaSuccess) << call << ": " << last_message();
}

class unique_stream : public unique_handle<somaStream_t, somaStreamDestroy> {
 public:
  unique_stream() { expect_created(somaStreamCreate(out()), "somaStreamCreate"); }
};

class unique_event : public unique_handle<somaEvent_t, somaEventDestroy> {
 public:
  unique_event() { expect_created(somaEventCreate(out()), "somaEventCreate"); }
};

class unique_pool : public unique_handle<somaMemPool_t, somaMemPoolDestroy> {
 public:
  explicit unique_pool(const somaMemPoolProps& props) {
    expect_created(somaMemPoolCreate(out(), &props), "somaMemPoolCreate");
  }
  explicit unique_pool(int device, std::size_t max_size_bytes = 0)
      : unique_pool(pool_props(device, max_size_bytes)) {}
};

/// The handle of a pool that was created on device 0 and destroyed: no longer live.
inline somaMemPool_t destroyed_pool() {
  somaMemPool_t gone = nullptr;
  const somaMemPoolProps props = pool_props(0);
  EXPECT_EQ(somaMemPoolCreate(&gone, &props), somaSuccess) << last_message();
  EXPECT_EQ(somaMemPoolDestroy(gone), somaSuccess) << last_message();
  return gone;
}

// ---- behaviour checks -------------------------------------------------------------------

/// Checks that `pool` still works: a 4 KiB allocation on `stream`, written and read back by
/// a host task, freed; used returns to what it was.
inline void expect_pool_usable(somaMemPool_t pool, somaStream_t stream) {
  constexpr std::size_t size = 4096;
  const std::uint64_t used_before = pool_u64(pool, somaMemPoolAttrUsedMemCurrent);
  void* pointer = nullptr;
  SOMA_ASSERT_OK(somaMallocFromPoolAsync(&pointer, size, pool, stream));
  ASSERT_NE(pointer, nullptr);
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrUsedMemCurrent), used_before + size);
  // Stream operations only (no host access to pool memory), so this works on every backend.
  host_buffer host(size);
  SOMA_ASSERT_OK(somaMemsetAsync(pointer, 0x5a, size, stream));
  SOMA_ASSERT_OK(somaMemcpyAsync(host.data(), pointer, size, somaMemcpyDeviceToHost, stream));
  SOMA_ASSERT_OK(somaFreeAsync(pointer, stream));
  SOMA_ASSERT_OK(somaStreamSynchronize(stream));
  EXPECT_TRUE(host.all(0x5a)) << "memset + memcpy did not read back what was written";
  EXPECT_EQ(pool_u64(pool, somaMemPoolAttrUsedMemCurrent), used_before);
}

/// After a rejected call: statistics are what they were and the pool still works.
inline void expect_unchanged_and_usable(somaMemPool_t pool, const pool_stats& before,
                                        somaStream_t stream) {
  EXPECT_EQ(read_pool_stats(pool), before) << "a failed call changed the pool's statistics";
  expect_pool_usable(pool, stream);
}

/// Fixture of the C API tests. SetUp checks that the test configuration took effect and
/// starts on device 0; TearDown puts back what tests change (current device, current pools,
/// release thresholds of default pools) and synchronizes every device so the next test (in
/// the same process when the binary runs whole) starts clean.
class capi_test : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(detail::cpu_test_config_status, somaSuccess)
        << "somaSetCpuBackendConfig before main failed: the runtime started too early";
    SOMA_ASSERT_OK(somaSetDevice(0));
  }

  void TearDown() override {
    int count = 0;
    if (somaGetDeviceCount(&count) != somaSuccess) return;
    for (int device = 0; device < count; ++device) {
      somaMemPool_t pool = nullptr;
      if (somaDeviceGetDefaultMemPool(&pool, device) != somaSuccess) continue;
      (void)somaDeviceSetMemPool(device, pool);
      (void)set_pool_u64(pool, somaMemPoolAttrReleaseThreshold, 0);
      (void)synchronize_device(device);
    }
    (void)somaSetDevice(0);
  }

  /// Test needs at least `count` devices; returns false (and the caller skips) otherwise.
  static bool have_devices(int count) { return device_count() >= count; }
};

}  // namespace soma_test
