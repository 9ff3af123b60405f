// Blocks for the stream cache's tests: what drain() hands back, as a list of blocks.
#pragma once

#include <vector>

#include "core/block.hpp"
#include "core/stream_cache.hpp"

namespace soma_test {

/// Drains the cache; the blocks, unlinked again, in the order drain() linked them.
inline std::vector<soma::detail::block*> drained(soma::detail::stream_cache& cache) {
  std::vector<soma::detail::block*> out;
  for (soma::detail::block* b = cache.drain(); b != nullptr;) {
    soma::detail::block* next = b->next_in_bin;
    b->next_in_bin = nullptr;
    out.push_back(b);
    b = next;
  }
  return out;
}

}  // namespace soma_test
