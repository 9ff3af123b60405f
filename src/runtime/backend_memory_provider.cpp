#include "runtime/backend_memory_provider.hpp"

namespace soma::detail {

backend_memory_provider::backend_memory_provider(backend::backend& platform, int device,
                                                 unsigned export_handle_types)
    : platform_(platform),
      device_(device),
      export_handle_types_(export_handle_types),
      granularity_bytes_(platform.properties(device).granularity_bytes) {}

result<std::uintptr_t> backend_memory_provider::reserve(std::size_t bytes) {
  result<std::uintptr_t> base = platform_.reserve_address(device_, bytes);
  if (!base.ok()) return base;
  std::lock_guard lock(access_mutex_);
  for (const auto& [device, flags] : granted_) {
    if (status applied = platform_.set_access(base.value(), bytes, device, flags); !applied.ok()) {
      platform_.free_address(base.value(), bytes);
      return applied;
    }
  }
  reservations_.emplace(base.value(), bytes);
  return base;
}

void backend_memory_provider::free_reservation(std::uintptr_t base, std::size_t bytes) {
  {
    std::lock_guard lock(access_mutex_);
    reservations_.erase(base);
  }
  platform_.free_address(base, bytes);
}

backend::access_flags backend_memory_provider::access(int device) const {
  if (device == device_) return backend::access_flags::read_write;
  std::lock_guard lock(access_mutex_);
  auto found = granted_.find(device);
  return found == granted_.end() ? backend::access_flags::none : found->second;
}

status backend_memory_provider::set_access(int device, backend::access_flags flags) {
  std::lock_guard lock(access_mutex_);
  for (const auto& [base, bytes] : reservations_) {
    if (status applied = platform_.set_access(base, bytes, device, flags); !applied.ok())
      return applied;
  }
  if (flags == backend::access_flags::none) {
    granted_.erase(device);
  } else {
    granted_[device] = flags;
  }
  return status::success();
}

status backend_memory_provider::adopt_range(std::uintptr_t address, std::size_t bytes) {
  std::lock_guard lock(access_mutex_);
  for (const auto& [device, flags] : granted_) {
    if (status applied = platform_.set_access(address, bytes, device, flags); !applied.ok())
      return applied;
  }
  reservations_.emplace(address, bytes);
  return status::success();
}

void backend_memory_provider::forget_range(std::uintptr_t address) {
  std::lock_guard lock(access_mutex_);
  reservations_.erase(address);
}

result<std::uint64_t> backend_memory_provider::commit(std::uintptr_t address, std::size_t bytes) {
  if (granule_commits_ && export_handle_types_ == 0 && !platform_.can_discard_physical_part())
    return commit_by_granule(address, bytes);
  result<std::uint64_t> handle = platform_.create_physical(device_, bytes, export_handle_types_);
  if (!handle.ok()) return handle;
  if (status mapped = platform_.map(address, bytes, handle.value(), device_); !mapped.ok()) {
    platform_.release_physical(handle.value());
    return mapped;
  }
  mapped_bytes_[handle.value()] = bytes;
  return handle;
}

result<std::uint64_t> backend_memory_provider::commit_by_granule(std::uintptr_t address,
                                                                 std::size_t bytes) {
  std::map<std::uintptr_t, std::uint64_t> granules;
  auto undo = [&] {
    for (const auto& [at, handle] : granules) {
      platform_.unmap(at, granularity_bytes_);
      platform_.release_physical(handle);
    }
  };
  for (std::uintptr_t at = address; at < address + bytes; at += granularity_bytes_) {
    result<std::uint64_t> handle = platform_.create_physical(device_, granularity_bytes_, 0);
    if (!handle.ok()) {
      undo();
      return handle;
    }
    if (status mapped = platform_.map(at, granularity_bytes_, handle.value(), device_);
        !mapped.ok()) {
      platform_.release_physical(handle.value());
      undo();
      return mapped;
    }
    granules.emplace(at, handle.value());
  }
  const std::uint64_t token = next_split_token_++;
  split_commits_.emplace(token, std::move(granules));
  return token;
}

void backend_memory_provider::decommit(std::uintptr_t address, std::size_t bytes,
                                       std::uint64_t token, std::size_t offset_bytes) {
  if (auto split = split_commits_.find(token); split != split_commits_.end()) {
    for (std::uintptr_t at = address; at < address + bytes; at += granularity_bytes_) {
      auto granule = split->second.find(at);
      if (granule == split->second.end()) continue;
      platform_.unmap(at, granularity_bytes_);
      platform_.release_physical(granule->second);
      split->second.erase(granule);
    }
    if (split->second.empty()) split_commits_.erase(split);
    return;
  }
  platform_.unmap(address, bytes);
  auto it = mapped_bytes_.find(token);
  if (it == mapped_bytes_.end() || it->second <= bytes) {
    // The last mapped part: the physical allocation goes.
    if (it != mapped_bytes_.end()) mapped_bytes_.erase(it);
    platform_.release_physical(token);
    return;
  }
  it->second -= bytes;
  platform_.discard_physical_part(token, offset_bytes, bytes);
}

}  // namespace soma::detail
