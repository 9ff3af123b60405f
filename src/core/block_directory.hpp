// What a pool tells the layer that finds blocks by address (the runtime's pointer table).
#pragma once

#include "core/block.hpp"

namespace soma::detail {

/// The blocks a free may name: the live ones, and those freed into a stream cache. A cached
/// block keeps its entry, so that the fast path (a stream reusing its own free, then freeing
/// it again) changes no entry and writes no line of a table that every thread reads; a free
/// that finds a cached block sees it is not live. The pool adds a block when its slow path
/// hands it out, and forgets it when it leaves a cache, or its free skips the cache, for the
/// free index (where it may merge into a neighbour). Called with or without the pool lock;
/// implementations take only a lock of their own.
class block_directory {
 public:
  virtual ~block_directory() = default;
  virtual void add(block* live) = 0;
  virtual void forget(block* b) = 0;
};

}  // namespace soma::detail
