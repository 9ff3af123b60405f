#include "runtime/host_memory_table.hpp"

#include <iterator>
#include <string>

namespace soma::detail {

result<void*> host_memory_table::allocate(std::size_t bytes) {
  if (bytes == 0) return static_cast<void*>(nullptr);
  result<void*> made = platform_.allocate_host(bytes);
  if (!made.ok()) {
    status failure = made.take_error();
    return status(failure.code(),
                  "somaMallocHost of " + format_bytes(bytes) + ": " + failure.message());
  }
  std::lock_guard lock(mutex_);
  allocations_.emplace(reinterpret_cast<std::uintptr_t>(made.value()), bytes);
  return made.value();
}

status host_memory_table::free(void* pointer) {
  if (pointer == nullptr) return status::success();
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  std::size_t bytes = 0;
  {
    std::lock_guard lock(mutex_);
    auto found = allocations_.find(address);
    if (found == allocations_.end()) {
      const auto [base, size] = find_locked(address);
      if (base != 0) {
        return status(error_code::invalid_value,
                      "somaFreeHost: " + format_address(address) + " is " +
                          std::to_string(address - base) + " bytes into the host allocation at " +
                          format_address(base) + " of " + format_bytes(size) +
                          "; pass the pointer somaMallocHost returned");
      }
      return status(
          error_code::invalid_value,
          "somaFreeHost: " + format_address(address) +
              " is not host memory from somaMallocHost (never allocated, or already freed)");
    }
    bytes = found->second;
    allocations_.erase(found);
  }
  platform_.free_host(pointer, bytes);
  return status::success();
}

std::pair<std::uintptr_t, std::size_t> host_memory_table::find_locked(
    std::uintptr_t address) const {
  auto after = allocations_.upper_bound(address);
  if (after == allocations_.begin()) return {0, 0};
  const auto& [base, size] = *std::prev(after);
  if (address - base >= size) return {0, 0};
  return {base, size};
}

std::pair<std::uintptr_t, std::size_t> host_memory_table::find(std::uintptr_t address) const {
  std::lock_guard lock(mutex_);
  return find_locked(address);
}

}  // namespace soma::detail
