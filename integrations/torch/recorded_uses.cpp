#include "recorded_uses.hpp"

#include <algorithm>

namespace soma::torch_integration {

void recorded_uses::record(const void* base, somaStream_t stream) {
  std::lock_guard lock(mutex_);
  auto [at, inserted] = uses_.try_emplace(base);
  recorded_streams& entry = at->second;
  if (stream == nullptr) {
    entry.unordered = true;
  } else if (std::find(entry.streams.begin(), entry.streams.end(), stream) == entry.streams.end()) {
    entry.streams.push_back(stream);
  }
  if (inserted) entries_.store(uses_.size(), std::memory_order_release);
}

recorded_streams recorded_uses::take(const void* base) {
  std::lock_guard lock(mutex_);
  auto at = uses_.find(base);
  if (at == uses_.end()) return {};
  recorded_streams entry = std::move(at->second);
  uses_.erase(at);
  entries_.store(uses_.size(), std::memory_order_release);
  return entry;
}

}  // namespace soma::torch_integration
