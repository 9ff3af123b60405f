// Parsing and checking of the cpu backend's settings.
#include <cerrno>
#include <cstdlib>
#include <string>
#include <unistd.h>

#include "backend/cpu/cpu_backend.hpp"

namespace soma::detail::backend {
namespace {

// "256M", "4G", "65536", "64K" -> bytes; false on anything else.
bool parse_bytes(const char* text, std::size_t* bytes) {
  if (*text < '0' || *text > '9') return false;  // strtoull would accept "-1" as a huge value
  errno = 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text) return false;
  unsigned shift = 0;
  switch (*end) {
    case '\0':
      break;
    case 'k':
    case 'K':
      shift = 10;
      ++end;
      break;
    case 'm':
    case 'M':
      shift = 20;
      ++end;
      break;
    case 'g':
    case 'G':
      shift = 30;
      ++end;
      break;
    default:
      return false;
  }
  if (*end == 'i' || *end == 'B') ++end;  // accept "64KiB", "64KB" forms loosely
  if (*end == 'B') ++end;
  if (*end != '\0') return false;
  if (shift != 0 && value > (~0ull >> shift)) return false;
  *bytes = static_cast<std::size_t>(value << shift);
  return true;
}

status bad_setting(const char* variable, const char* text, const std::string& why) {
  return status(error_code::initialization_error,
                std::string("cpu backend: ") + variable + "='" + text + "' " + why);
}

std::string device_count_range() {
  return "a device count from 1 to " + std::to_string(max_cpu_device_count);
}

}  // namespace

status check_cpu_settings(const cpu_settings& given) {
  if (given.device_count < 0 || given.device_count > max_cpu_device_count) {
    return status(error_code::invalid_value, "deviceCount " + std::to_string(given.device_count) +
                                                 " is not " + device_count_range() +
                                                 " (or 0 to keep SOMA_CPU_DEVICES)");
  }
  return status::success();
}

namespace cpu {

result<resolved_settings> resolve_settings(const cpu_settings& given) {
  resolved_settings out;
  if (status ok = check_cpu_settings(given); !ok.ok())
    return status(error_code::initialization_error, "cpu backend: " + ok.message());
  if (given.device_count > 0) {
    out.device_count = given.device_count;
  } else if (const char* text = std::getenv("SOMA_CPU_DEVICES"); text && *text) {
    char* end = nullptr;
    const long count = std::strtol(text, &end, 10);
    if (*end != '\0' || count < 1 || count > max_cpu_device_count)
      return bad_setting("SOMA_CPU_DEVICES", text, "is not " + device_count_range());
    out.device_count = static_cast<int>(count);
  }
  if (given.device_memory_bytes > 0) {
    out.device_memory_bytes = given.device_memory_bytes;
  } else if (const char* text = std::getenv("SOMA_CPU_DEVICE_MEMORY"); text && *text) {
    if (!parse_bytes(text, &out.device_memory_bytes) || out.device_memory_bytes == 0)
      return bad_setting("SOMA_CPU_DEVICE_MEMORY", text, "is not a size such as 512M or 4G");
  }
  if (given.granularity_bytes > 0) {
    out.granularity_bytes = given.granularity_bytes;
  } else if (const char* text = std::getenv("SOMA_CPU_GRANULARITY"); text && *text) {
    if (!parse_bytes(text, &out.granularity_bytes))
      return bad_setting("SOMA_CPU_GRANULARITY", text, "is not a size such as 64K or 2M");
  }
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t g = out.granularity_bytes;
  if (g < page || (g & (g - 1)) != 0) {
    return status(error_code::initialization_error,
                  "cpu backend: granularity " + std::to_string(g) +
                      " B must be a power of two of at least the page size (" +
                      std::to_string(page) + " B)");
  }
  if (out.device_memory_bytes < g) {
    return status(error_code::initialization_error,
                  "cpu backend: device memory " + format_bytes(out.device_memory_bytes) +
                      " is smaller than the granularity " + format_bytes(g));
  }
  out.device_memory_bytes -= out.device_memory_bytes % g;
  return out;
}

}  // namespace cpu
}  // namespace soma::detail::backend
