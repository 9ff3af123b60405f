#include "runtime/export_table.hpp"

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

}  // namespace soma::detail
