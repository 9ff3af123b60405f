// The pool the memory history model and racing-threads tests record on (history_model_test,
// history_threads_test): fake memory of 64 KiB granules, so that many small blocks and their
// events fit a small reservation.
#pragma once

#include <cstddef>
#include <memory>

#include "core/pool.hpp"
#include "fake_memory_provider.hpp"

namespace soma_test {

inline std::unique_ptr<soma::detail::pool> history_test_pool(const char* name,
                                                             std::size_t reservation_bytes) {
  auto memory = std::make_shared<fake_memory_state>();
  memory->granularity_bytes = 64 * 1024;
  soma::detail::pool_config config;
  config.device = 0;
  config.name = name;
  config.max_size_bytes = std::size_t{256} << 20;
  config.reservation_bytes = reservation_bytes;
  return std::make_unique<soma::detail::pool>(config,
                                              std::make_unique<fake_memory_provider>(memory));
}

}  // namespace soma_test
