// The devices of the backend: their properties, the calling thread's current device, and the
// checks and queries of device calls (S4, S8). The C API reads somaDeviceAttr from properties().
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "core/check.hpp"
#include "core/status.hpp"

namespace soma::detail {

/// Fixed once the runtime started, except the current device, which is per thread.
/// Thread-safe.
class device_table {
 public:
  /// Reads every device's properties.
  explicit device_table(backend::backend& platform);
  /// no_device if the backend has none.
  status check_any() const;

  int count() const noexcept { return static_cast<int>(properties_.size()); }
  /// invalid_device, naming how many devices there are, unless 0 <= device < count().
  status check(int device) const;
  /// Requires: check(device) passed.
  const backend::device_properties& properties(int device) const {
    SOMA_ASSERT(device >= 0 && device < count(), "check(device) passed");
    return properties_[static_cast<std::size_t>(device)];
  }
  std::string backend_name() const { return platform_->name(); }

  status set_current(int device);
  int current() const noexcept;
  result<bool> can_access_peer(int device, int peer) const;
  /// Free and total memory of the current device.
  status memory_info(std::size_t* free_bytes, std::size_t* total_bytes) const;
  result<std::size_t> committed_bytes(int device) const;

 private:
  backend::backend* platform_;
  std::vector<backend::device_properties> properties_;
};

}  // namespace soma::detail
