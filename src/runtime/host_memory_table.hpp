// Host memory from somaMallocHost: the page-locked memory a GPU can reach, kept by address so
// that value operations and range checks know it (the same on both backends).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "backend/backend.hpp"
#include "core/status.hpp"

namespace soma::detail {

/// Thread-safe.
class host_memory_table {
 public:
  explicit host_memory_table(backend::backend& platform) : platform_(platform) {}

  /// nullptr for 0 bytes.
  result<void*> allocate(std::size_t bytes);
  /// NULL is a no-op; anything but a pointer allocate returned is invalid_value, and an
  /// interior pointer is named as such.
  status free(void* pointer);
  /// The host allocation holding address: {base, size}, or {0, 0}.
  std::pair<std::uintptr_t, std::size_t> find(std::uintptr_t address) const;

 private:
  std::pair<std::uintptr_t, std::size_t> find_locked(std::uintptr_t address) const;

  backend::backend& platform_;
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, std::size_t> allocations_;  // base -> bytes
};

}  // namespace soma::detail
