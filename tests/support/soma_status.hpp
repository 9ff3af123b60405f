// Status assertions shared by the cpu test suites (soma_test_util.hpp) and the GPU test
// programs (tests/gpu/gpu_test_util.cuh): gtest prints somaError_t by name, and SOMA_ASSERT_OK /
// SOMA_EXPECT_OK print the call, the code and the thread's last message. A plain header: soma.h
// and GoogleTest only.
#pragma once

#include <soma/soma.h>

#include <gtest/gtest.h>

#include <cstddef>
#include <ostream>
#include <string>

/// gtest prints somaError_t values by name (ADL finds this in the global namespace).
inline void PrintTo(somaError_t error, std::ostream* out) {
  const char* name = somaGetErrorName(error);
  *out << (name != nullptr ? name : "(null name)") << " (" << static_cast<int>(error) << ")";
}

/// Asserts that a soma call succeeded; on failure prints the call, the code and the thread's
/// last message. Accepts `<< "more"` like any gtest assertion.
#define SOMA_ASSERT_OK(expr) ASSERT_PRED_FORMAT1(::soma_test::is_soma_success, expr)
#define SOMA_EXPECT_OK(expr) EXPECT_PRED_FORMAT1(::soma_test::is_soma_success, expr)

namespace soma_test {

inline constexpr std::size_t KiB = std::size_t{1} << 10;
inline constexpr std::size_t MiB = std::size_t{1} << 20;

/// The calling thread's last failure message, copied (never null).
inline std::string last_message() {
  const char* message = somaGetLastErrorMessage();
  return message != nullptr ? std::string(message) : std::string("(null message)");
}

/// Predicate formatter behind SOMA_ASSERT_OK / SOMA_EXPECT_OK.
inline ::testing::AssertionResult is_soma_success(const char* expression, somaError_t status) {
  if (status == somaSuccess) return ::testing::AssertionSuccess();
  const char* name = somaGetErrorName(status);
  return ::testing::AssertionFailure()
         << expression << " returned " << (name != nullptr ? name : "(null name)") << " ("
         << static_cast<int>(status) << ")\n  message: " << last_message();
}

}  // namespace soma_test
