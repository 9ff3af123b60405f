// What the runtime records in memory history (core/memory_history.hpp): the events that name a
// stream or a scope, which the core pool does not know. Each returns at once when recording is
// off.
#pragma once

#include <cstdint>
#include <string>

#include "core/memory_history.hpp"
#include "core/pool.hpp"
#include "runtime/pool_object.hpp"

namespace soma::detail::history_notes {

inline bool on() noexcept { return memory_history::recording(); }

/// An event of pool p on a stream (its handle); with the pool's figures now for pool events.
inline history_event of_pool(history_kind kind, const pool& p, std::uintptr_t stream) {
  history_event e;
  e.kind = kind;
  e.pool = p.serial();
  e.device = static_cast<std::int16_t>(p.config().device);
  e.stream = stream;
  if (kind != history_kind::allocate && kind != history_kind::free) {
    const pool_statistics figures = p.statistics();
    e.reserved_bytes = figures.reserved_bytes;
    e.used_bytes = figures.used_bytes;
  }
  return e;
}

/// How the trace names a pool: as messages do, with its handle.
inline std::string pool_name(const pool_object& p) {
  return p.describe() + " (" + format_address(p.handle()) + ")";
}

inline void settings(const pool_object& p);

inline void pool_created(const pool_object& p) {
  memory_history& history = memory_history::process();
  history_event e = of_pool(history_kind::pool_created, p, 0);
  e.label = history.label(pool_name(p));
  history.record(e);
  settings(p);
}

/// A pool's settings as the trace gives them, which `soma replay` reads back.
inline std::string settings_text(const pool_object& p) {
  return "threshold=" + std::to_string(p.release_threshold_bytes()) +
         ",follow=" + std::to_string(p.reuse_policy(1) ? 1 : 0) +
         ",opportunistic=" + std::to_string(p.reuse_policy(2) ? 1 : 0) +
         ",internal=" + std::to_string(p.reuse_policy(3) ? 1 : 0) +
         ",compact=" + std::to_string(p.compact_before_growth() ? 1 : 0) +
         ",remap=" + std::to_string(static_cast<int>(p.remap_free_memory())) +
         ",granularity=" + std::to_string(p.granularity_bytes()) +
         ",max=" + std::to_string(p.config().max_size_bytes) +
         ",growth=" + std::to_string(p.config().growth_step_bytes);
}

/// A settings event and its text, gathered while the pool is held and recorded after.
struct pool_settings {
  history_event event;
  std::string text;
};

inline pool_settings settings_of(const pool_object& p) {
  return {of_pool(history_kind::settings, p, 0), settings_text(p)};
}

inline void record_settings(pool_settings s) {
  memory_history& history = memory_history::process();
  s.event.label = history.label(s.text);
  history.record(s.event);
}

inline void settings(const pool_object& p) { record_settings(settings_of(p)); }

inline void out_of_memory(const pool& p, std::size_t bytes, std::uintptr_t stream,
                          const std::string& message) {
  memory_history& history = memory_history::process();
  history_event e = of_pool(history_kind::out_of_memory, p, stream);
  e.bytes = bytes;
  e.label = history.label(message);
  history.record(e);
}

/// `stream` on device was ordered after `freeing` (a stream handle) reached position.
inline void waited(int device, std::uintptr_t stream, std::uintptr_t freeing,
                   std::uint64_t position) {
  history_event e;
  e.kind = history_kind::wait;
  e.device = static_cast<std::int16_t>(device);
  e.stream = stream;
  e.address = freeing;
  e.bytes = position;
  memory_history::process().record(e);
}

/// A synchronize point: of a stream (device and handle), of a device (stream 0, `label` says
/// which), or of an event (device -1).
inline void synchronized(int device, std::uintptr_t stream, const char* what) {
  memory_history& history = memory_history::process();
  history_event e;
  e.kind = history_kind::synchronize;
  e.device = static_cast<std::int16_t>(device);
  e.stream = stream;
  e.label = history.label(what);
  history.record(e);
}

}  // namespace soma::detail::history_notes
