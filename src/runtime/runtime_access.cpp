// Access across devices (S6): somaMemPoolSetAccess / GetAccess, and the check that soma's own
// operations (memset, memcpy, value operations, host tasks that declare their memory) make
// before they touch pool memory of another device (S13).
#include <string>

#include "runtime/runtime.hpp"

namespace soma::detail {
namespace {

constexpr int location_type_device = 1;
constexpr int location_type_host = 2;
constexpr int location_type_host_numa = 3;
constexpr int location_type_host_numa_current = 4;

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

bool is_access_flags(int flags) { return flags == 0 || flags == 1 || flags == 3; }

/// The location check shared by SetAccess and GetAccess: only devices have access.
status check_location(const char* call, int type, int id, int device_count) {
  if (type == location_type_host || type == location_type_host_numa ||
      type == location_type_host_numa_current) {
    return status(error_code::not_supported,
                  std::string(call) + ": host locations have no access to device pools");
  }
  if (type != location_type_device) {
    return status(error_code::invalid_value, std::string(call) + ": location.type " +
                                                 std::to_string(type) +
                                                 " is not somaMemLocationTypeDevice (1)");
  }
  if (id < 0 || id >= device_count) {
    return status(error_code::invalid_device,
                  std::string(call) + ": location.id " + std::to_string(id) +
                      " is not a device (there are " + std::to_string(device_count) + ")");
  }
  return status::success();
}

}  // namespace

status runtime::check_access_list(const void* list, std::size_t count) const {
  if (count > 0 && list == nullptr) {
    return status(error_code::invalid_value,
                  "somaMemPoolSetAccess: descList is NULL with count " + std::to_string(count));
  }
  // A longer list names some device twice or is no list at all (a count of SIZE_MAX); reading
  // it could run past its end, so it is refused before any entry is read.
  const auto devices = static_cast<std::size_t>(device_count());
  if (count > devices) {
    return status(error_code::invalid_value,
                  "somaMemPoolSetAccess: count " + std::to_string(count) +
                      " is more entries than the " + std::to_string(devices) +
                      " device(s) there are (one entry per device at most)");
  }
  return status::success();
}

status runtime::set_pool_access(std::uintptr_t handle, const access_request* requests,
                                std::size_t count) {
  result<pool_object*> found = resolve_pool(handle);
  if (!found.ok()) return found.take_error();
  pool_object& p = *found.value();
  if (status ok = check_access_list(requests, count); !ok.ok()) return ok;
  const int owner = p.config().device;
  // Every entry is checked before any is applied: a rejected call changes nothing.
  for (std::size_t i = 0; i < count; ++i) {
    const access_request& r = requests[i];
    const std::string entry = "somaMemPoolSetAccess entry " + std::to_string(i);
    if (status ok = check_location(entry.c_str(), r.location_type, r.location_id, device_count());
        !ok.ok())
      return ok;
    if (!is_access_flags(r.flags)) {
      return status(
          error_code::invalid_value,
          entry + ": flags " + std::to_string(r.flags) +
              " is not somaMemAccessFlagsProtNone (0), ProtRead (1) or ProtReadWrite (3)");
    }
    if (r.location_id == owner) {
      // As CUDA: the owning device keeps read-write access; it cannot be lowered.
      if (r.flags == 0) {
        return status(error_code::invalid_device, entry + ": device " + std::to_string(owner) +
                                                      " owns " + p.describe() +
                                                      " and cannot lose access to it");
      }
      if (r.flags == 1) {
        return status(error_code::not_supported,
                      entry + ": device " + std::to_string(owner) + " owns " + p.describe() +
                          "; read-only access for the owner is not supported");
      }
      continue;
    }
    if (r.flags != 0 && !backend_->can_access_peer(r.location_id, owner)) {
      return status(error_code::invalid_device,
                    entry + ": device " + std::to_string(r.location_id) +
                        " cannot access memory of device " + std::to_string(owner) +
                        " (somaDeviceCanAccessPeer says no)");
    }
  }
  for (std::size_t i = 0; i < count; ++i) {
    const access_request& r = requests[i];
    if (r.location_id == owner) continue;
    if (status applied = p.set_access(r.location_id, static_cast<backend::access_flags>(r.flags));
        !applied.ok()) {
      return status(applied.code(),
                    "somaMemPoolSetAccess on " + p.describe() + ": " + applied.message());
    }
  }
  return status::success();
}

result<int> runtime::pool_access(std::uintptr_t handle, int location_type, int location_id) const {
  result<pool_object*> found = resolve_pool(handle);
  if (!found.ok()) return found.take_error();
  if (status ok =
          check_location("somaMemPoolGetAccess", location_type, location_id, device_count());
      !ok.ok())
    return ok;
  return static_cast<int>(found.value()->access(location_id));
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
  result<stream_object*> s = resolve_stream(stream_handle);
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

}  // namespace soma::detail
