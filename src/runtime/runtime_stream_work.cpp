// Work on streams that touches memory: memset, memcpy, host tasks that declare their ranges,
// stream value operations (S13), each checked first against the ranges and the access the
// stream's device has (S6).
#include <string>

#include "runtime/runtime.hpp"

namespace soma::detail {
namespace {

const char* flags_name(backend::access_flags flags) {
  switch (flags) {
    case backend::access_flags::none:
      return "no";
    case backend::access_flags::read:
      return "read";
    case backend::access_flags::read_write:
      return "read-write";
  }
  return "unknown";
}

}  // namespace

status runtime::launch_host_task(std::uintptr_t stream_handle, backend::host_task task) {
  result<stream_object*> s = streams_.resolve(stream_handle);
  if (!s.ok()) return s.take_error();
  return s.value()->queue->enqueue_host_task(std::move(task));
}

result<stream_object*> runtime::stream_using(std::uintptr_t stream_handle, std::size_t bytes,
                                             std::initializer_list<range_use> uses) const {
  result<stream_object*> s = streams_.resolve(stream_handle);
  if (!s.ok() || bytes == 0) return s;
  for (const range_use& use : uses) {
    if (status ok = check_use(use.pointer, bytes, use.what, s.value()->device, use.needed);
        !ok.ok())
      return ok;
  }
  return s;
}

status runtime::memset_async(void* destination, int value, std::size_t bytes,
                             std::uintptr_t stream_handle) {
  result<stream_object*> s = stream_using(
      stream_handle, bytes,
      {{destination, "somaMemsetAsync destination", backend::access_flags::read_write}});
  if (!s.ok()) return s.take_error();
  if (bytes == 0) return status::success();
  return s.value()->queue->enqueue_memset(destination, value, bytes);
}

status runtime::memcpy_async(void* destination, const void* source, std::size_t bytes,
                             std::uintptr_t stream_handle) {
  // Each pointer's device comes from the pointer itself (S13); the stream's device runs the
  // copy and must be allowed to write the destination and read the source.
  result<stream_object*> s =
      stream_using(stream_handle, bytes,
                   {{destination, "somaMemcpyAsync destination", backend::access_flags::read_write},
                    {source, "somaMemcpyAsync source", backend::access_flags::read}});
  if (!s.ok()) return s.take_error();
  if (bytes == 0) return status::success();
  return s.value()->queue->enqueue_memcpy(destination, source, bytes);
}

status runtime::check_use(const void* pointer, std::size_t bytes, const char* what, int device,
                          backend::access_flags needed) const {
  pointer_info info;  // stays "not live" for host memory
  if (status ok = check_range(pointer, bytes, what, &info); !ok.ok()) return ok;
  if (!info.is_live || info.pool == nullptr || info.device == device) return status::success();
  const backend::access_flags granted = info.pool->access(device);
  const bool allowed = needed == backend::access_flags::read
                           ? granted != backend::access_flags::none
                           : granted == backend::access_flags::read_write;
  if (allowed) return status::success();
  const bool writes = needed == backend::access_flags::read_write;
  return status(error_code::not_permitted,
                std::string(what) + " " +
                    format_address(reinterpret_cast<std::uintptr_t>(pointer)) +
                    ": a stream of device " + std::to_string(device) + " may not " +
                    (writes ? "write" : "read") + " memory of " + info.pool->describe() +
                    ", which grants device " + std::to_string(device) + " " + flags_name(granted) +
                    " access (somaMemPoolSetAccess with " +
                    (writes ? "somaMemAccessFlagsProtReadWrite" : "somaMemAccessFlagsProtRead") +
                    " for device " + std::to_string(device) + " allows it)");
}

status runtime::check_host_access_flags(const host_access& access, const std::string& what) {
  if (access.flags == backend::access_flags::read ||
      access.flags == backend::access_flags::read_write)
    return status::success();
  return status(error_code::invalid_value,
                what + ": access " + std::to_string(static_cast<int>(access.flags)) +
                    " is not somaMemAccessFlagsProtRead (1) or ProtReadWrite (3)");
}

status runtime::launch_host_task_with_access(std::uintptr_t stream_handle, backend::host_task task,
                                             const host_access* accesses, std::size_t count) {
  result<stream_object*> s = streams_.resolve(stream_handle);
  if (!s.ok()) return s.take_error();
  if (count > 0 && accesses == nullptr) {
    return status(
        error_code::invalid_value,
        "somaLaunchHostFuncWithAccess: accesses is NULL with count " + std::to_string(count));
  }
  for (std::size_t i = 0; i < count; ++i) {
    const host_access& a = accesses[i];
    const std::string what = "somaLaunchHostFuncWithAccess range " + std::to_string(i);
    if (status ok = check_host_access_flags(a, what); !ok.ok()) return ok;
    if (a.bytes == 0) continue;
    if (status ok = check_use(a.pointer, a.bytes, what.c_str(), s.value()->device, a.flags);
        !ok.ok())
      return ok;
  }
  return s.value()->queue->enqueue_host_task(std::move(task));
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
  const auto [base, size] = host_memory_.find(word);
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
  result<stream_object*> s = streams_.resolve(stream_handle);
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
  result<stream_object*> s = streams_.resolve(stream_handle);
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
