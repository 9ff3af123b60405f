#include "runtime/import_table.hpp"

namespace soma::detail {

import_table::~import_table() = default;

std::shared_ptr<import_link> import_table::link() const {
  std::lock_guard lock(mutex_);
  return link_;
}

void import_table::set_link(std::shared_ptr<import_link> link) {
  std::shared_ptr<import_link> previous;
  {
    std::lock_guard lock(mutex_);
    previous = std::exchange(link_, std::move(link));
  }
  // previous (a connection) closes here, outside the lock.
}

block* import_table::find(std::uint64_t key) const {
  std::lock_guard lock(mutex_);
  auto found = live_keys_.find(key);
  if (found == live_keys_.end()) return nullptr;
  return &live_.at(found->second)->entry;
}

std::pair<block*, bool> import_table::add(std::uint64_t key, std::uintptr_t address,
                                          std::size_t bytes, release_function release) {
  block* existing_entry = nullptr;
  {
    std::lock_guard lock(mutex_);
    auto existing = live_keys_.find(key);
    if (existing == live_keys_.end()) {
      auto fresh = std::make_unique<mapping>();
      fresh->entry.address = address;
      fresh->entry.size_bytes = bytes;
      fresh->entry.requested_bytes = bytes;
      fresh->entry.set_state(block_state::live);
      fresh->key = key;
      fresh->release = std::move(release);
      block* entry = &fresh->entry;
      live_.emplace(address, std::move(fresh));
      live_keys_.emplace(key, address);
      return {entry, true};
    }
    existing_entry = &live_.at(existing->second)->entry;
  }
  // Another thread imported the same memory first: keep its mapping, drop this one.
  release();
  return {existing_entry, false};
}

std::pair<std::uintptr_t, std::size_t> import_table::containing(std::uintptr_t address) const {
  std::lock_guard lock(mutex_);
  auto after = live_.upper_bound(address);
  if (after == live_.begin()) return {0, 0};
  const mapping& m = *std::prev(after)->second;
  if (address >= m.entry.address + m.entry.requested_bytes) return {0, 0};
  return {m.entry.address, m.entry.requested_bytes};
}

void import_table::free(block* live, const stream_timeline& stream, std::uint64_t position) {
  std::lock_guard lock(mutex_);
  auto found = live_.find(live->address);
  if (found == live_.end() || &found->second->entry != live) return;
  std::unique_ptr<mapping> freed = std::move(found->second);
  live_.erase(found);
  live_keys_.erase(freed->key);
  freed->entry.set_state(block_state::detached);
  freed->freed = free_stamp{&stream, position};
  freed_.push_back(std::move(freed));
}

bool import_table::release_completed() {
  std::vector<std::unique_ptr<mapping>> done;
  bool empty = false;
  {
    std::lock_guard lock(mutex_);
    for (auto it = freed_.begin(); it != freed_.end();) {
      if ((*it)->freed.is_complete()) {
        done.push_back(std::move(*it));
        it = freed_.erase(it);
      } else {
        ++it;
      }
    }
    empty = live_.empty() && freed_.empty();
  }
  for (auto& m : done) m->release();  // unmapping takes its time: outside the lock
  return empty;
}

}  // namespace soma::detail
