// Configures the cpu backend for tests: small, fast, several devices.
//
// Including this header is enough: an inline variable calls configure_cpu_backend_for_tests()
// during static initialization, before gtest's main and before any test touches soma, so the
// configuration holds whether CTest runs each test in its own process or a developer runs the
// whole binary. somaSetCpuBackendConfig does not start the runtime, so listing tests
// (gtest_discover_tests) stays cheap.
//
// Environment variables win: a field whose SOMA_CPU_* variable is set is left 0 ("keep the
// environment value"), so `SOMA_CPU_DEVICES=1 ./capi_pools_test` works. SOMA_BACKEND defaults
// to cpu here (tests read and write pool memory from the host).
//
// Requires: the including binary links `soma`.
#pragma once

#include <soma/soma.h>

#include <cstddef>
#include <cstdlib>

namespace soma_test {

inline constexpr int kTestDeviceCount = 2;
inline constexpr std::size_t kTestDeviceMemoryBytes = std::size_t{256} << 20;
inline constexpr std::size_t kTestGranularityBytes = std::size_t{64} << 10;

/// The test configuration: the figures above for every field whose SOMA_CPU_* environment
/// variable is unset, 0 ("keep the environment value") for the others.
inline somaCpuBackendConfig test_backend_config() {
  somaCpuBackendConfig config{};
  if (std::getenv("SOMA_CPU_DEVICES") == nullptr) config.deviceCount = kTestDeviceCount;
  if (std::getenv("SOMA_CPU_DEVICE_MEMORY") == nullptr)
    config.deviceMemoryBytes = kTestDeviceMemoryBytes;
  if (std::getenv("SOMA_CPU_GRANULARITY") == nullptr)
    config.granularityBytes = kTestGranularityBytes;
  return config;
}

/// Sets the test configuration once per process and returns the status of that call
/// (somaErrorNotPermitted if something started the runtime earlier).
inline somaError_t configure_cpu_backend_for_tests() {
  static const somaError_t status = [] {
    ::setenv("SOMA_BACKEND", "cpu", /*overwrite=*/0);
    const somaCpuBackendConfig config = test_backend_config();
    return somaSetCpuBackendConfig(&config);
  }();
  return status;
}

/// True when no SOMA_CPU_* variable overrides the test configuration, so tests may rely on
/// the exact figures above (device count, memory, granularity).
inline bool using_default_test_config() {
  return std::getenv("SOMA_CPU_DEVICES") == nullptr &&
         std::getenv("SOMA_CPU_DEVICE_MEMORY") == nullptr &&
         std::getenv("SOMA_CPU_GRANULARITY") == nullptr;
}

namespace detail {
/// Runs configure_cpu_backend_for_tests() during static initialization of any binary that
/// includes this header (once per process: inline variable).
inline const somaError_t cpu_test_config_status = configure_cpu_backend_for_tests();
}  // namespace detail

}  // namespace soma_test
