#include "runtime/pool_object.hpp"

namespace soma::detail {

status pool_object::adopt_mapping(std::uintptr_t address, std::size_t bytes) {
  return memory_.adopt_range(address, bytes);
}

void pool_object::forget_mapping(std::uintptr_t address) { memory_.forget_range(address); }

void pool_object::set_compaction(bool enabled) {
  set_compact_before_growth(enabled);
  update_commit_mode();
}

void pool_object::set_remap(remap_mode mode) {
  set_remap_free_memory(mode);
  update_commit_mode();
}

void pool_object::set_release_threshold(std::uint64_t bytes) {
  set_release_threshold_bytes(bytes);
  update_commit_mode();
}

void pool_object::update_commit_mode() {
  const bool granules =
      compact_before_growth() ||
      (remap_free_memory() == remap_mode::before_growth && release_threshold_bytes() > 0);
  // Under the pool lock: commits are made and given back under it.
  with_lock([&] { memory_.set_granule_commits(granules); });
}

pool_object::pool_object(pool_config config, std::unique_ptr<backend_memory_provider> memory,
                         pool_properties properties, bool is_default)
    : pool_object(std::move(config), memory.release(), properties, is_default) {}

pool_object::pool_object(pool_config config, backend_memory_provider* memory,
                         pool_properties properties, bool is_default)
    : pool(std::move(config), std::unique_ptr<memory_provider>(memory)),
      memory_(*memory),
      properties_(properties),
      is_default_(is_default),
      exports_(properties.export_handle_types != 0 ? std::make_unique<export_table>() : nullptr),
      imports_(properties.imported ? std::make_unique<import_table>() : nullptr) {}

pool_object::~pool_object() { detach_directory(); }

void pool_object::keep_blocks_in(pointer_table<pool_object>& pointers) {
  directory_ = std::make_unique<directory>(pointers, *this);
  set_directory(directory_.get());
}

backend::access_flags pool_object::access(int device) const { return memory_.access(device); }

status pool_object::set_access(int device, backend::access_flags flags) {
  return memory_.set_access(device, flags);
}

void pool_object::note_out_of_memory(out_of_memory_record record) {
  std::lock_guard lock(out_of_memory_mutex_);
  last_out_of_memory_ = std::move(record);
}

std::optional<out_of_memory_record> pool_object::last_out_of_memory() const {
  std::lock_guard lock(out_of_memory_mutex_);
  return last_out_of_memory_;
}

}  // namespace soma::detail
