// What an out-of-memory failure of a pool adds to its message: where the pool's free memory
// lies, what is pending free on which stream, and the one change that would have let the
// allocation succeed (soma's own; docs/observability.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/pool_report.hpp"

namespace soma::detail {

/// The pool's settings that decide what could have served the request.
struct pool_policies {
  std::uint64_t max_size_bytes = 0;
  std::size_t granularity_bytes = 0;
  bool internal_dependencies = true;  ///< S11 somaMemPoolReuseAllowInternalDependencies
  bool compaction = false;            ///< somaMemPoolAttrCompactBeforeGrowth
};

/// Free memory of a pool, gathered from its snapshot.
struct out_of_memory_facts {
  std::uint64_t free_bytes = 0;  ///< free for every stream
  std::size_t free_pieces = 0;
  std::uint64_t largest_free_bytes = 0;
  struct pending_stream {
    std::optional<std::uintptr_t> handle;  ///< nullopt: a destroyed stream
    std::uint64_t bytes = 0;
    std::uint64_t largest_bytes = 0;
  };
  std::vector<pending_stream> pending;  ///< per freeing stream, most bytes first
  std::uint64_t pending_bytes = 0;
};

out_of_memory_facts gather_out_of_memory_facts(const pool_report& report);

/// ". In the pool: ... What would have let it succeed: ..." for a request of bytes on the
/// stream with handle `allocating` (0: a default stream).
std::string advise_out_of_memory(const out_of_memory_facts& facts, const pool_policies& policies,
                                 const pool_report& report, std::size_t bytes,
                                 std::uintptr_t allocating);

}  // namespace soma::detail
