#include "runtime/memory_pool.hpp"

namespace soma::detail {

backend_pool_memory::backend_pool_memory(backend::backend& platform, int device,
                                         unsigned export_handle_types)
    : platform_(platform),
      device_(device),
      export_handle_types_(export_handle_types),
      granularity_bytes_(platform.properties(device).granularity_bytes) {}

result<std::uintptr_t> backend_pool_memory::reserve(std::size_t bytes) {
  return platform_.reserve_address(device_, bytes);
}

void backend_pool_memory::free_reservation(std::uintptr_t base, std::size_t bytes) {
  platform_.free_address(base, bytes);
}

result<std::uint64_t> backend_pool_memory::commit(std::uintptr_t address, std::size_t bytes) {
  result<std::uint64_t> handle = platform_.create_physical(device_, bytes, export_handle_types_);
  if (!handle.ok()) return handle;
  if (status mapped = platform_.map(address, bytes, handle.value(), device_); !mapped.ok()) {
    platform_.release_physical(handle.value());
    return mapped;
  }
  mapped_bytes_[handle.value()] = bytes;
  return handle;
}

void backend_pool_memory::decommit(std::uintptr_t address, std::size_t bytes,
                                   std::uint64_t token, std::size_t offset_bytes) {
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
