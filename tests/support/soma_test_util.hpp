// Shared helpers for tests of the C API: status assertions that print the thread's last
// message, pool statistics, RAII handles and device figures (devices_and_pools.hpp), message
// checks, behaviour checks and the capi_test fixture that leaves the process as it found it.
//
// Requires: the including binary links `soma` and GoogleTest.
#pragma once

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
#include "devices_and_pools.hpp"
#include "host_task.hpp"
#include "host_words.hpp"
#include "pool_attributes.hpp"
#include "soma_status.hpp"

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
