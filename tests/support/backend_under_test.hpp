// Which backend a conformance binary runs on, and skips for what holds on one backend only.
//
// CTest runs the conformance binaries twice: with SOMA_BACKEND=cpu (label cpu) and with
// SOMA_BACKEND=cuda (label gpu). Tests are written for both: pool memory is touched only by
// stream operations (memset, memcpy into somaMallocHost memory), streams are held by value
// waits. What is true of one backend only says so with a reason:
//
//   SOMA_REQUIRE_CPU_BACKEND("host tasks read pool memory");
//   SOMA_REQUIRE_TEST_CONFIG();  // exact figures of cpu_test_config.hpp
//
// With SOMA_BACKEND=cuda on a machine without a GPU the binary's main (soma_test_main.cpp)
// runs nothing and prints "[  SKIPPED ]" with the reason, which CTest reports as skipped.
//
// Requires: the including binary links `soma` and GoogleTest.
#pragma once

#include <soma/soma.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "cpu_test_config.hpp"

namespace soma_test {

/// The running backend's name ("cpu", "cuda"), or "" if the runtime did not start.
inline std::string backend_name() {
  const char* name = nullptr;
  if (somaGetBackendName(&name) != somaSuccess || name == nullptr) return {};
  return name;
}

inline bool on_cpu_backend() { return backend_name() == "cpu"; }

/// What SOMA_BACKEND asks for ("cpu" when unset: cpu_test_config.hpp's default), read without
/// starting the runtime, for tests that must start it themselves (in a child process).
inline std::string requested_backend() {
  const char* requested = std::getenv("SOMA_BACKEND");
  return requested != nullptr ? requested : "cpu";
}
inline bool on_cuda_backend() { return backend_name() == "cuda"; }

/// True on the cpu backend with no SOMA_CPU_* override: the test may rely on the exact figures
/// of cpu_test_config.hpp (2 devices, 256 MiB each, 64 KiB granules, memory = budget).
inline bool exact_test_config() { return on_cpu_backend() && using_default_test_config(); }

/// Why the requested backend cannot run tests here (SOMA_BACKEND=cuda on a machine without a
/// GPU), or "" when it can. Starts the runtime unless cpu is requested.
inline std::string backend_unavailable_reason() {
  if (requested_backend() == "cpu") return {};
  int count = 0;
  const somaError_t status = somaGetDeviceCount(&count);
  if (status != somaErrorNoDevice && status != somaErrorInitializationError) return {};
  return "backend " + requested_backend() + " has no device here: " + somaGetLastErrorMessage();
}

}  // namespace soma_test

/// Skips the test on any backend but cpu, giving why it holds there only.
#define SOMA_REQUIRE_CPU_BACKEND(why)                                                           \
  do {                                                                                          \
    if (!::soma_test::on_cpu_backend())                                                         \
      GTEST_SKIP() << "cpu backend only (" << ::soma_test::backend_name() << " here): " << why; \
  } while (0)

/// Skips the test unless the exact cpu test configuration is in force.
#define SOMA_REQUIRE_TEST_CONFIG()                                             \
  do {                                                                         \
    if (!::soma_test::exact_test_config())                                     \
      GTEST_SKIP() << "needs the exact figures of the cpu test configuration " \
                      "(2 devices, 256 MiB, 64 KiB granules); backend "        \
                   << ::soma_test::backend_name();                             \
  } while (0)
