// soma's assertion macros (core/check.hpp): a failed check aborts naming the condition and the
// message; the expensive one runs only with SOMA_EXPENSIVE_CHECKS, which the dev preset sets.
#include "core/check.hpp"

#include <gtest/gtest.h>

namespace {

TEST(Check, PassingChecksDoNothing) {
  SOMA_ASSERT(1 + 1 == 2, "arithmetic");
  SOMA_EXPENSIVE_ASSERT(2 + 2 == 4, "arithmetic");
}

#if !defined(NDEBUG) || defined(SOMA_EXPENSIVE_CHECKS)
TEST(CheckDeathTest, FailedAssertAbortsNamingConditionAndMessage) {
  const int blocks = 3;
  EXPECT_DEATH(SOMA_ASSERT(blocks == 4, "four blocks expected"),
               "internal check failed at .*check_test.cpp:[0-9]+: four blocks expected "
               "\\(blocks == 4\\)");
}
#endif

TEST(CheckDeathTest, ExpensiveAssertRunsExactlyWithExpensiveChecks) {
  if (!soma::detail::expensive_checks) {
    SOMA_EXPENSIVE_ASSERT(false, "not evaluated without SOMA_EXPENSIVE_CHECKS");
    GTEST_SKIP() << "built without SOMA_EXPENSIVE_CHECKS";
  }
  EXPECT_DEATH(SOMA_EXPENSIVE_ASSERT(false, "an invariant"), "an invariant");
}

}  // namespace
