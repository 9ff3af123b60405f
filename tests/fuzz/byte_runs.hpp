// What the bytes of one live allocation must be, as runs of equal bytes: memsets write a run,
// copies take runs from another allocation, and bytes nothing wrote yet are unknown (a pool
// hands out memory with whatever it held). check() compares memory against the runs.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace soma_fuzz {

class byte_runs {
 public:
  static constexpr int kUnknown = -1;

  explicit byte_runs(std::size_t size) : size_(size) {
    if (size != 0) runs_.push_back({size, kUnknown});
  }

  std::size_t size() const { return size_; }

  /// Bytes [offset, offset + length) become value (0..255, or kUnknown).
  void set(std::size_t offset, std::size_t length, int value) {
    if (length == 0) return;
    split_at(offset);
    split_at(offset + length);
    std::vector<run> merged;
    std::size_t start = 0;
    for (const run& r : runs_) {
      const bool inside = start >= offset && r.end <= offset + length;
      merged.push_back({r.end, inside ? value : r.value});
      start = r.end;
    }
    runs_ = std::move(merged);
    coalesce();
  }

  /// The first count bytes become those of source's first count bytes (a copy).
  void copy_from(const byte_runs& source, std::size_t count) {
    std::size_t start = 0;
    for (const run& r : source.runs_) {
      if (start >= count) break;
      set(start, std::min(r.end, count) - start, r.value);
      start = r.end;
    }
  }

  /// Offset of the first byte of memory that differs from a known run, or size() if none.
  std::size_t first_mismatch(const void* memory) const {
    const auto* bytes = static_cast<const unsigned char*>(memory);
    std::size_t start = 0;
    for (const run& r : runs_) {
      if (r.value != kUnknown) {
        const std::size_t bad =
            mismatch_in(bytes + start, r.end - start, static_cast<unsigned char>(r.value));
        if (bad != r.end - start) return start + bad;
      }
      start = r.end;
    }
    return size_;
  }

  /// The value the runs give byte offset (kUnknown if nothing wrote it).
  int expected_at(std::size_t offset) const {
    for (const run& r : runs_)
      if (offset < r.end) return r.value;
    return kUnknown;
  }

 private:
  struct run {
    std::size_t end;  // one past the run's last byte; runs are contiguous from 0
    int value;
  };

  void split_at(std::size_t offset) {
    if (offset == 0 || offset >= size_) return;
    for (std::size_t i = 0; i < runs_.size(); ++i) {
      const std::size_t start = i == 0 ? 0 : runs_[i - 1].end;
      if (offset > start && offset < runs_[i].end) {
        runs_.insert(runs_.begin() + static_cast<std::ptrdiff_t>(i), {offset, runs_[i].value});
        return;
      }
    }
  }

  void coalesce() {
    std::vector<run> out;
    for (const run& r : runs_) {
      if (!out.empty() && out.back().value == r.value)
        out.back().end = r.end;
      else
        out.push_back(r);
    }
    runs_ = std::move(out);
  }

  // memcmp against a block of the expected byte: far faster than a byte loop under ASan.
  static std::size_t mismatch_in(const unsigned char* bytes, std::size_t length,
                                 unsigned char value) {
    unsigned char block[4096];
    std::memset(block, value, sizeof block);
    for (std::size_t done = 0; done < length; done += sizeof block) {
      const std::size_t chunk = std::min(sizeof block, length - done);
      if (std::memcmp(bytes + done, block, chunk) == 0) continue;
      for (std::size_t i = 0; i < chunk; ++i)
        if (bytes[done + i] != value) return done + i;
    }
    return length;
  }

  std::size_t size_;
  std::vector<run> runs_;
};

}  // namespace soma_fuzz
