#include "core/status.hpp"

#include <cstdio>

namespace soma::detail {

const std::string& status::no_message() noexcept {
  static const std::string empty;
  return empty;
}

std::string format_bytes(std::uint64_t bytes) {
  char text[64];
  constexpr double kib = 1024.0;
  if (bytes < 1024) {
    std::snprintf(text, sizeof text, "%llu B", static_cast<unsigned long long>(bytes));
  } else if (bytes < 1024ull * 1024) {
    std::snprintf(text, sizeof text, "%.1f KiB (%llu B)", static_cast<double>(bytes) / kib,
                  static_cast<unsigned long long>(bytes));
  } else if (bytes < 1024ull * 1024 * 1024) {
    std::snprintf(text, sizeof text, "%.1f MiB (%llu B)", static_cast<double>(bytes) / kib / kib,
                  static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(text, sizeof text, "%.2f GiB (%llu B)",
                  static_cast<double>(bytes) / kib / kib / kib,
                  static_cast<unsigned long long>(bytes));
  }
  return text;
}

std::string format_address(std::uintptr_t address) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(address));
  return text;
}

}  // namespace soma::detail
