// Pool attribute helpers shared by the cpu test suites (soma_test_util.hpp) and the GPU test
// programs (tests/gpu/gpu_test_util.cuh): read and set attributes, and the four statistics of
// S10 at once. A plain header: soma.h and GoogleTest only.
#pragma once

#include <soma/soma.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>

#include "pool_stats.hpp"

namespace soma_test {

inline void PrintTo(const pool_stats& stats, std::ostream* out) {
  *out << "{reserved " << stats.reserved_current << " (high " << stats.reserved_high << "), used "
       << stats.used_current << " (high " << stats.used_high << ")}";
}

inline std::uint64_t pool_u64(somaMemPool_t pool, somaMemPoolAttr attr) {
  std::uint64_t value = 0;
  const somaError_t status = somaMemPoolGetAttribute(pool, attr, &value);
  EXPECT_EQ(status, somaSuccess) << "somaMemPoolGetAttribute(" << static_cast<int>(attr)
                                 << "): " << somaGetLastErrorMessage();
  return value;
}

inline int pool_int(somaMemPool_t pool, somaMemPoolAttr attr) {
  int value = -1;
  const somaError_t status = somaMemPoolGetAttribute(pool, attr, &value);
  EXPECT_EQ(status, somaSuccess) << "somaMemPoolGetAttribute(" << static_cast<int>(attr)
                                 << "): " << somaGetLastErrorMessage();
  return value;
}

inline somaError_t set_pool_u64(somaMemPool_t pool, somaMemPoolAttr attr, std::uint64_t value) {
  return somaMemPoolSetAttribute(pool, attr, &value);
}

inline somaError_t set_pool_int(somaMemPool_t pool, somaMemPoolAttr attr, int value) {
  return somaMemPoolSetAttribute(pool, attr, &value);
}

inline pool_stats read_pool_stats(somaMemPool_t pool) {
  pool_stats stats;
  const somaError_t status = try_read_pool_stats(pool, &stats);
  EXPECT_EQ(status, somaSuccess) << "reading the statistics: " << somaGetLastErrorMessage();
  return stats;
}

}  // namespace soma_test
