// Pools: creation with checked properties, default and current pools, use by allocations,
// deferred destruction (S3, S4, S5), and what is asked of all pools at once.
#include "runtime/pool_registry.hpp"

#include <algorithm>
#include <new>
#include <utility>

#include "runtime/history_notes.hpp"
#include "runtime/pool_hazards.hpp"

namespace soma::detail {
namespace {

constexpr unsigned known_handle_types = 1 | 2 | 4 | 8;

status invalid(const std::string& message) { return status(error_code::invalid_value, message); }

}  // namespace

pool_registry::pool_registry(backend::backend& platform, const device_table& devices,
                             pointer_table<pool_object>& pointers)
    : platform_(platform), devices_(devices), pointers_(pointers) {}

status pool_registry::start() {
  for (int device = 0; device < devices_.count(); ++device) {
    per_device_.push_back(std::make_unique<device_pools>());
    pool_properties properties;
    properties.device = device;
    properties.location = device;
    result<pool_object*> created = add(properties, /*is_default=*/true, "default");
    if (!created.ok()) return created.take_error();
    per_device_.back()->default_pool = created.value();
    per_device_.back()->current.store(created.value());
  }
  return status::success();
}

result<pool_object*> pool_registry::resolve(std::uintptr_t handle) const {
  // As CUDA: a NULL pool is a bad argument; any other unknown value is a bad handle.
  if (handle == 0) return status(error_code::invalid_value, "the pool is NULL");
  return handles_.resolve(handle, "pool", "somaMemPoolCreate");
}

result<pool_object*> pool_registry::add(const pool_properties& properties, bool is_default,
                                        std::string name) {
  const backend::memory_location where = properties.location;
  const backend::device_properties device =
      where.is_host() ? platform_.host_properties(where) : devices_.properties(properties.device);
  pool_config config;
  config.device = properties.device;
  if (where.is_host()) config.location = backend::describe(where);
  config.name = std::move(name);
  const std::size_t granularity = device.granularity_bytes;
  config.max_size_bytes = properties.max_size_bytes == 0
                              ? device.total_memory_bytes
                              : round_up(properties.max_size_bytes, granularity);
  // Twice the cap: fragmentation then costs address space, not physical memory.
  config.reservation_bytes = config.max_size_bytes * 2;
  config.growth_step_bytes = round_up(std::max(device.growth_step_bytes, granularity), granularity);
  auto memory =
      std::make_unique<backend_memory_provider>(platform_, where, properties.export_handle_types);
  auto created =
      std::make_unique<pool_object>(std::move(config), std::move(memory), properties, is_default);
  if (!properties.imported) created->keep_blocks_in(pointers_);
  pool_object* p = created.get();
  const std::uintptr_t handle = handles_.add(p);
  if (handle == 0) return status(error_code::out_of_memory, "too many live pools");
  p->set_handle(handle);
  if (history_notes::on()) history_notes::pool_created(*p);
  std::lock_guard lock(mutex_);
  pools_.push_back(std::move(created));
  return p;
}

result<std::uintptr_t> pool_registry::create(const raw_pool_properties& raw) {
  if (raw.allocation_type == allocation_type_managed)
    return status(error_code::not_supported, std::string("somaMemPoolCreate: ") + managed_reason);
  if (raw.allocation_type != allocation_type_pinned)
    return invalid("somaMemPoolCreate: allocType " + std::to_string(raw.allocation_type) +
                   " is not somaMemAllocationTypePinned (1)");
  if ((raw.handle_types & ~known_handle_types) != 0)
    return invalid("somaMemPoolCreate: handleTypes " + std::to_string(raw.handle_types) +
                   " has unknown bits");
  result<backend::memory_location> where = checked_location("somaMemPoolCreate", raw.location_type,
                                                            raw.location_id, raw.allocation_type);
  if (!where.ok()) return where.take_error();
  const bool host = where.value().is_host();
  if (host) {
    if (status ok = check_host_location("somaMemPoolCreate", where.value(), raw.handle_types);
        !ok.ok())
      return ok;
  }
  const backend::device_properties location =
      host ? platform_.host_properties(where.value()) : devices_.properties(raw.location_id);
  if (!host && (raw.handle_types & ~location.supported_handle_types) != 0)
    return status(error_code::not_supported,
                  "somaMemPoolCreate: handleTypes " + std::to_string(raw.handle_types) +
                      " not supported by the " + platform_.name() + " backend (supported mask " +
                      std::to_string(location.supported_handle_types) + ")");
  if (raw.has_win32_security_attributes)
    return invalid("somaMemPoolCreate: win32SecurityAttributes must be NULL");
  if (raw.usage != 0)
    return invalid("somaMemPoolCreate: usage " + std::to_string(raw.usage) + " must be 0");
  if (!raw.reserved_is_zero) return invalid("somaMemPoolCreate: reserved bytes must be zero");
  pool_properties properties;
  properties.device = host ? -1 : raw.location_id;
  properties.location = where.value();
  properties.export_handle_types = raw.handle_types;
  // A cap above the location's memory means its memory.
  properties.max_size_bytes =
      raw.max_size_bytes > location.total_memory_bytes ? 0 : raw.max_size_bytes;
  result<pool_object*> created = add(properties, /*is_default=*/false, "");
  if (!created.ok()) return created.take_error();
  return created.value()->handle();
}

result<pool_object*> pool_registry::create_imported(backend::memory_location where,
                                                    std::string name) {
  if (!where.is_host()) {
    if (status checked = devices_.check(where.id); !checked.ok()) return checked;
  }
  pool_properties properties;
  properties.device = where.is_host() ? -1 : where.id;
  properties.location = where;
  properties.imported = true;
  result<pool_object*> created = add(properties, /*is_default=*/false, std::move(name));
  if (created.ok()) has_imported_pools_.store(true, std::memory_order_release);
  return created;
}

status pool_registry::destroy(std::uintptr_t handle) {
  result<pool_object*> found = resolve(handle);
  if (!found.ok()) return found.take_error();
  pool_object* p = found.value();
  if (p->is_default()) {
    return invalid("somaMemPoolDestroy: " + p->describe() +
                   " is a default pool and cannot be destroyed");
  }
  if (!handles_.remove(handle)) return resolve(handle).take_error();
  // As CUDA: destroying a location's current pool makes its default pool current again.
  device_pools* owner = nullptr;
  if (p->properties().location.is_host()) {
    std::lock_guard lock(mutex_);
    auto found = per_host_location_.find(
        {static_cast<int>(p->properties().location.type), p->properties().location.id});
    if (found != per_host_location_.end()) owner = found->second.get();
  } else {
    owner = per_device_[static_cast<std::size_t>(p->config().device)].get();
  }
  if (owner != nullptr) {
    pool_object* expected = p;
    owner->current.compare_exchange_strong(expected, owner->default_pool);
  }
  p->mark_destroyed();
  // S7: an imported pool lets go of its exporter now; its imported allocations stay until freed.
  if (p->imports() != nullptr) p->imports()->set_link(nullptr);
  // With nothing live and every free complete it goes now; otherwise after its last free.
  reap();
  return status::success();
}

result<std::uintptr_t> pool_registry::default_pool(int device) const {
  if (status checked = devices_.check(device); !checked.ok()) return checked;
  return per_device_[static_cast<std::size_t>(device)]->default_pool->handle();
}

status pool_registry::set_current(int device, std::uintptr_t pool_handle) {
  if (status checked = devices_.check(device); !checked.ok()) return checked;
  result<pool_object*> p = resolve(pool_handle);
  if (!p.ok()) return p.take_error();
  if (p.value()->is_imported()) {
    return invalid("somaDeviceSetMemPool: " + p.value()->describe() +
                   " is an imported pool, which cannot allocate and so cannot be a current pool");
  }
  if (p.value()->config().device != device) {
    return invalid("somaDeviceSetMemPool: " + p.value()->describe() +
                   " cannot be the current pool of device " + std::to_string(device));
  }
  current_of(device).store(p.value(), std::memory_order_release);
  return status::success();
}

result<std::uintptr_t> pool_registry::current(int device) const {
  if (status checked = devices_.check(device); !checked.ok()) return checked;
  const std::uintptr_t handle = acquire_current(device)->handle();
  release();
  return handle;
}

// ---- use by allocations ---------------------------------------------------------------------

result<pool_object*> pool_registry::acquire(std::uintptr_t handle) const {
  if (pool_object* found = acquire_live(handle)) return found;
  result<pool_object*> refused = resolve(handle);  // why not
  if (refused.ok()) return acquire(handle);  // a handle issued since: take it as acquire_live does
  return refused;
}

status pool_registry::with_pool(std::uintptr_t handle,
                                const std::function<status(pool_object*)>& fn) const {
  std::lock_guard lock(mutex_);
  return fn(handles_.find(handle));
}

void pool_registry::for_each_live(const std::function<void(const pool_object&)>& fn) const {
  std::lock_guard lock(mutex_);
  for (const auto& p : pools_) {
    if (!p->is_destroyed()) fn(*p);
  }
}

// ---- deferred destruction and the stream_listener ---------------------------------------------

void pool_registry::reap() {
  std::unique_lock deleting(reap_mutex_);
  std::vector<std::unique_ptr<pool_object>> finished;
  {
    std::lock_guard lock(mutex_);
    for (auto it = pools_.begin(); it != pools_.end();) {
      pool_object& p = **it;
      const bool imports_released = release_imported(p);  // S7: unmaps what was freed
      // A pool another thread still uses (it found it current just before the destroy)
      // stays until a later reap; whatever it allocated keeps it alive anyway.
      if (p.is_destroyed() && imports_released && !pool_hazards::is_in_use(&p) &&
          p.try_release_everything()) {
        finished.push_back(std::move(*it));
        it = pools_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // finished pools are deleted here, outside the registry lock but under `deleting`.
  finished.clear();
}

void pool_registry::stream_destroyed(const stream_timeline& timeline) {
  std::lock_guard lock(mutex_);
  for (const auto& p : pools_) p->forget_stream(timeline);
}

void pool_registry::timeline_forgotten(const stream_timeline& timeline, free_stamp instead) {
  std::lock_guard lock(mutex_);
  for (const auto& p : pools_) p->forget_timeline(timeline, instead);
}

void pool_registry::synchronized() {
  // Giving memory back is what a synchronize does besides its work, not its result: where host
  // memory runs out for it, the memory stays reserved until the next synchronize or trim, and
  // the synchronize still succeeds (api-behaviour.md, "Host memory exhausted inside soma").
  try {
    // Shared: a concurrent reap cannot delete a pool while it releases memory here.
    std::shared_lock using_pools(reap_mutex_);
    std::vector<pool_object*> pools;
    {
      std::lock_guard lock(mutex_);
      pools.reserve(pools_.size());
      for (const auto& p : pools_) pools.push_back(p.get());
    }
    for (pool_object* p : pools) {
      try {
        p->on_synchronize();
      } catch (const std::bad_alloc&) {
        // This pool keeps its memory for now; the others still give theirs back.
      }
    }
  } catch (const std::bad_alloc&) {
  }
  try {
    reap();
  } catch (const std::bad_alloc&) {
    // Destroyed pools wait for the next reap.
  }
}

}  // namespace soma::detail
