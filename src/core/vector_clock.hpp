// What one stream knows to have happened before its tail, stream by stream (S11).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace soma::detail {

class stream_timeline;

/// For every other stream, the latest position known to happen before this point. Recording
/// an event copies a stream's clock; waiting on the event merges it into the waiter's clock,
/// so ordering is transitive (A -> event -> B -> event -> C lets C see A). Entries are sorted
/// by stream; streams never seen are at position 0. A value type, not thread-safe.
class vector_clock {
 public:
  struct entry {
    const stream_timeline* stream = nullptr;
    std::uint64_t position = 0;
  };

  std::uint64_t position_of(const stream_timeline* stream) const noexcept {
    auto it = find(stream);
    return it != entries_.end() && it->stream == stream ? it->position : 0;
  }

  /// Raises the entry of stream to at least position.
  void raise(const stream_timeline* stream, std::uint64_t position) {
    auto it = find(stream);
    if (it != entries_.end() && it->stream == stream) {
      it->position = std::max(it->position, position);
    } else {
      entries_.insert(it, entry{stream, position});
    }
  }

  /// Element-wise maximum with other.
  void merge(const vector_clock& other) {
    for (const entry& e : other.entries_) raise(e.stream, e.position);
  }

  const std::vector<entry>& entries() const noexcept { return entries_; }

 private:
  std::vector<entry>::iterator find(const stream_timeline* stream) {
    return std::lower_bound(entries_.begin(), entries_.end(), stream,
                            [](const entry& e, const stream_timeline* s) { return e.stream < s; });
  }
  std::vector<entry>::const_iterator find(const stream_timeline* stream) const {
    return std::lower_bound(entries_.begin(), entries_.end(), stream,
                            [](const entry& e, const stream_timeline* s) { return e.stream < s; });
  }

  std::vector<entry> entries_;
};

}  // namespace soma::detail
