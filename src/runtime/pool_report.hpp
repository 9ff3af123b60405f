// A pool's snapshot as the runtime reports it (somaMemPoolSnapshotTake): the core's view plus
// the pool's handle and name, and the streams that pending frees wait for, by handle.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/pool_snapshot.hpp"

namespace soma::detail {

struct pool_report {
  std::uintptr_t pool_handle = 0;
  int device = 0;
  std::string name;
  pool_snapshot contents;
  /// For each block of contents: the handle of the live stream a pending free waits for (0: a
  /// default stream); nullopt for other blocks and for streams already destroyed.
  std::vector<std::optional<std::uintptr_t>> pending_streams;
};

}  // namespace soma::detail
