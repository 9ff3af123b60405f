// staging_buffers: somaMallocHost buffers (host_buffer) for the copies to and from pool memory
// of the model-based tests, recycled by power-of-two capacity: page-locking memory on cuda is
// slow. A buffer is given back only once the stream that used it is known complete. Free them
// (destroy the staging_buffers) only after the device was synchronized: freeing page-locked
// memory may wait for the device, which a held stream would never let finish.
//
// Requires: the including binary links `soma`.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "host_words.hpp"

namespace soma_test {

class staging_buffers {
 public:
  /// A buffer of at least `bytes` (at least 4 KiB, a power of two), recycled where one is spare.
  std::unique_ptr<host_buffer> take(std::size_t bytes) {
    const std::size_t capacity = std::bit_ceil(std::max<std::size_t>(bytes, 4096));
    std::vector<std::unique_ptr<host_buffer>>& spare = spare_[capacity];
    if (spare.empty()) return std::make_unique<host_buffer>(capacity);
    std::unique_ptr<host_buffer> buffer = std::move(spare.back());
    spare.pop_back();
    return buffer;
  }

  /// Keeps `buffer` (null: nothing) for a later take().
  void give_back(std::unique_ptr<host_buffer> buffer) {
    if (buffer != nullptr) spare_[buffer->size()].push_back(std::move(buffer));
  }

 private:
  std::map<std::size_t, std::vector<std::unique_ptr<host_buffer>>> spare_;
};

}  // namespace soma_test
