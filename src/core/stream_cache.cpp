#include "core/stream_cache.hpp"

#include <new>

#include "core/check.hpp"

namespace soma::detail {

stream_cache::stream_cache(std::size_t capacity_bytes)
    : bins_(initial_bin_slots), capacity_bytes_(capacity_bytes) {}

stream_cache::bin* stream_cache::find_bin(std::size_t size_bytes, bool create) {
  for (;;) {
    const std::size_t mask = bins_.size() - 1;
    std::size_t i = ((size_bytes >> 8) * 0x9E3779B97F4A7C15ull >> 32) & mask;
    for (; bins_[i].size_bytes != 0; i = (i + 1) & mask) {
      if (bins_[i].size_bytes == size_bytes) return &bins_[i];
    }
    if (!create) return nullptr;
    if ((bins_used_ + 1) * 2 <= bins_.size()) {
      bins_[i].size_bytes = size_bytes;
      ++bins_used_;
      return &bins_[i];
    }
    // Grow; bins stay until the next drain (a size seen once tends to come back soon).
    std::vector<bin> old(bins_.size() * 2);
    old.swap(bins_);
    bins_used_ = 0;
    for (const bin& b : old) {
      if (b.size_bytes == 0) continue;
      bin* moved = find_bin(b.size_bytes, true);
      moved->head = b.head;
    }
  }
}

block* stream_cache::drain() noexcept {
  const biased_lock::scope lock(mutex_);
  // Linked through next_in_bin, in bin order: a drain needs no host memory, so a pool whose
  // host memory ran out loses no block to it.
  block* first = nullptr;
  block** tail = &first;
  // Every bin is emptied and forgotten, and a table grown by many sizes goes back to its first
  // size, so the next drain walks only the sizes freed after this one: a drain runs on every
  // miss, and a stream whose shapes keep changing (PyTorch's variable-shape loop) frees
  // thousands of sizes.
  for (bin& b : bins_) {
    if (b.head != nullptr) {
      *tail = b.head;
      while (*tail != nullptr) tail = &(*tail)->next_in_bin;
      b.head = nullptr;
    }
    b.size_bytes = 0;
  }
  cached_bytes_ = 0;
  bins_used_ = 0;
  last_bin_ = 0;
  if (bins_.size() > initial_bin_slots) {
    try {
      std::vector<bin>(initial_bin_slots).swap(bins_);
    } catch (const std::bad_alloc&) {
      // The large table stays, empty: still correct, only slower to drain.
    }
  }
  return first;
}

std::int64_t stream_cache::take_used() noexcept {
  const biased_lock::scope lock(mutex_);
  const std::int64_t share = used_delta_bytes_.load(std::memory_order_relaxed);
  used_delta_bytes_.store(0, std::memory_order_release);
  return share;
}

std::size_t stream_cache::bin_slots() const {
  const biased_lock::scope lock(mutex_);
  return bins_.size();
}

std::size_t stream_cache::cached_bytes() const {
  const biased_lock::scope lock(mutex_);
  return cached_bytes_;
}

}  // namespace soma::detail
