// failure_log: what went wrong inside soma_torch, for a caller that cannot be told.
//
// PyTorch calls the allocator through plain C function pointers that return nothing or NULL,
// so a failure has nowhere to go but stderr. The first failure of each kind is printed with
// soma's message (every one with SOMA_TORCH_VERBOSE=1); the last message of any kind is kept
// for soma_torch_last_error. Thread-safe.
#pragma once

#include <soma/soma.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

namespace soma::torch_integration {

enum class failure_kind { start, allocate, free, record_stream, configure, cache, kinds };

class failure_log {
 public:
  failure_log();

  /// Keeps message as the last failure and prints it if it is the first of its kind.
  void report(failure_kind kind, const std::string& message);
  /// Keeps message as the last failure without printing it: for calls that return a status,
  /// whose caller is told.
  void remember(const std::string& message);
  /// Copies the last message into buffer (NUL-terminated, truncated); returns its length.
  std::size_t copy_last(char* buffer, std::size_t size) const;

 private:
  mutable std::mutex mutex_;
  std::string last_;
  std::array<bool, static_cast<std::size_t>(failure_kind::kinds)> printed_{};
  bool verbose_ = false;
};

/// "0x7f3a00000000"
std::string format_address(std::uintptr_t value);
inline std::string format_address(const void* pointer) {
  return format_address(reinterpret_cast<std::uintptr_t>(pointer));
}
/// "512 B", "1.5 KiB", "96.0 MiB", "2.00 GiB"
std::string format_bytes(std::uint64_t bytes);

/// "somaErrorX: <the calling thread's last soma message>", read right after the failed call.
std::string describe_soma_error(somaError_t status);

}  // namespace soma::torch_integration
