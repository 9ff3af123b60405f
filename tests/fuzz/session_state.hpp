// The single-threaded target's model: the streams, events and pools an input made, the live
// allocations with what their bytes must be, and which streams used them. Operations
// (session_ops.hpp) change it together with soma; checks compare the two.
#pragma once

#include <soma/soma.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "api_model.hpp"
#include "byte_runs.hpp"
#include "fuzz_config.hpp"

namespace soma_fuzz {

inline constexpr int kStreamSlots = kDeviceCount + 4;  // device default streams first
inline constexpr int kEventSlots = 4;
inline constexpr int kPoolSlots = kDeviceCount + 4;  // default pools first
inline constexpr std::size_t kRememberedFrees = 16;

struct stream_slot {
  bool exists = false;
  stream_ref stream;
};

struct event_slot {
  bool exists = false;
  somaEvent_t handle = nullptr;
};

/// A pool as the model knows it. Records outlive destruction: allocations still name them.
struct pool_record {
  somaMemPool_t handle = nullptr;
  int device = 0;
  bool alive = true;
  bool is_default = false;
  bool exportable = false;  // releases whole commits only (S7)
  std::size_t cap_bytes = kDeviceMemoryBytes;
  std::size_t largest_commit_bytes = 0;  // bound of one commit: the largest request, in granules
  std::uint64_t threshold = 0;
  std::array<int, 3> reuse = {1, 1, 1};  // follow events, opportunistic, internal dependencies
  int compaction = 0;
  std::array<somaMemAccessFlags, kDeviceCount> access{};
  std::uint64_t live_bytes = 0;
  pool_stats last;  // what the previous check read: highs only grow until reset
};

struct allocation {
  void* pointer = nullptr;
  std::size_t size = 0;
  int pool = 0;              // index into pools
  int owner = 0;             // stream slot whose work last wrote it; writes happen there
  std::vector<int> readers;  // other stream slots that read it since
  byte_runs contents{0};
};

struct session_state {
  std::array<stream_slot, kStreamSlots> streams;
  std::array<event_slot, kEventSlots> events;
  std::array<int, kPoolSlots> pool_slots{};  // index into pools, -1 if empty
  std::vector<pool_record> pools;
  std::array<int, kDeviceCount> current_pool{};  // index into pools
  std::vector<allocation> live;
  std::map<std::uintptr_t, std::size_t> ranges;  // live allocations: start -> size
  std::vector<void*> freed;                      // recent frees, for double frees
  std::vector<somaStream_t> stale_streams;       // destroyed handles
  std::vector<somaEvent_t> stale_events;
  std::vector<somaMemPool_t> stale_pools;
  somaEvent_t ordering = nullptr;  // the model's own dependencies (order_after)
  int scopes_open = 0;             // memory history scopes this thread opened and not closed

  const stream_ref& stream(int slot) const {
    return streams[static_cast<std::size_t>(slot)].stream;
  }
  pool_record& pool(int index) { return pools[static_cast<std::size_t>(index)]; }

  /// Index of an existing stream slot chosen by choice.
  int pick_stream(std::uint8_t choice) const {
    int existing[kStreamSlots];
    int count = 0;
    for (int slot = 0; slot < kStreamSlots; ++slot)
      if (streams[static_cast<std::size_t>(slot)].exists) existing[count++] = slot;
    return existing[choice % count];  // device default streams always exist
  }

  /// Index of an existing event slot chosen by choice, or -1.
  int pick_event(std::uint8_t choice) const {
    int existing[kEventSlots];
    int count = 0;
    for (int slot = 0; slot < kEventSlots; ++slot)
      if (events[static_cast<std::size_t>(slot)].exists) existing[count++] = slot;
    return count == 0 ? -1 : existing[choice % count];
  }

  /// Index into pools of a live pool chosen by choice (default pools are always live).
  int pick_pool(std::uint8_t choice) const {
    int alive[kPoolSlots];
    int count = 0;
    for (int slot = 0; slot < kPoolSlots; ++slot)
      if (pool_slots[static_cast<std::size_t>(slot)] >= 0)
        alive[count++] = pool_slots[static_cast<std::size_t>(slot)];
    return alive[choice % count];
  }

  /// Whether work on a stream of device may write (read) memory of the pool (S6).
  bool may_write(const pool_record& pool, int device) const {
    return pool.device == device ||
           pool.access[static_cast<std::size_t>(device)] == somaMemAccessFlagsProtReadWrite;
  }
  bool may_read(const pool_record& pool, int device) const {
    return may_write(pool, device) ||
           pool.access[static_cast<std::size_t>(device)] == somaMemAccessFlagsProtRead;
  }

  /// The live allocation containing address, or nullptr.
  const allocation* containing(const void* address) const {
    const auto value = reinterpret_cast<std::uintptr_t>(address);
    for (const allocation& entry : live) {
      const auto start = reinterpret_cast<std::uintptr_t>(entry.pointer);
      if (value >= start && value < start + entry.size) return &entry;
    }
    return nullptr;
  }
};

}  // namespace soma_fuzz
