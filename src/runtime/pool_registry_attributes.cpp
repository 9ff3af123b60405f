// Pool attributes, trim and names (S5, S9, S10, S11): somaMemPoolSetAttribute / GetAttribute,
// somaMemPoolTrimTo, somaMemPoolSetName.
#include <array>
#include <string>

#include "runtime/pool_registry.hpp"

#include "runtime/history_notes.hpp"

namespace soma::detail {
namespace {

status invalid(const std::string& message) { return status(error_code::invalid_value, message); }

/// The statistic a statistics attribute reads (S10); they are numbered in this order.
std::uint64_t statistic(const pool_statistics& stats, pool_attribute attribute) {
  constexpr std::array<std::uint64_t pool_statistics::*, 4> fields = {
      &pool_statistics::reserved_bytes, &pool_statistics::reserved_high_bytes,
      &pool_statistics::used_bytes, &pool_statistics::used_high_bytes};
  const auto index = static_cast<std::size_t>(static_cast<int>(attribute) -
                                              static_cast<int>(pool_attribute::reserved_current));
  return stats.*fields.at(index);
}

}  // namespace

status pool_registry::set_attribute(std::uintptr_t handle, pool_attribute attribute,
                                    const void* value) {
  result<pool_object*> found = resolve(handle);
  if (!found.ok()) return found.take_error();
  status changed = change_attribute(*found.value(), attribute, value);
  if (changed.ok() && history_notes::on()) history_notes::settings(*found.value());
  return changed;
}

status pool_registry::change_attribute(pool_object& p, pool_attribute attribute,
                                       const void* value) {
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
      p.set_release_threshold(*static_cast<const std::uint64_t*>(value));
      return status::success();
    case pool_attribute::remap_free_memory: {
      const int mode = *static_cast<const int*>(value);
      if (mode < 0 || mode > 2)
        return invalid(
            "somaMemPoolSetAttribute: somaMemPoolAttrRemapFreeMemory takes 0 (never), 1 (before "
            "growth) or 2 (instead of failing), not " +
            std::to_string(mode));
      p.set_remap(static_cast<remap_mode>(mode));
      return status::success();
    }
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
    case pool_attribute::remap_count:
    case pool_attribute::remapped_bytes:
    case pool_attribute::remap_kept_bytes:
    case pool_attribute::allocation_type:
    case pool_attribute::export_handle_types:
    case pool_attribute::location_id:
    case pool_attribute::location_type:
    case pool_attribute::max_pool_size:
      return invalid("somaMemPoolSetAttribute: attribute " +
                     std::to_string(static_cast<int>(attribute)) + " is read-only");
  }
  return invalid("somaMemPoolSetAttribute: unknown attribute " +
                 std::to_string(static_cast<int>(attribute)));
}

status pool_registry::get_attribute(std::uintptr_t handle, pool_attribute attribute,
                                    void* value) const {
  result<pool_object*> found = resolve(handle);
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
    case pool_attribute::remap_free_memory:
      *static_cast<int*>(value) = static_cast<int>(p.remap_free_memory());
      return status::success();
    case pool_attribute::remap_count:
      put64(p.remap_counts().remaps);
      return status::success();
    case pool_attribute::allocation_type:
      *static_cast<int*>(value) = allocation_type_pinned;
      return status::success();
    case pool_attribute::export_handle_types:  // an imported pool cannot export again
      *static_cast<int*>(value) =
          p.is_imported() ? 0 : static_cast<int>(p.properties().export_handle_types);
      return status::success();
    case pool_attribute::location_type:
      *static_cast<int*>(value) = static_cast<int>(p.properties().location.type);
      return status::success();
    case pool_attribute::location_id:
      *static_cast<int*>(value) = p.properties().location.id;
      return status::success();
    case pool_attribute::max_pool_size:  // 0: no cap but the location's memory
      put64(p.properties().max_size_bytes == 0 ? 0 : p.config().max_size_bytes);
      return status::success();
    case pool_attribute::remapped_bytes:
      put64(p.remap_counts().remapped_bytes);
      return status::success();
    case pool_attribute::remap_kept_bytes:
      put64(p.remap_counts().kept_in_place_bytes);
      return status::success();
    case pool_attribute::reserved_current:
    case pool_attribute::reserved_high:
    case pool_attribute::used_current:
    case pool_attribute::used_high:
      put64(statistic(stats, attribute));
      return status::success();
  }
  return invalid("somaMemPoolGetAttribute: unknown attribute " +
                 std::to_string(static_cast<int>(attribute)));
}

status pool_registry::trim(std::uintptr_t handle, std::size_t keep_bytes) {
  result<pool_object*> found = resolve(handle);
  if (!found.ok()) return found.take_error();
  if (found.value()->is_imported()) {  // S7, as CUDA
    return invalid("somaMemPoolTrimTo: " + found.value()->describe() +
                   " is an imported pool; "
                   "its memory is the exporter's to release");
  }
  found.value()->trim_to(keep_bytes);
  return status::success();
}

status pool_registry::set_name(std::uintptr_t handle, const char* name) {
  result<pool_object*> found = resolve(handle);
  if (!found.ok()) return found.take_error();
  if (name == nullptr) return invalid("somaMemPoolSetName: name is NULL");
  found.value()->set_name(name);
  return status::success();
}

}  // namespace soma::detail
