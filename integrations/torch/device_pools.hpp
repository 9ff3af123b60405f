// device_pools: the pool soma_torch allocates from on each device, its settings, the memory
// fraction limit and the call counters of soma_torch_stats.
//
// One explicit pool per device (not the device's default pool), created at the first use on
// that device, so soma_torch's statistics count PyTorch's memory only and the settings do not
// reach other users of soma in the process. Settings apply to existing pools at once and to
// pools created later. Thread-safe; the fast path is one atomic load.
#pragma once

#include <soma/soma.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace soma::torch_integration {

/// What soma_torch_configure sets (S9, S11).
struct pool_settings {
  std::uint64_t release_threshold_bytes = UINT64_MAX;  ///< keep memory, as PyTorch's cache does
  int follow_event_dependencies = 1;
  int allow_opportunistic = 1;
  int allow_internal_dependencies = 1;
};

/// Per device: the pool, the fraction limit and the counters. Cache-line aligned so threads
/// counting on different devices do not share a line.
struct alignas(64) device_state {
  std::atomic<somaMemPool_t> pool{nullptr};
  /// Where frees after recorded streams happen (see recorded_uses.hpp); made on first use.
  std::atomic<somaStream_t> free_stream{nullptr};
  std::atomic<std::uint64_t> limit_bytes{0};  ///< 0: no memory fraction limit
  std::atomic<std::uint64_t> allocations{0};
  std::atomic<std::uint64_t> frees{0};
  std::atomic<std::uint64_t> failed_allocations{0};
  std::atomic<std::uint64_t> failed_frees{0};
  std::atomic<std::uint64_t> cross_stream_frees{0};
};

class device_pools {
 public:
  explicit device_pools(int device_count);

  int device_count() const noexcept { return device_count_; }
  bool is_device(int device) const noexcept { return device >= 0 && device < device_count_; }
  /// Requires: is_device(device).
  device_state& state(int device) noexcept { return devices_[static_cast<std::size_t>(device)]; }

  /// The pool of device, created with the current settings on first use.
  /// Requires: is_device(device).
  somaError_t pool(int device, somaMemPool_t* pool, std::string* failure);
  /// The pool of device if it was created, else nullptr. Requires: is_device(device).
  somaMemPool_t existing(int device) const noexcept;
  /// Validates and stores settings and applies them to every existing pool.
  somaError_t configure(const pool_settings& settings, std::string* failure);

 private:
  static somaError_t apply(somaMemPool_t pool, const pool_settings& settings);

  const int device_count_;
  std::unique_ptr<device_state[]> devices_;
  std::mutex mutex_;  // creation and settings
  pool_settings settings_;
};

}  // namespace soma::torch_integration
