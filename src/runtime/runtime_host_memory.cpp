// Host memory (somaMallocHost) and stream value operations (somaStreamWaitValue32,
// somaStreamWriteValue32): what lets tests and applications order the host against streams
// without host tasks, the same way on both backends.
#include <algorithm>

#include "runtime/runtime.hpp"

namespace soma::detail {

result<void*> runtime::allocate_host(std::size_t bytes) {
  if (bytes == 0) return static_cast<void*>(nullptr);
  result<void*> made = backend_->allocate_host(bytes);
  if (!made.ok()) {
    status failure = made.take_error();
    return status(failure.code(),
                  "somaMallocHost of " + format_bytes(bytes) + ": " + failure.message());
  }
  std::lock_guard lock(host_mutex_);
  host_allocations_.emplace(reinterpret_cast<std::uintptr_t>(made.value()), bytes);
  return made.value();
}

status runtime::free_host(void* pointer) {
  if (pointer == nullptr) return status::success();
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  std::size_t bytes = 0;
  {
    std::lock_guard lock(host_mutex_);
    auto found = host_allocations_.find(address);
    if (found == host_allocations_.end()) {
      const auto [base, size] = find_host_locked(address);
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
    host_allocations_.erase(found);
  }
  backend_->free_host(pointer, bytes);
  return status::success();
}

std::pair<std::uintptr_t, std::size_t> runtime::find_host_locked(std::uintptr_t address) const {
  auto after = host_allocations_.upper_bound(address);
  if (after == host_allocations_.begin()) return {0, 0};
  const auto& [base, size] = *std::prev(after);
  if (address - base >= size) return {0, 0};
  return {base, size};
}

std::pair<std::uintptr_t, std::size_t> runtime::find_host(std::uintptr_t address) const {
  std::lock_guard lock(host_mutex_);
  return find_host_locked(address);
}

status runtime::check_value_word(std::uint32_t* address, const char* call, int device,
                                 backend::access_flags needed) const {
  const auto word = reinterpret_cast<std::uintptr_t>(address);
  if (word == 0)
    return status(error_code::invalid_value, std::string(call) + ": the address is NULL");
  if (word % alignof(std::uint32_t) != 0) {
    return status(error_code::invalid_value,
                  std::string(call) + ": " + format_address(word) + " is not 4-byte aligned");
  }
  // The GPU can reach only page-locked host memory and device memory: accept exactly those,
  // on both backends, so code tested on the cpu runs on the GPU.
  const auto [base, size] = find_host(word);
  if (base != 0) {
    if (word + sizeof(std::uint32_t) > base + size) {
      return status(error_code::invalid_value, std::string(call) + ": the word at " +
                                                   format_address(word) +
                                                   " runs past the end of its host allocation");
    }
    return status::success();
  }
  const pointer_info info = describe_pointer(address);
  if (!info.is_live) {
    return status(error_code::invalid_value,
                  std::string(call) + ": " + format_address(word) +
                      " is neither host memory from somaMallocHost nor a live allocation");
  }
  return check_use(address, sizeof(std::uint32_t), call, device, needed);
}

status runtime::stream_wait_value32(std::uintptr_t stream_handle, std::uint32_t* address,
                                    std::uint32_t value, unsigned flags) {
  result<stream_object*> s = resolve_stream(stream_handle);
  if (!s.ok()) return s.take_error();
  if (flags > static_cast<unsigned>(backend::wait_condition::nor_nonzero)) {
    return status(error_code::invalid_value,
                  "somaStreamWaitValue32: flags " + std::to_string(flags) +
                      " is not a somaStreamWaitValue condition (Geq 0, Eq 1, And 2, Nor 3)");
  }
  if (status ok = check_value_word(address, "somaStreamWaitValue32", s.value()->device,
                                   backend::access_flags::read);
      !ok.ok())
    return ok;
  return s.value()->queue->enqueue_wait_value32(address, value,
                                                static_cast<backend::wait_condition>(flags));
}

status runtime::stream_write_value32(std::uintptr_t stream_handle, std::uint32_t* address,
                                     std::uint32_t value, unsigned flags) {
  result<stream_object*> s = resolve_stream(stream_handle);
  if (!s.ok()) return s.take_error();
  if (flags != 0) {
    return status(
        error_code::invalid_value,
        "somaStreamWriteValue32: flags " + std::to_string(flags) + " is not 0 (the only flag)");
  }
  if (status ok = check_value_word(address, "somaStreamWriteValue32", s.value()->device,
                                   backend::access_flags::read_write);
      !ok.ok())
    return ok;
  return s.value()->queue->enqueue_write_value32(address, value);
}

}  // namespace soma::detail
