#include "failure_log.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace soma::torch_integration {

failure_log::failure_log() {
  const char* verbose = std::getenv("SOMA_TORCH_VERBOSE");
  verbose_ = verbose != nullptr && std::strcmp(verbose, "0") != 0 && verbose[0] != '\0';
}

void failure_log::report(failure_kind kind, const std::string& message) {
  bool print = false;
  {
    std::lock_guard lock(mutex_);
    last_ = message;
    bool& printed = printed_[static_cast<std::size_t>(kind)];
    print = verbose_ || !printed;
    printed = true;
  }
  if (!print) return;
  std::fprintf(stderr, "soma_torch: %s%s\n", message.c_str(),
               verbose_ ? ""
                        : " (later failures of this kind are not printed; "
                          "SOMA_TORCH_VERBOSE=1 prints each)");
}

void failure_log::remember(const std::string& message) {
  std::lock_guard lock(mutex_);
  last_ = message;
}

std::size_t failure_log::copy_last(char* buffer, std::size_t size) const {
  std::lock_guard lock(mutex_);
  if (buffer != nullptr && size > 0) {
    const std::size_t copied = std::min(size - 1, last_.size());
    std::memcpy(buffer, last_.data(), copied);
    buffer[copied] = '\0';
  }
  return last_.size();
}

std::string format_address(std::uintptr_t value) {
  std::array<char, 24> text{};
  std::snprintf(text.data(), text.size(), "0x%llx", static_cast<unsigned long long>(value));
  return text.data();
}

std::string format_bytes(std::uint64_t bytes) {
  std::array<char, 32> text{};
  const auto value = static_cast<double>(bytes);
  if (bytes < 1024) {
    std::snprintf(text.data(), text.size(), "%llu B", static_cast<unsigned long long>(bytes));
  } else if (bytes < (std::uint64_t{1} << 20)) {
    std::snprintf(text.data(), text.size(), "%.1f KiB", value / 1024.0);
  } else if (bytes < (std::uint64_t{1} << 30)) {
    std::snprintf(text.data(), text.size(), "%.1f MiB", value / (1024.0 * 1024.0));
  } else {
    std::snprintf(text.data(), text.size(), "%.2f GiB", value / (1024.0 * 1024.0 * 1024.0));
  }
  return text.data();
}

std::string describe_soma_error(somaError_t status) {
  const char* name = somaGetErrorName(status);
  const char* message = somaGetLastErrorMessage();
  std::string text = name != nullptr ? name : "somaError?";
  if (message != nullptr && message[0] != '\0') {
    text += ": ";
    text += message;
  }
  return text;
}

}  // namespace soma::torch_integration
