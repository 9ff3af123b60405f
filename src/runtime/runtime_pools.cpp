// Pools: creation with checked properties, deferred destruction, the device's current
// pool, attributes, trim (S3, S4, S5, S9, S10, S11).
#include <algorithm>
#include <limits>

#include "runtime/runtime.hpp"

namespace soma::detail {
namespace {

constexpr int allocation_type_pinned = 1;
constexpr int allocation_type_managed = 2;
constexpr int location_type_device = 1;
constexpr int location_type_host = 2;
constexpr int location_type_host_numa = 3;
constexpr unsigned known_handle_types = 1 | 2 | 4 | 8;

status invalid(const std::string& message) { return status(error_code::invalid_value, message); }

}  // namespace

result<pool_object*> runtime::resolve_pool(std::uintptr_t handle) const {
  // As CUDA: a NULL pool is a bad argument; any other unknown value is a bad handle.
  if (handle == 0) return status(error_code::invalid_value, "the pool is NULL");
  pool_object* p = pools_.find(handle);
  if (p == nullptr) {
    return status(error_code::invalid_handle, "pool " + format_address(handle) +
                                                  " is not a live pool (destroyed, or never "
                                                  "created by somaMemPoolCreate)");
  }
  return p;
}

result<pool_object*> runtime::new_pool(const pool_properties& properties, bool is_default,
                                       std::string name) {
  const backend::device_properties& device =
      devices_[static_cast<std::size_t>(properties.device)]->properties;
  pool_config config;
  config.device = properties.device;
  config.name = std::move(name);
  const std::size_t granularity = device.granularity_bytes;
  config.max_size_bytes = properties.max_size_bytes == 0
                              ? device.total_memory_bytes
                              : round_up(properties.max_size_bytes, granularity);
  // Twice the cap: fragmentation then costs address space, not physical memory.
  config.reservation_bytes = config.max_size_bytes * 2;
  config.growth_step_bytes = round_up(std::max(device.growth_step_bytes, granularity), granularity);
  auto memory = std::make_unique<backend_memory_provider>(*backend_, properties.device,
                                                          properties.export_handle_types);
  auto created =
      std::make_unique<pool_object>(std::move(config), std::move(memory), properties, is_default);
  pool_object* p = created.get();
  const std::uintptr_t handle = pools_.add(p);
  if (handle == 0) return status(error_code::out_of_memory, "too many live pools");
  p->set_handle(handle);
  std::lock_guard lock(registry_mutex_);
  all_pools_.push_back(std::move(created));
  return p;
}

result<std::uintptr_t> runtime::create_pool(const raw_pool_properties& raw) {
  if (raw.allocation_type == allocation_type_managed)
    return status(error_code::not_supported, "somaMemPoolCreate: managed pools are not supported");
  if (raw.allocation_type != allocation_type_pinned)
    return invalid("somaMemPoolCreate: allocType " + std::to_string(raw.allocation_type) +
                   " is not somaMemAllocationTypePinned (1)");
  if (raw.location_type == location_type_host || raw.location_type == location_type_host_numa)
    return status(error_code::not_supported,
                  "somaMemPoolCreate: host and host-NUMA pools are not supported; use a device");
  if (raw.location_type != location_type_device)
    return invalid("somaMemPoolCreate: location.type " + std::to_string(raw.location_type) +
                   " is not somaMemLocationTypeDevice (1)");
  if (raw.location_id < 0 || raw.location_id >= device_count())
    return invalid("somaMemPoolCreate: location.id " + std::to_string(raw.location_id) +
                   " is not a device (there are " + std::to_string(device_count()) + ")");
  if ((raw.handle_types & ~known_handle_types) != 0)
    return invalid("somaMemPoolCreate: handleTypes " + std::to_string(raw.handle_types) +
                   " has unknown bits");
  const unsigned supported =
      devices_[static_cast<std::size_t>(raw.location_id)]->properties.supported_handle_types;
  if ((raw.handle_types & ~supported) != 0)
    return status(error_code::not_supported,
                  "somaMemPoolCreate: handleTypes " + std::to_string(raw.handle_types) +
                      " not supported by the " + backend_->name() + " backend (supported mask " +
                      std::to_string(supported) + ")");
  if (raw.has_win32_security_attributes)
    return invalid("somaMemPoolCreate: win32SecurityAttributes must be NULL");
  if (raw.usage != 0)
    return invalid("somaMemPoolCreate: usage " + std::to_string(raw.usage) + " must be 0");
  if (!raw.reserved_is_zero) return invalid("somaMemPoolCreate: reserved bytes must be zero");
  const std::size_t device_memory =
      devices_[static_cast<std::size_t>(raw.location_id)]->properties.total_memory_bytes;
  pool_properties properties;
  properties.device = raw.location_id;
  properties.export_handle_types = raw.handle_types;
  // A cap above the device's memory means the device's memory.
  properties.max_size_bytes = raw.max_size_bytes > device_memory ? 0 : raw.max_size_bytes;
  result<pool_object*> created = new_pool(properties, /*is_default=*/false, "");
  if (!created.ok()) return created.take_error();
  return created.value()->handle();
}

status runtime::destroy_pool(std::uintptr_t handle) {
  result<pool_object*> found = resolve_pool(handle);
  if (!found.ok()) return found.take_error();
  pool_object* p = found.value();
  if (p->is_default()) {
    return invalid("somaMemPoolDestroy: " + p->describe() +
                   " is a default pool and cannot be "
                   "destroyed");
  }
  if (!pools_.remove(handle)) return resolve_pool(handle).take_error();
  auto& current = devices_[static_cast<std::size_t>(p->config().device)]->current_pool;
  pool_object* expected = p;
  current.compare_exchange_strong(
      expected, devices_[static_cast<std::size_t>(p->config().device)]->default_pool);
  p->mark_destroyed();
  // S7: an imported pool lets go of its exporter now; its imported allocations stay until freed.
  if (p->imports() != nullptr) p->imports()->set_link(nullptr);
  // With nothing live and every free complete it goes now; otherwise after its last free.
  reap_destroyed_pools();
  return status::success();
}

result<std::uintptr_t> runtime::default_pool(int device) const {
  if (status checked = check_device(device); !checked.ok()) return checked;
  return devices_[static_cast<std::size_t>(device)]->default_pool->handle();
}

status runtime::set_device_pool(int device, std::uintptr_t pool_handle) {
  if (status checked = check_device(device); !checked.ok()) return checked;
  result<pool_object*> p = resolve_pool(pool_handle);
  if (!p.ok()) return p.take_error();
  if (p.value()->is_imported()) {
    return invalid("somaDeviceSetMemPool: " + p.value()->describe() +
                   " is an imported pool, "
                   "which cannot allocate and so cannot be a current pool");
  }
  if (p.value()->config().device != device) {
    return invalid("somaDeviceSetMemPool: " + p.value()->describe() +
                   " cannot be the current "
                   "pool of device " +
                   std::to_string(device));
  }
  devices_[static_cast<std::size_t>(device)]->current_pool.store(p.value(),
                                                                 std::memory_order_release);
  return status::success();
}

result<std::uintptr_t> runtime::device_pool(int device) const {
  if (status checked = check_device(device); !checked.ok()) return checked;
  const std::uintptr_t handle = acquire_current_pool(device)->handle();
  release_pool();
  return handle;
}

status runtime::set_pool_attribute(std::uintptr_t handle, pool_attribute attribute,
                                   const void* value) {
  result<pool_object*> found = resolve_pool(handle);
  if (!found.ok()) return found.take_error();
  pool_object& p = *found.value();
  if (p.is_imported()) {  // S7, as CUDA: an imported pool's attributes belong to its exporter
    return invalid("somaMemPoolSetAttribute: " + p.describe() +
                   " is an imported pool; its "
                   "attributes cannot be changed");
  }
  if (value == nullptr) return invalid("somaMemPoolSetAttribute: value is NULL");
  switch (attribute) {
    case pool_attribute::reuse_follow_event_dependencies:
    case pool_attribute::reuse_allow_opportunistic:
    case pool_attribute::reuse_allow_internal_dependencies: {
      const int flag = *static_cast<const int*>(value);
      if (flag != 0 && flag != 1)
        return invalid("somaMemPoolSetAttribute: a reuse policy takes 0 or 1, not " +
                       std::to_string(flag));
      p.set_reuse_policy(static_cast<int>(attribute), flag == 1);
      return status::success();
    }
    case pool_attribute::release_threshold:
      p.set_release_threshold_bytes(*static_cast<const std::uint64_t*>(value));
      return status::success();
    case pool_attribute::compact_before_growth: {
      const int flag = *static_cast<const int*>(value);
      if (flag != 0 && flag != 1)
        return invalid(
            "somaMemPoolSetAttribute: somaMemPoolAttrCompactBeforeGrowth takes 0 or 1, "
            "not " +
            std::to_string(flag));
      p.set_compaction(flag == 1);
      return status::success();
    }
    case pool_attribute::reserved_high:
    case pool_attribute::used_high: {
      const std::uint64_t reset = *static_cast<const std::uint64_t*>(value);
      if (reset != 0)
        return invalid(
            "somaMemPoolSetAttribute: a high watermark can only be set to 0 (reset), "
            "not " +
            std::to_string(reset));
      if (attribute == pool_attribute::reserved_high)
        p.reset_reserved_high();
      else
        p.reset_used_high();
      return status::success();
    }
    case pool_attribute::reserved_current:
    case pool_attribute::used_current:
      return invalid("somaMemPoolSetAttribute: attribute " +
                     std::to_string(static_cast<int>(attribute)) + " is read-only");
  }
  return invalid("somaMemPoolSetAttribute: unknown attribute " +
                 std::to_string(static_cast<int>(attribute)));
}

status runtime::get_pool_attribute(std::uintptr_t handle, pool_attribute attribute,
                                   void* value) const {
  result<pool_object*> found = resolve_pool(handle);
  if (!found.ok()) return found.take_error();
  const pool_object& p = *found.value();
  if (p.is_imported() && attribute >= pool_attribute::reuse_follow_event_dependencies &&
      attribute <= pool_attribute::release_threshold) {  // S7, as CUDA
    return invalid("somaMemPoolGetAttribute: " + p.describe() +
                   " is an imported pool; its "
                   "release threshold and reuse policies are the exporter's");
  }
  if (value == nullptr) return invalid("somaMemPoolGetAttribute: value is NULL");
  const pool_statistics stats = p.statistics();
  auto put64 = [value](std::uint64_t v) { *static_cast<std::uint64_t*>(value) = v; };
  switch (attribute) {
    case pool_attribute::reuse_follow_event_dependencies:
    case pool_attribute::reuse_allow_opportunistic:
    case pool_attribute::reuse_allow_internal_dependencies:
      *static_cast<int*>(value) = p.reuse_policy(static_cast<int>(attribute)) ? 1 : 0;
      return status::success();
    case pool_attribute::release_threshold:
      put64(p.release_threshold_bytes());
      return status::success();
    case pool_attribute::compact_before_growth:
      *static_cast<int*>(value) = p.compact_before_growth() ? 1 : 0;
      return status::success();
    case pool_attribute::reserved_current:
      put64(stats.reserved_bytes);
      return status::success();
    case pool_attribute::reserved_high:
      put64(stats.reserved_high_bytes);
      return status::success();
    case pool_attribute::used_current:
      put64(stats.used_bytes);
      return status::success();
    case pool_attribute::used_high:
      put64(stats.used_high_bytes);
      return status::success();
  }
  return invalid("somaMemPoolGetAttribute: unknown attribute " +
                 std::to_string(static_cast<int>(attribute)));
}

status runtime::trim_pool(std::uintptr_t handle, std::size_t keep_bytes) {
  result<pool_object*> found = resolve_pool(handle);
  if (!found.ok()) return found.take_error();
  if (found.value()->is_imported()) {  // S7, as CUDA
    return invalid("somaMemPoolTrimTo: " + found.value()->describe() +
                   " is an imported pool; "
                   "its memory is the exporter's to release");
  }
  found.value()->trim_to(keep_bytes);
  return status::success();
}

status runtime::set_pool_name(std::uintptr_t handle, const char* name) {
  result<pool_object*> found = resolve_pool(handle);
  if (!found.ok()) return found.take_error();
  if (name == nullptr) return invalid("somaMemPoolSetName: name is NULL");
  found.value()->set_name(name);
  return status::success();
}

}  // namespace soma::detail
