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
  int remap = 2;                      ///< somaMemPoolAttrRemapFreeMemory (0 never, 1, 2)
  /// Whether remapping instead of failing could serve from this pool's commits (cuda: its
  /// whole commits cannot be mapped at an offset; exportable pools never remap).
  bool remap_possible = true;
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

/// The one change that would have let a request succeed (the first that applies, in this
/// order; docs/observability.md has the table).
struct out_of_memory_change {
  enum class kind {
    larger_max_size = 1,              ///< bytes: the max size the request alone needs
    synchronize_stream = 2,           ///< stream's free of `bytes` would serve it
    allow_internal_dependencies = 3,  ///< the same, with internal dependencies off
    synchronize_device = 4,           ///< a destroyed stream's free, or frees of several
    compact_before_growth = 5,        ///< bytes: free memory in pieces
    free_device_memory = 6,           ///< bytes: what the platform refused to commit
    synchronize_device_and_compact = 7,
    more_max_size = 8,      ///< bytes: how much larger the max size would need to be
    remap_free_memory = 9,  ///< bytes: free memory in pieces, of whole granules enough
  };
  kind what = kind::more_max_size;
  std::uint64_t bytes = 0;
  std::optional<std::uintptr_t> stream;  ///< the stream named, if any (nullopt: destroyed)
};

out_of_memory_change choose_out_of_memory_change(const out_of_memory_facts& facts,
                                                 const pool_policies& policies,
                                                 std::uint64_t reserved_bytes, std::size_t bytes,
                                                 std::uintptr_t allocating);

/// ". In the pool: ... What would have let it succeed: ...", appended to the pool's message.
std::string describe_out_of_memory(const out_of_memory_facts& facts,
                                   const out_of_memory_change& change);

/// What a pool keeps of its latest out-of-memory failure (somaMemPoolGetLastOutOfMemory).
struct out_of_memory_record {
  std::size_t requested_bytes = 0;
  std::uintptr_t stream = 0;  ///< the allocating stream's handle (0: a default stream)
  std::uint64_t reserved_bytes = 0;
  std::uint64_t used_bytes = 0;
  pool_policies policies;
  bool follow_event_dependencies = true;
  bool opportunistic = true;
  out_of_memory_facts facts;
  out_of_memory_change change;
};

}  // namespace soma::detail
