// Access of other devices to a pool (S6): somaMemPoolSetAccess / GetAccess. A host pool (S5)
// is the host's at once and a device's once granted.
#include <string>

#include "runtime/pool_registry.hpp"

namespace soma::detail {
namespace {

bool is_access_flags(int flags) { return flags == 0 || flags == 1 || flags == 3; }

bool is_host_type(int type) {
  return type == location_type_host || type == location_type_host_numa ||
         type == location_type_host_numa_current;
}

/// The location check shared by SetAccess and GetAccess: devices have access as granted; the
/// host has read-write access to a host pool's memory, and none to a device pool's.
status check_location(const char* call, int type, int id, int device_count, bool host_pool) {
  if (is_host_type(type)) {
    if (host_pool) return status::success();
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

status pool_registry::check_access_list(const void* list, std::size_t count) const {
  if (count > 0 && list == nullptr) {
    return status(error_code::invalid_value,
                  "somaMemPoolSetAccess: descList is NULL with count " + std::to_string(count));
  }
  // A longer list names some device twice or is no list at all (a count of SIZE_MAX); reading
  // it could run past its end, so it is refused before any entry is read.
  const auto devices = static_cast<std::size_t>(devices_.count());
  if (count > devices) {
    return status(error_code::invalid_value,
                  "somaMemPoolSetAccess: count " + std::to_string(count) +
                      " is more entries than the " + std::to_string(devices) +
                      " device(s) there are (one entry per device at most)");
  }
  return status::success();
}

status pool_registry::set_access(std::uintptr_t handle, const access_request* requests,
                                 std::size_t count) {
  result<pool_object*> found = resolve(handle);
  if (!found.ok()) return found.take_error();
  pool_object& p = *found.value();
  if (status ok = check_access_list(requests, count); !ok.ok()) return ok;
  const bool host_pool = p.properties().location.is_host();
  const int owner = p.config().device;  // -1 for a host pool: no device owns it
  // Every entry is checked before any is applied: a rejected call changes nothing.
  for (std::size_t i = 0; i < count; ++i) {
    const access_request& r = requests[i];
    const std::string entry = "somaMemPoolSetAccess entry " + std::to_string(i);
    if (status ok = check_location(entry.c_str(), r.location_type, r.location_id, devices_.count(),
                                   host_pool);
        !ok.ok())
      return ok;
    if (!is_access_flags(r.flags)) {
      return status(
          error_code::invalid_value,
          entry + ": flags " + std::to_string(r.flags) +
              " is not somaMemAccessFlagsProtNone (0), ProtRead (1) or ProtReadWrite (3)");
    }
    if (is_host_type(r.location_type)) {
      // The host keeps read-write access to a host pool: asking for it again changes nothing.
      if (r.flags == 3) continue;
      return status(error_code::not_supported, entry + ": the host keeps read-write access to " +
                                                   p.describe() + "; it cannot be lowered");
    }
    if (host_pool) continue;  // any device may reach host memory once granted
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
    if (r.flags != 0 && !platform_.can_access_peer(r.location_id, owner)) {
      return status(error_code::invalid_device,
                    entry + ": device " + std::to_string(r.location_id) +
                        " cannot access memory of device " + std::to_string(owner) +
                        " (somaDeviceCanAccessPeer says no)");
    }
  }
  for (std::size_t i = 0; i < count; ++i) {
    const access_request& r = requests[i];
    if (is_host_type(r.location_type) || r.location_id == owner) continue;
    if (status applied = p.set_access(r.location_id, static_cast<backend::access_flags>(r.flags));
        !applied.ok()) {
      return status(applied.code(),
                    "somaMemPoolSetAccess on " + p.describe() + ": " + applied.message());
    }
  }
  return status::success();
}

result<int> pool_registry::access(std::uintptr_t handle, int location_type, int location_id) const {
  result<pool_object*> found = resolve(handle);
  if (!found.ok()) return found.take_error();
  const bool host_pool = found.value()->properties().location.is_host();
  if (status ok = check_location("somaMemPoolGetAccess", location_type, location_id,
                                 devices_.count(), host_pool);
      !ok.ok())
    return ok;
  if (is_host_type(location_type)) return static_cast<int>(backend::access_flags::read_write);
  return static_cast<int>(found.value()->access(location_id));
}

}  // namespace soma::detail
