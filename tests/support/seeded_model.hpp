// What the model-based tests (tests/model/model_test.cpp, tests/reuse/policy_model_test.cpp)
// share: they run a random sequence of operations from a seed, check invariants after every
// step, and must turn a failing seed into a repro. seeded_model holds the seed and the step,
// names them in failure messages (where()) and, when the test's trace variable is set, prints
// every operation to stderr (trace()).
//
// Plain C++: the standard library only.
#pragma once

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace soma_test {

/// The number of steps: `variable` from the environment where it is a positive number,
/// otherwise `default_steps`.
inline int steps_from_environment(const char* variable, int default_steps) {
  if (const char* text = std::getenv(variable)) {
    const int steps = std::atoi(text);
    if (steps > 0) return steps;
  }
  return default_steps;
}

/// splitmix64's finalizer: a well-spread 64-bit value from a seed (patterns, derived seeds).
inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// Base of a model-based test: the seed it runs and the step it is at (the test advances
/// step_), for failure messages and the trace.
class seeded_model {
 protected:
  /// `trace_variable`: the environment variable that turns the trace on (SOMA_MODEL_TRACE=1).
  seeded_model(std::uint64_t seed, const char* trace_variable)
      : seed_(seed), tracing_(std::getenv(trace_variable) != nullptr) {}

  /// "seed S step N": where a failure happened, to rerun it.
  std::string where() const {
    return "seed " + std::to_string(seed_) + " step " + std::to_string(step_);
  }

  /// When tracing, prints "[step] " and the printf-formatted operation as a line to stderr.
  void trace(const char* format, ...) const __attribute__((format(printf, 2, 3))) {
    if (!tracing_) return;
    std::fprintf(stderr, "[%d] ", step_);
    va_list arguments;
    va_start(arguments, format);
    std::vfprintf(stderr, format, arguments);
    va_end(arguments);
    std::fputc('\n', stderr);
  }

  const std::uint64_t seed_;
  int step_ = 0;

 private:
  const bool tracing_;
};

}  // namespace soma_test
