// The runtime's fast lanes (runtime::allocate_cached, runtime::free_fast): a cache hit and a
// free of a plain live allocation, inline in the C API's calls. Out of line, the calls
// somaMallocAsync -> allocate -> allocate_in and somaFreeAsync -> free each saved registers for
// the slow paths they might take and passed a status back through memory: about a quarter of a
// pair's instructions (docs/benchmarks.md, "Fast lanes").
#pragma once

#include <cstdint>

#include "runtime/runtime.hpp"

namespace soma::detail {

/// Withdraws the pool this thread published (pool_registry::acquire_*), also when a lane throws.
struct published_pool {
  published_pool() = default;
  published_pool(const published_pool&) = delete;
  published_pool& operator=(const published_pool&) = delete;
  ~published_pool() { pool_registry::release(); }
};

inline void* runtime::take_cached(pool_object& pool, std::size_t bytes, stream_object& stream) {
  // Memory history: the stream's cache records a hit in its log (history_log).
  block* hit = pool.allocate_cached(bytes, stream.timeline);
  if (hit == nullptr) return nullptr;
  return reinterpret_cast<void*>(hit->address);
}

inline void* runtime::allocate_cached(std::size_t bytes, std::uintptr_t stream_handle) {
  stream_object* stream = streams_.find(stream_handle);
  if (stream == nullptr || bytes == 0) [[unlikely]]
    return nullptr;
  // S4, S5: as in allocate(), the pool found stays until the call is done.
  pool_object& pool = *pools_.acquire_current(stream->device);
  const published_pool published;
  return take_cached(pool, bytes, *stream);
}

inline void* runtime::allocate_cached_from_pool(std::size_t bytes, std::uintptr_t pool_handle,
                                                std::uintptr_t stream_handle) {
  stream_object* stream = streams_.find(stream_handle);
  if (stream == nullptr || bytes == 0) [[unlikely]]
    return nullptr;
  pool_object* pool = pools_.acquire_live(pool_handle);
  if (pool == nullptr) [[unlikely]]
    return nullptr;
  const published_pool published;
  // An imported pool cannot allocate (S7): allocate_from_pool() says so.
  return pool->is_imported() ? nullptr : take_cached(*pool, bytes, *stream);
}

inline bool runtime::free_fast(void* pointer, std::uintptr_t stream_handle) {
  stream_object* stream = streams_.find(stream_handle);
  if (stream == nullptr || pointer == nullptr) [[unlikely]]
    return false;
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  const live_entry<pool_object> found = pointers_.find(address);
  // Not live, or live elsewhere: free() claims again and explains (claim_for_free).
  if (found.live == nullptr || !found.live->claim_for_free()) return false;
  if (found.live->address != address) {
    found.live->set_state(block_state::live);
    return false;
  }
  // Claimed, the block keeps its owner alive. An imported or exported pool's free does more
  // (S7): the claim goes back and free() claims again; only a second, concurrent free of the
  // same pointer, itself an error, can come between.
  pool_object& owner = *found.owner;
  if (owner.imports() != nullptr || owner.exports() != nullptr) [[unlikely]] {
    found.live->set_state(block_state::live);
    return false;
  }
  // A destroyed owner to reap: free()'s own continuation. (The pool records the free in memory
  // history and takes a scope label off the block.)
  if (owner.is_destroyed()) [[unlikely]] {
    free_claimed(found, *stream);
    return true;
  }
  free_into(owner, found.live, *stream);
  return true;
}

inline void runtime::free_into(pool_object& owner, block* b, stream_object& stream) {
  // S2 on a native stream (cuda): work soma never saw may precede this free (a framework's
  // kernels on an adopted stream, the application's on somaStreamGetNative's). The free takes a
  // position of its own, so it counts as complete only once the backend shows the stream has
  // run past it (a query or a marker recorded after that work), never merely because soma's
  // own operations there have run.
  if (stream.native_queue != nullptr) {
    try {
      stream.native_queue->note_free();
    } catch (...) {
      b->set_state(block_state::live);  // the claim goes back: the allocation stays live
      throw;
    }
  }
  owner.free(b, stream.timeline);  // never fails, not even for want of host memory
}

}  // namespace soma::detail
