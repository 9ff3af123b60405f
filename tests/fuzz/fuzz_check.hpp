// How the fuzz targets report a broken promise: a message on stderr, then abort(), which
// libFuzzer records as a crash and saves the input for. A status that differs from the one the
// API promises is reported with both names and soma's last message.
#pragma once

#include <soma/soma.h>

#include <cstdio>
#include <cstdlib>

namespace soma_fuzz {

[[noreturn]] inline void fail(const char* file, int line, const char* what) {
  std::fprintf(stderr, "soma fuzz: broken promise at %s:%d: %s\n", file, line, what);
  std::fflush(stderr);
  std::abort();
}

inline void check_status(somaError_t actual, somaError_t expected, const char* call,
                         const char* file, int line) {
  if (actual == expected) return;
  std::fprintf(stderr, "soma fuzz: %s returned %s, expected %s (%s)\n", call,
               somaGetErrorName(actual), somaGetErrorName(expected), somaGetLastErrorMessage());
  fail(file, line, call);
}

}  // namespace soma_fuzz

/// Aborts with a message when cond is false; the printf-style arguments say what was seen.
#define FUZZ_CHECK(cond, ...)                          \
  do {                                                 \
    if (!(cond)) {                                     \
      std::fprintf(stderr, "soma fuzz: " __VA_ARGS__); \
      std::fputc('\n', stderr);                        \
      ::soma_fuzz::fail(__FILE__, __LINE__, #cond);    \
    }                                                  \
  } while (0)

/// Aborts unless the call returns `expected`.
#define FUZZ_EXPECT_STATUS(call, expected) \
  ::soma_fuzz::check_status((call), (expected), #call, __FILE__, __LINE__)

/// Aborts unless the call succeeds.
#define FUZZ_OK(call) FUZZ_EXPECT_STATUS(call, somaSuccess)
