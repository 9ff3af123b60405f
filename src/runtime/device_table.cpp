#include "runtime/device_table.hpp"

namespace soma::detail {
namespace {

thread_local int current_device_index = 0;

}  // namespace

device_table::device_table(backend::backend& platform) : platform_(&platform) {
  for (int device = 0; device < platform.device_count(); ++device)
    properties_.push_back(platform.properties(device));
}

status device_table::check_any() const {
  if (count() > 0) return status::success();
  return status(error_code::no_device, platform_->name() + " backend: no device");
}

status device_table::check(int device) const {
  if (device < 0 || device >= count()) {
    return status(error_code::invalid_device, "device " + std::to_string(device) +
                                                  " does not exist (the " + platform_->name() +
                                                  " backend has " + std::to_string(count()) +
                                                  " device" + (count() == 1 ? "" : "s") + ")");
  }
  return status::success();
}

status device_table::set_current(int device) {
  if (status checked = check(device); !checked.ok()) return checked;
  current_device_index = device;
  return status::success();
}

int device_table::current() const noexcept { return current_device_index; }

result<bool> device_table::can_access_peer(int device, int peer) const {
  if (status checked = check(device); !checked.ok()) return checked;
  if (status checked = check(peer); !checked.ok()) return checked;
  return platform_->can_access_peer(device, peer);
}

status device_table::memory_info(std::size_t* free_bytes, std::size_t* total_bytes) const {
  platform_->memory_info(current(), free_bytes, total_bytes);
  return status::success();
}

result<std::size_t> device_table::committed_bytes(int device) const {
  if (status checked = check(device); !checked.ok()) return checked;
  return platform_->committed_bytes(device);
}

}  // namespace soma::detail
