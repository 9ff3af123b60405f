// What is asked of all pools at once about an address (S14), imported mappings included (S7).
#include <string>

#include "runtime/pool_registry.hpp"

namespace soma::detail {

status pool_registry::explain_unknown_pointer(std::uintptr_t address, const char* action) const {
  const std::string what = std::string(action) + "(" + format_address(address) + "): ";
  std::lock_guard lock(mutex_);
  for (const auto& p : pools_) {
    address_diagnosis d = p->diagnose(address);
    switch (d.what) {
      case address_diagnosis::kind::outside_pool:
        continue;
      case address_diagnosis::kind::interior_of_live:
        return status(error_code::invalid_value,
                      what + "an interior pointer, " + std::to_string(address - d.block_address) +
                          " bytes into the live allocation at " + format_address(d.block_address) +
                          " of " + format_bytes(d.block_bytes) + " in " + p->describe() +
                          "; pass the allocation's start");
      case address_diagnosis::kind::freed:
        return status(error_code::invalid_value, what + "not a live allocation: the memory at " +
                                                     format_address(d.block_address) + " in " +
                                                     p->describe() +
                                                     " was already freed (double free?)");
      case address_diagnosis::kind::unallocated:
        return status(error_code::invalid_value,
                      what + "not a live allocation: the address lies in " + p->describe() +
                          " but nothing is allocated there");
    }
  }
  return status(error_code::invalid_value,
                what + "not a live allocation: soma never returned this pointer");
}

const pool_object* pool_registry::find_interior(std::uintptr_t address, pointer_info* info) const {
  std::lock_guard lock(mutex_);
  for (const auto& p : pools_) {
    address_diagnosis d = p->diagnose(address);
    if (d.what != address_diagnosis::kind::interior_of_live) continue;
    if (address >= d.block_address + d.block_bytes) return nullptr;  // in the alignment padding
    info->base = d.block_address;
    info->requested_bytes = d.block_bytes;
    return p.get();
  }
  return nullptr;
}

bool pool_registry::owns_address(std::uintptr_t address) const {
  {
    std::lock_guard lock(mutex_);
    for (const auto& p : pools_) {
      if (p->owns_address(address)) return true;
    }
  }
  return find_imported(address, nullptr) != nullptr;
}

const pool_object* pool_registry::find_imported(std::uintptr_t address, pointer_info* info) const {
  if (!has_imported_pools_.load(std::memory_order_acquire)) return nullptr;
  std::lock_guard lock(mutex_);
  for (const auto& p : pools_) {
    if (p->imports() == nullptr) continue;
    const auto [base, bytes] = p->imports()->containing(address);
    if (base == 0) continue;
    if (info != nullptr) {
      info->base = base;
      info->requested_bytes = bytes;
    }
    return p.get();
  }
  return nullptr;
}

status pool_registry::free_imported(pool_object& owner, block* live,
                                    const stream_timeline& stream) {
  bool done = false;
  {
    // Under the registry lock: once the mapping is no longer live, a concurrent reap could
    // otherwise tear the (destroyed) pool down under this call.
    std::lock_guard lock(mutex_);
    // The mapping goes once the stream has run the work enqueued before this free (S2).
    owner.imports()->free(live, stream, stream.enqueued_position());
    done = release_imported(owner) && owner.is_destroyed();
  }
  if (done) reap();
  return status::success();
}

bool pool_registry::release_imported(pool_object& pool) {
  return pool.imports() == nullptr || pool.imports()->release_completed();
}

}  // namespace soma::detail
