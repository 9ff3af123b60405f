#include "runtime/memory_pool.hpp"

namespace soma::detail {

backend_pool_memory::backend_pool_memory(backend::backend& platform, int device,
                                         unsigned export_handle_types)
    : platform_(platform),
      device_(device),
      export_handle_types_(export_handle_types),
      granularity_bytes_(platform.properties(device).granularity_bytes) {}

result<std::uintptr_t> backend_pool_memory::reserve(std::size_t bytes) {
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

void backend_pool_memory::free_reservation(std::uintptr_t base, std::size_t bytes) {
  {
    std::lock_guard lock(access_mutex_);
    reservations_.erase(base);
  }
  platform_.free_address(base, bytes);
}

backend::access_flags backend_pool_memory::access(int device) const {
  if (device == device_) return backend::access_flags::read_write;
  std::lock_guard lock(access_mutex_);
  auto found = granted_.find(device);
  return found == granted_.end() ? backend::access_flags::none : found->second;
}

status backend_pool_memory::set_access(int device, backend::access_flags flags) {
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

status backend_pool_memory::adopt_range(std::uintptr_t address, std::size_t bytes) {
  std::lock_guard lock(access_mutex_);
  for (const auto& [device, flags] : granted_) {
    if (status applied = platform_.set_access(address, bytes, device, flags); !applied.ok())
      return applied;
  }
  reservations_.emplace(address, bytes);
  return status::success();
}

void backend_pool_memory::forget_range(std::uintptr_t address) {
  std::lock_guard lock(access_mutex_);
  reservations_.erase(address);
}

status memory_pool::adopt_mapping(std::uintptr_t address, std::size_t bytes) {
  return memory_.adopt_range(address, bytes);
}

void memory_pool::forget_mapping(std::uintptr_t address) { memory_.forget_range(address); }

void memory_pool::set_compaction(bool enabled) {
  // Under the pool lock: commits are made and given back under it.
  with_lock([&] { memory_.set_granule_commits(enabled); });
  set_compact_before_growth(enabled);
}

memory_pool::memory_pool(pool_config config, std::unique_ptr<backend_pool_memory> memory,
                         pool_properties properties, bool is_default)
    : memory_pool(std::move(config), memory.release(), properties, is_default) {}

memory_pool::memory_pool(pool_config config, backend_pool_memory* memory,
                         pool_properties properties, bool is_default)
    : pool(std::move(config), std::unique_ptr<pool_memory>(memory)),
      memory_(*memory),
      properties_(properties),
      is_default_(is_default),
      exports_(properties.export_handle_types != 0 ? std::make_unique<export_table>() : nullptr),
      imports_(properties.imported ? std::make_unique<import_table>() : nullptr) {}

backend::access_flags memory_pool::access(int device) const { return memory_.access(device); }

status memory_pool::set_access(int device, backend::access_flags flags) {
  return memory_.set_access(device, flags);
}

result<std::uint64_t> backend_pool_memory::commit(std::uintptr_t address, std::size_t bytes) {
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

result<std::uint64_t> backend_pool_memory::commit_by_granule(std::uintptr_t address,
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

void backend_pool_memory::decommit(std::uintptr_t address, std::size_t bytes, std::uint64_t token,
                                   std::size_t offset_bytes) {
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
