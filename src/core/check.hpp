// soma's assertions. SOMA_ASSERT(condition, message) is checked where NDEBUG is not defined (the
// dev and sanitizer presets) and compiled out of release builds; it guards what a line of code
// assumes. SOMA_EXPENSIVE_CHECKS (on in the dev preset) turns on the invariant checks that walk
// a whole structure (pool::check_invariants_locked): `expensive_checks` tells code whether
// to run them, and SOMA_EXPENSIVE_ASSERT checks only then. A failure prints the condition, the
// message and the place, and aborts: the state is corrupt, and carrying on would hide where.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace soma::detail {

#if defined(SOMA_EXPENSIVE_CHECKS)
inline constexpr bool expensive_checks = true;
#else
inline constexpr bool expensive_checks = false;
#endif

[[noreturn]] inline void assertion_failed(const char* condition, const char* message,
                                          const char* file, int line) noexcept {
  std::fprintf(stderr, "soma: internal check failed at %s:%d: %s (%s)\n", file, line, message,
               condition);
  std::abort();
}

}  // namespace soma::detail

#if defined(NDEBUG) && !defined(SOMA_EXPENSIVE_CHECKS)
#define SOMA_ASSERT(condition, message) ((void)0)
#else
#define SOMA_ASSERT(condition, message) \
  ((condition) ? (void)0                \
               : ::soma::detail::assertion_failed(#condition, message, __FILE__, __LINE__))
#endif

/// An invariant that costs a walk over a structure: checked only with SOMA_EXPENSIVE_CHECKS.
#define SOMA_EXPENSIVE_ASSERT(condition, message)     \
  ((!::soma::detail::expensive_checks || (condition)) \
       ? (void)0                                      \
       : ::soma::detail::assertion_failed(#condition, message, __FILE__, __LINE__))
