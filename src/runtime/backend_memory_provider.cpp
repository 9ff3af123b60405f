#include "runtime/backend_memory_provider.hpp"

#include <new>
#include <vector>

namespace soma::detail {

namespace {

backend::device_properties properties_of(const backend::backend& platform,
                                         backend::memory_location where) {
  return where.is_host() ? platform.host_properties(where) : platform.properties(where.id);
}

}  // namespace

backend_memory_provider::backend_memory_provider(backend::backend& platform,
                                                 backend::memory_location where,
                                                 unsigned export_handle_types)
    : platform_(platform),
      where_(where),
      export_handle_types_(export_handle_types),
      granularity_bytes_(properties_of(platform, where).granularity_bytes),
      maps_at_offset_(properties_of(platform, where).maps_at_offset) {}

result<std::uintptr_t> backend_memory_provider::reserve(std::size_t bytes) {
  result<std::uintptr_t> base = platform_.reserve_address(where_, bytes);
  if (!base.ok()) return base;
  std::lock_guard lock(access_mutex_);
  for (const auto& [device, flags] : granted_) {
    if (status applied = platform_.set_access(base.value(), bytes, device, flags); !applied.ok()) {
      platform_.free_address(base.value(), bytes);
      return applied;
    }
  }
  // Each platform call below undoes its own work where soma cannot record it for want of host
  // memory: what soma does not know of, nothing would give back.
  try {
    reservations_.emplace(base.value(), bytes);
  } catch (const std::bad_alloc&) {
    platform_.free_address(base.value(), bytes);
    throw;
  }
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
  // A device pool's own device; host memory belongs to no device (S6: granted, or none).
  if (!where_.is_host() && device == where_.id) return backend::access_flags::read_write;
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
  result<std::uint64_t> handle = platform_.create_physical(where_, bytes, export_handle_types_);
  if (!handle.ok()) return handle;
  try {
    if (status mapped = platform_.map(address, bytes, handle.value(), where_); !mapped.ok()) {
      platform_.release_physical(handle.value());
      return mapped;
    }
  } catch (const std::bad_alloc&) {
    platform_.release_physical(handle.value());  // the map undid itself
    throw;
  }
  try {
    mapped_bytes_[handle.value()] = bytes;
  } catch (const std::bad_alloc&) {
    platform_.unmap(address, bytes);
    platform_.release_physical(handle.value());
    throw;
  }
  return handle;
}

result<std::uint64_t> backend_memory_provider::commit_by_granule(std::uintptr_t address,
                                                                 std::size_t bytes) {
  std::map<std::size_t, std::uint64_t> granules;  // by offset
  std::vector<backend::backend::mapping_part> parts;
  parts.reserve(bytes / granularity_bytes_);
  auto release_all = [&] {
    for (const auto& [offset, handle] : granules) platform_.release_physical(handle);
  };
  auto create_granule = [&]() -> result<std::uint64_t> {
    try {
      return platform_.create_physical(where_, granularity_bytes_, 0);
    } catch (const std::bad_alloc&) {
      release_all();  // the create undid itself
      throw;
    }
  };
  for (std::size_t offset = 0; offset < bytes; offset += granularity_bytes_) {
    result<std::uint64_t> handle = create_granule();
    if (!handle.ok()) {
      release_all();
      return handle;
    }
    try {
      granules.emplace(offset, handle.value());
    } catch (const std::bad_alloc&) {
      platform_.release_physical(handle.value());
      release_all();
      throw;
    }
    parts.push_back({handle.value(), 0, granularity_bytes_});
  }
  // One call maps them all, so access is granted once over the range.
  try {
    if (status mapped = platform_.map_parts(address, parts, where_); !mapped.ok()) {
      release_all();
      return mapped;
    }
  } catch (const std::bad_alloc&) {
    release_all();  // the map undid itself
    throw;
  }
  const std::uint64_t token = next_split_token_;
  try {
    split_commits_.emplace(token, std::move(granules));
  } catch (const std::bad_alloc&) {
    platform_.unmap(address, bytes);
    release_all();
    throw;
  }
  ++next_split_token_;
  return token;
}

status backend_memory_provider::map_again(std::span<const physical_piece> pieces) {
  if (pieces.empty()) return status::success();
  std::vector<backend::backend::mapping_part> parts;
  for (const physical_piece& piece : pieces) {
    auto split = split_commits_.find(piece.token);
    if (split == split_commits_.end()) {
      parts.push_back({piece.token, piece.offset_bytes, piece.size_bytes});
      continue;
    }
    for (std::size_t at = 0; at < piece.size_bytes; at += granularity_bytes_) {
      auto granule = split->second.find(piece.offset_bytes + at);
      if (granule == split->second.end()) {
        return status(error_code::invalid_value, "remap: no granule at offset " +
                                                     std::to_string(piece.offset_bytes + at) +
                                                     " of the commit");
      }
      parts.push_back({granule->second, 0, granularity_bytes_});
    }
  }
  return platform_.map_parts(pieces.front().address, parts, where_);
}

void backend_memory_provider::unmap_alias(std::span<const physical_piece> pieces) {
  if (pieces.empty()) return;
  std::size_t bytes = 0;
  for (const physical_piece& p : pieces) bytes += p.size_bytes;
  // Whole mappings end to end (one a granule where a commit is split): the platform unmaps them
  // in one call, where a call a granule cost cuMemUnmap's 16-27 us each.
  platform_.unmap(pieces.front().address, bytes);
}

void backend_memory_provider::decommit(std::uintptr_t address, std::size_t bytes,
                                       std::uint64_t token, std::size_t offset_bytes) {
  if (auto split = split_commits_.find(token); split != split_commits_.end()) {
    // Each run of granules still committed is unmapped in one call, then each granule's
    // physical allocation goes. Two passes rather than a list of the run: giving memory back
    // needs no host memory.
    std::map<std::size_t, std::uint64_t>& granules = split->second;
    std::size_t run_start = 0;
    bool in_run = false;
    for (std::size_t at = 0; at <= bytes; at += granularity_bytes_) {
      const bool committed = at < bytes && granules.count(offset_bytes + at) != 0;
      if (committed && !in_run) run_start = at;
      if (!committed && in_run) platform_.unmap(address + run_start, at - run_start);
      in_run = committed;
    }
    for (std::size_t at = 0; at < bytes; at += granularity_bytes_) {
      auto granule = granules.find(offset_bytes + at);
      if (granule == granules.end()) continue;
      platform_.release_physical(granule->second);
      granules.erase(granule);
    }
    if (granules.empty()) split_commits_.erase(split);
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
