#include "runtime/pool_sharing.hpp"

#include <string>

namespace soma::detail {
namespace {

// Compares without stopping at the first difference: how long a check takes says nothing
// about how many leading bytes of a guess were right.
bool same_nonce(const export_nonce& a, const export_nonce& b) noexcept {
  std::uint8_t difference = 0;
  for (std::size_t i = 0; i < a.size(); ++i) difference |= static_cast<std::uint8_t>(a[i] ^ b[i]);
  return difference == 0;
}

}  // namespace

// ---- export_table ---------------------------------------------------------------------------

std::uint64_t export_table::pool_id(std::uint64_t proposed) {
  std::lock_guard lock(mutex_);
  if (pool_id_ == 0) pool_id_ = proposed;
  return pool_id_;
}

export_record export_table::record_for(std::uintptr_t address, std::size_t bytes,
                                       const export_nonce& fresh) {
  std::lock_guard lock(mutex_);
  auto found = by_address_.find(address);
  if (found != by_address_.end() && found->second.bytes == bytes) return found->second;
  if (found != by_address_.end()) {  // a record the free did not see: never expected
    by_id_.erase(found->second.export_id);
    by_address_.erase(found);
    live_records_.fetch_sub(1, std::memory_order_relaxed);
  }
  const export_record record{
      .export_id = next_export_id_++, .nonce = fresh, .address = address, .bytes = bytes};
  by_address_.emplace(address, record);
  by_id_.emplace(record.export_id, address);
  live_records_.fetch_add(1, std::memory_order_relaxed);
  return record;
}

void export_table::forget(std::uintptr_t address) {
  if (live_records_.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard lock(mutex_);
  auto found = by_address_.find(address);
  if (found == by_address_.end()) return;
  by_id_.erase(found->second.export_id);
  by_address_.erase(found);
  live_records_.fetch_sub(1, std::memory_order_relaxed);
}

status export_table::with_live_record(std::uint64_t export_id, const export_nonce& nonce,
                                      std::size_t bytes,
                                      const std::function<status(const export_record&)>& use) {
  std::lock_guard lock(mutex_);
  const std::string which = "export #" + std::to_string(export_id);
  auto id = by_id_.find(export_id);
  if (id == by_id_.end()) {
    if (export_id != 0 && export_id < next_export_id_) {
      return status(error_code::invalid_value, "stale export data: the allocation exported as " +
                                                   which +
                                                   " has been freed by the exporting process");
    }
    return status(error_code::invalid_value,
                  "forged export data: " + which + " was never issued by the exporting pool");
  }
  const export_record& record = by_address_.at(id->second);
  if (!same_nonce(record.nonce, nonce)) {
    return status(error_code::invalid_value,
                  "forged or corrupted export data: the nonce of " + which +
                      " does not match the one the exporting pool issued");
  }
  if (record.bytes != bytes) {
    return status(error_code::invalid_value,
                  "forged or corrupted export data: " + which + " names " + format_bytes(bytes) +
                      ", the exported allocation has " + format_bytes(record.bytes));
  }
  return use(record);
}

// ---- import_table ---------------------------------------------------------------------------

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
