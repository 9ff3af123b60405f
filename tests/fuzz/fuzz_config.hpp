// The cpu backend configuration every fuzz target runs under: two small devices with small
// granules, so short inputs reach growth, the release threshold, trim, a device's limit and
// allocations across devices. Small also keeps inputs fast: most of an input's time is the
// kernel committing, faulting in and releasing the memory it allocates.
#pragma once

#include <soma/soma.h>

#include <cstddef>
#include <cstdlib>

#include "fuzz_check.hpp"

namespace soma_fuzz {

inline constexpr std::size_t KiB = 1024;
inline constexpr std::size_t MiB = 1024 * KiB;

inline constexpr int kDeviceCount = 2;
inline constexpr std::size_t kDeviceMemoryBytes = 1 * MiB;
inline constexpr std::size_t kGranularityBytes = 8 * KiB;

/// Selects the cpu backend with the figures above; call before any other soma call
/// (LLVMFuzzerInitialize). Environment variables cannot change them: the model relies on them.
inline void configure_fuzz_backend() {
  ::setenv("SOMA_BACKEND", "cpu", /*overwrite=*/1);
  somaCpuBackendConfig config{};
  config.deviceCount = kDeviceCount;
  config.deviceMemoryBytes = kDeviceMemoryBytes;
  config.granularityBytes = kGranularityBytes;
  FUZZ_OK(somaSetCpuBackendConfig(&config));
  int devices = 0;
  FUZZ_OK(somaGetDeviceCount(&devices));
  FUZZ_CHECK(devices == kDeviceCount, "%d devices", devices);
}

inline std::size_t round_up(std::size_t value, std::size_t unit) {
  return (value + unit - 1) / unit * unit;
}

}  // namespace soma_fuzz
