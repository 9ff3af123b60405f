// An optional record of every allocation and free PyTorch asks of the shim, for replaying
// PyTorch's allocation pattern against soma without a GPU (bench/trace_replay). Enabled by
// SOMA_TORCH_TRACE=<file>; off, it costs one relaxed load per call.
//
// Format, one event per line: "a <id> <bytes>" for an allocation, "f <id>" for its free, where
// <id> numbers live allocations in the order they were made (a freed pointer's id is retired).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <unordered_map>

namespace soma::torch_integration {

class allocation_trace {
 public:
  /// The process's trace; inactive unless SOMA_TORCH_TRACE names a writable file.
  static allocation_trace& instance();

  bool active() const noexcept { return file_ != nullptr; }
  void allocated(const void* pointer, std::size_t bytes);
  void freed(const void* pointer);

 private:
  allocation_trace();
  ~allocation_trace();

  std::FILE* file_ = nullptr;
  std::mutex mutex_;
  std::uint64_t next_id_ = 0;
  std::unordered_map<const void*, std::uint64_t> ids_;
};

}  // namespace soma::torch_integration
