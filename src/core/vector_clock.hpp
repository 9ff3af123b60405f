// What one stream knows to have happened before its tail, stream by stream (S11).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace soma::detail {

/// For every other stream, the latest position known to happen before this point. Recording
/// an event copies a stream's clock; waiting on the event merges it into the waiter's clock,
/// so ordering is transitive (A -> event -> B -> event -> C lets C see A). Streams are named
/// by their timeline's id, which is never reused, so an entry can outlive its stream without
/// being mistaken for another. Entries are sorted by id; streams never seen are at position 0.
/// A value type, not thread-safe.
class vector_clock {
 public:
  struct entry {
    std::uint64_t stream_id = 0;
    std::uint64_t position = 0;
  };

  std::uint64_t position_of(std::uint64_t stream_id) const noexcept {
    auto it = find(stream_id);
    return it != entries_.end() && it->stream_id == stream_id ? it->position : 0;
  }

  /// Raises the entry of stream_id to at least position.
  void raise(std::uint64_t stream_id, std::uint64_t position) {
    auto it = find(stream_id);
    if (it != entries_.end() && it->stream_id == stream_id) {
      it->position = std::max(it->position, position);
    } else {
      entries_.insert(it, entry{stream_id, position});
    }
  }

  /// Element-wise maximum with other.
  void merge(const vector_clock& other) {
    if (entries_.empty()) {
      entries_ = other.entries_;
      return;
    }
    // Both sorted: one walk raises every entry, when this clock knows every stream of other
    // (streams that wait on each other again and again); otherwise the rest is inserted.
    auto it = entries_.begin();
    for (const entry& e : other.entries_) {
      while (it != entries_.end() && it->stream_id < e.stream_id) ++it;
      if (it == entries_.end() || it->stream_id != e.stream_id) {
        for (const entry& rest : other.entries_) raise(rest.stream_id, rest.position);
        return;
      }
      it->position = std::max(it->position, e.position);
    }
  }

  /// Becomes from, with the entry of stream_id raised to at least position (an event's record:
  /// the stream's clock and its own position), in one pass over storage it keeps.
  void assign_raised(const vector_clock& from, std::uint64_t stream_id, std::uint64_t position) {
    if (&from == this) {
      raise(stream_id, position);
      return;
    }
    entries_.clear();
    entries_.reserve(from.entries_.size() + 1);
    bool placed = false;
    for (const entry& e : from.entries_) {
      if (!placed && e.stream_id >= stream_id) {
        placed = true;
        if (e.stream_id == stream_id) {
          entries_.push_back({stream_id, std::max(e.position, position)});
          continue;
        }
        entries_.push_back({stream_id, position});
      }
      entries_.push_back(e);
    }
    if (!placed) entries_.push_back({stream_id, position});
  }

  /// Drops the entries whose stream `keep` rejects (streams that are gone for good).
  template <typename Keep>
  void retain_if(Keep&& keep) {
    entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                  [&](const entry& e) { return !keep(e.stream_id); }),
                   entries_.end());
  }

  std::size_t size() const noexcept { return entries_.size(); }
  const std::vector<entry>& entries() const noexcept { return entries_; }

 private:
  std::vector<entry>::iterator find(std::uint64_t stream_id) {
    return std::lower_bound(entries_.begin(), entries_.end(), stream_id,
                            [](const entry& e, std::uint64_t id) { return e.stream_id < id; });
  }
  std::vector<entry>::const_iterator find(std::uint64_t stream_id) const {
    return std::lower_bound(entries_.begin(), entries_.end(), stream_id,
                            [](const entry& e, std::uint64_t id) { return e.stream_id < id; });
  }

  std::vector<entry> entries_;
};

}  // namespace soma::detail
