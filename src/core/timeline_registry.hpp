// Which streams still matter to happens-before (S11): ids of timelines not yet forgotten.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_set>

#include "core/vector_clock.hpp"

namespace soma::detail {

/// Ids for stream timelines, and which of them are still live. A stream is forgotten once it
/// was destroyed and its work completed: no block is stamped with it any more, so clocks can
/// drop its entries (vector_clock entries name streams by id). Thread-safe.
class timeline_registry {
 public:
  /// A new id, never issued before; live until forget.
  std::uint64_t enroll() {
    std::lock_guard lock(mutex_);
    const std::uint64_t id = ++last_id_;
    live_.insert(id);
    return id;
  }
  void forget(std::uint64_t id) {
    std::lock_guard lock(mutex_);
    live_.erase(id);
  }
  /// Drops clock's entries of forgotten streams, under one lock.
  void prune(vector_clock& clock) const {
    std::lock_guard lock(mutex_);
    clock.retain_if([this](std::uint64_t id) { return live_.count(id) != 0; });
  }

 private:
  mutable std::mutex mutex_;
  std::uint64_t last_id_ = 0;
  std::unordered_set<std::uint64_t> live_;
};

}  // namespace soma::detail
