// Pools keyed by location and allocation type (S3, S5: somaMemGetDefaultMemPool,
// somaMemGetMemPool, somaMemSetMemPool, as CUDA 13's cudaMem*MemPool): a device's default and
// current pools, and those of the host and of each host NUMA node, made at their first use.
#include <string>
#include <string_view>

#include "backend/host_memory.hpp"
#include "runtime/pool_registry.hpp"

namespace soma::detail {
namespace {

status invalid(const std::string& message) { return status(error_code::invalid_value, message); }

std::string location_text(int type, int id) {
  return "location {type " + std::to_string(type) + ", id " + std::to_string(id) + "}";
}

}  // namespace

result<backend::memory_location> pool_registry::checked_location(const char* call,
                                                                 int location_type, int location_id,
                                                                 int allocation_type) const {
  const std::string prefix = std::string(call) + ": ";
  if (allocation_type == allocation_type_managed)
    return status(error_code::not_supported, prefix + managed_reason);
  if (allocation_type != allocation_type_pinned) {
    return invalid(prefix + "allocation type " + std::to_string(allocation_type) +
                   " is not somaMemAllocationTypePinned (1)");
  }
  switch (location_type) {
    case location_type_device:
      if (location_id < 0 || location_id >= devices_.count()) {
        return invalid(prefix + "location.id " + std::to_string(location_id) +
                       " is not a device (there are " + std::to_string(devices_.count()) + ")");
      }
      return backend::memory_location(location_id);
    case location_type_host:
      return backend::memory_location::host();  // the id is ignored, as CUDA ignores it
    case location_type_host_numa: {
      const int nodes = backend::host_numa_node_count();
      if (location_id < 0 || location_id >= nodes) {
        return invalid(prefix + "location.id " + std::to_string(location_id) +
                       " is not a NUMA node of this host (it has " + std::to_string(nodes) + ")");
      }
      return backend::memory_location::host_numa(location_id);
    }
    case location_type_host_numa_current: {
      // As CUDA 13 on an H200: pool creation says InvalidValue, the location-keyed calls
      // NotSupported.
      const error_code code = std::string_view(call) == "somaMemPoolCreate"
                                  ? error_code::invalid_value
                                  : error_code::not_supported;
      return status(code, prefix +
                              "somaMemLocationTypeHostNumaCurrent names no fixed location; name "
                              "the node with somaMemLocationTypeHostNuma");
    }
    default:
      return invalid(prefix + location_text(location_type, location_id) +
                     " is not a device, host or host-NUMA location");
  }
}

status pool_registry::check_host_location(const char* call, backend::memory_location where,
                                          unsigned handle_types) const {
  const backend::device_properties& first = devices_.properties(0);
  const bool numa = where.type == backend::memory_location::kind::host_numa;
  if (!(numa ? first.host_numa_memory_pools_supported : first.host_memory_pools_supported)) {
    return status(error_code::not_supported,
                  std::string(call) + ": the " + platform_.name() + " backend has no pools on " +
                      backend::describe(where) + " (somaDevAttrHost" + (numa ? "Numa" : "") +
                      "MemoryPoolsSupported is 0)");
  }
  const unsigned supported = platform_.host_properties(where).supported_handle_types;
  if ((handle_types & ~supported) != 0) {
    // As CUDA: memory of the host location is not IPC capable (InvalidValue).
    return invalid(std::string(call) + ": handleTypes " + std::to_string(handle_types) +
                   " cannot be exported from " + backend::describe(where) +
                   (numa ? "" : "; a host-NUMA pool can be exportable"));
  }
  return status::success();
}

result<pool_registry::device_pools*> pool_registry::host_pools_of(const char* call,
                                                                  backend::memory_location where) {
  const std::pair<int, int> key{static_cast<int>(where.type), where.id};
  {
    std::lock_guard lock(mutex_);
    auto found = per_host_location_.find(key);
    if (found != per_host_location_.end()) return found->second.get();
  }
  if (status ok = check_host_location(call, where, 0); !ok.ok()) return ok;
  pool_properties properties;
  properties.device = -1;
  properties.location = where;
  result<pool_object*> created = add(properties, /*is_default=*/true, "default");
  if (!created.ok()) return created.take_error();
  std::lock_guard lock(mutex_);
  auto [at, inserted] = per_host_location_.try_emplace(key, std::make_unique<device_pools>());
  if (inserted) {
    at->second->default_pool = created.value();
    at->second->current.store(created.value(), std::memory_order_release);
  } else {
    // Another thread made it first: this one is not needed.
    created.value()->mark_destroyed();
    handles_.remove(created.value()->handle());
  }
  return at->second.get();
}

result<std::uintptr_t> pool_registry::pool_at(const char* call, bool current_pool,
                                              int location_type, int location_id,
                                              int allocation_type) {
  result<backend::memory_location> where =
      checked_location(call, location_type, location_id, allocation_type);
  if (!where.ok()) return where.take_error();
  const int device = where.value().id;
  if (!where.value().is_host()) return current_pool ? current(device) : default_pool(device);
  result<device_pools*> pools = host_pools_of(call, where.value());
  if (!pools.ok()) return pools.take_error();
  device_pools& at = *pools.value();
  return (current_pool ? at.current.load(std::memory_order_acquire) : at.default_pool)->handle();
}

result<std::uintptr_t> pool_registry::default_pool_at(int location_type, int location_id,
                                                      int allocation_type) {
  return pool_at("somaMemGetDefaultMemPool", false, location_type, location_id, allocation_type);
}

result<std::uintptr_t> pool_registry::current_at(int location_type, int location_id,
                                                 int allocation_type) {
  return pool_at("somaMemGetMemPool", true, location_type, location_id, allocation_type);
}

status pool_registry::set_current_at(int location_type, int location_id, int allocation_type,
                                     std::uintptr_t pool_handle) {
  result<backend::memory_location> where =
      checked_location("somaMemSetMemPool", location_type, location_id, allocation_type);
  if (!where.ok()) return where.take_error();
  result<pool_object*> p = resolve(pool_handle);
  if (!p.ok()) return p.take_error();
  // As CUDA: the pool's location and allocation type must be the ones named.
  if (p.value()->properties().location != where.value()) {
    return invalid("somaMemSetMemPool: " + p.value()->describe() + " is not a pool of " +
                   backend::describe(where.value()));
  }
  if (!where.value().is_host()) return set_current(where.value().id, pool_handle);
  if (p.value()->is_imported()) {
    return invalid("somaMemSetMemPool: " + p.value()->describe() +
                   " is an imported pool, which cannot allocate and so cannot be a current pool");
  }
  result<device_pools*> pools = host_pools_of("somaMemSetMemPool", where.value());
  if (!pools.ok()) return pools.take_error();
  pools.value()->current.store(p.value(), std::memory_order_release);
  return status::success();
}

}  // namespace soma::detail
