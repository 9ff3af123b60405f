// What every benchmark program shares: timing helpers and the lines that name the machine.
#pragma once

#include <sys/utsname.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace soma_bench {

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// Requires: values is not empty.
inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

/// "256 B", "4 KiB", "64 MiB".
inline std::string size_name(std::size_t bytes) {
  constexpr std::size_t kib = std::size_t{1} << 10;
  constexpr std::size_t mib = std::size_t{1} << 20;
  char text[32];
  if (bytes >= mib) {
    std::snprintf(text, sizeof text, "%zu MiB", bytes / mib);
  } else if (bytes >= kib) {
    std::snprintf(text, sizeof text, "%zu KiB", bytes / kib);
  } else {
    std::snprintf(text, sizeof text, "%zu B", bytes);
  }
  return text;
}

inline std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const std::size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

/// "2026-11-30 12:21:07 UTC"
inline std::string utc_date_text() {
  const std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  return date;
}

/// The "cpu" and "kernel" lines of a benchmark's header.
inline void print_cpu_and_kernel() {
  utsname system_name{};
  uname(&system_name);
  std::printf("cpu         %s (%u hardware threads)\n", cpu_model().c_str(),
              std::thread::hardware_concurrency());
  std::printf("kernel      %s %s %s\n", system_name.sysname, system_name.release,
              system_name.machine);
}

/// Memory history's cost on one measure: `measure()` (ns per operation) with recording off
/// and on (a ring of 2^20 events), alternately, three times each; prints both medians and the
/// increase beside the goal (recording on adds at most 5 %). `record` is somaMemRecordHistory.
template <typename Measure, typename Record>
void print_history_cost(const std::string& scenario, Measure measure, Record record) {
  std::vector<double> off;
  std::vector<double> on;
  for (int round = 0; round < 3; ++round) {
    off.push_back(measure());
    record(std::size_t{1} << 20);
    on.push_back(measure());
    record(0);
  }
  const double off_ns = median(off);
  const double on_ns = median(on);
  const double increase = 100.0 * (on_ns - off_ns) / off_ns;
  std::printf("%-48s %9.1f %9.1f %+8.1f %%   goal <= +5 %%: %s\n", scenario.c_str(), off_ns, on_ns,
              increase, increase <= 5.0 ? "met" : "NOT met");
}

inline void print_history_header() {
  std::printf("\nmemory history (ns per pair)                      %9s %9s %10s\n", "off", "on",
              "increase");
}

}  // namespace soma_bench
