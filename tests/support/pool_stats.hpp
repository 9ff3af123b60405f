// The four statistics of a pool (S10) read at once, for every test that checks them: the
// GoogleTest suites (pool_attributes.hpp) and the fuzzers (tests/fuzz/api_model.hpp). A plain
// header: soma.h only.
#pragma once

#include <soma/soma.h>

#include <cstdint>
#include <utility>

namespace soma_test {

struct pool_stats {
  std::uint64_t reserved_current = 0;
  std::uint64_t reserved_high = 0;
  std::uint64_t used_current = 0;
  std::uint64_t used_high = 0;
  bool operator==(const pool_stats&) const = default;
};

/// Reads the four statistics, current before high so that, without resets, high >= current
/// holds even while other threads allocate. Returns the first failing status.
inline somaError_t try_read_pool_stats(somaMemPool_t pool, pool_stats* stats) {
  const std::pair<somaMemPoolAttr, std::uint64_t*> reads[] = {
      {somaMemPoolAttrUsedMemCurrent, &stats->used_current},
      {somaMemPoolAttrReservedMemCurrent, &stats->reserved_current},
      {somaMemPoolAttrUsedMemHigh, &stats->used_high},
      {somaMemPoolAttrReservedMemHigh, &stats->reserved_high}};
  for (const auto& [attr, value] : reads) {
    const somaError_t status = somaMemPoolGetAttribute(pool, attr, value);
    if (status != somaSuccess) return status;
  }
  return somaSuccess;
}

}  // namespace soma_test
