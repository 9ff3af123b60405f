// The cpu backend: devices are CPU executors, physical memory is memfd, addresses are
// mmap reservations, streams are worker threads (design §2 "Backends").
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <vector>

#include "backend/backend.hpp"

namespace soma::detail::backend::cpu {

/// Settings after defaults and environment were applied and checked.
struct resolved_settings {
  int device_count = 1;
  std::size_t device_memory_bytes = std::size_t{4} << 30;
  std::size_t granularity_bytes = std::size_t{2} << 20;
};

/// Applies SOMA_CPU_DEVICES, SOMA_CPU_DEVICE_MEMORY, SOMA_CPU_GRANULARITY where `given`
/// leaves a field 0, and checks the result (initialization_error with the reason).
result<resolved_settings> resolve_settings(const cpu_settings& given);

class cpu_backend final : public backend {
 public:
  explicit cpu_backend(const resolved_settings& settings);

  std::string name() const override { return "cpu"; }
  int device_count() const override { return settings_.device_count; }
  /// Part of a memfd goes back on its own (fallocate punch hole).
  bool can_discard_physical_part() const override { return true; }
  void discard_physical_part(std::uint64_t handle, std::size_t offset, std::size_t bytes) override;
  /// The workers report as they run: no stream needs settling.
  status settle_unmarked_streams(int) override { return status::success(); }
#include "backend/platform_overrides.inc"

 private:
  struct physical {
    int device = 0;
    std::size_t bytes = 0;
    std::size_t discarded_bytes = 0;    // already given back by discard_physical_part
    bool counts_against_device = true;  // imported memory belongs to the exporter's budget
    bool host = false;                  // host memory: counted in host_committed_
  };
  /// The committed-bytes counter and the budget of a location.
  std::atomic<std::size_t>& committed_of(memory_location where);
  std::atomic<std::size_t>& committed_of(const physical& p);
  std::size_t budget_of(memory_location where) const;
  /// Creates the memfd of bytes at where: bound to its NUMA node first, then allocated.
  result<int> make_memory(memory_location where, std::size_t bytes);

  const resolved_settings settings_;
  std::vector<std::atomic<std::size_t>> committed_;  // per device
  std::atomic<std::size_t> host_committed_{0};       // host pools, every NUMA node
  mutable std::mutex mutex_;
  std::map<int, physical> physicals_;  // by file descriptor
};

}  // namespace soma::detail::backend::cpu
